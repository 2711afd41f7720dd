"""The process's board of control snapshots, and the poller that keeps a running phase's flags current.

The store is a stand-in that counts reads: what is checked is when the poller reads and what it applies."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from resilient.agents.base import PhaseContext
from resilient.engine.run.batching import ControlPoller
from resilient.storage.controls import ControlBoard
from resilient.storage.feed import CommittedFeed
from resilient.storage.ports import Control

IDLE = Control("in_progress", False, 0)
CANCELLED = Control("in_progress", True, 0)
STEERED = Control("in_progress", False, 1)


class CountingStore:
    """``get_control`` returns whatever the row holds now; every call is counted."""

    def __init__(self, row: Control = IDLE) -> None:
        self.row = row
        self.reads = 0

    async def get_control(self, response_id: str) -> Control:
        self.reads += 1
        await asyncio.sleep(0)
        return self.row


def context() -> PhaseContext:
    fields: dict[str, Any] = {"request": None, "plan": [], "phase_index": 0, "is_recovery": False,
                              "output_so_far": []}
    return PhaseContext(**fields)


def test_a_snapshot_from_an_earlier_started_request_does_not_replace_a_later_one() -> None:
    board = ControlBoard()
    board.observe("r", CANCELLED, started_at=10.0)  # a cancel's CAS write
    board.observe("r", IDLE, started_at=9.0)  # a read that started before it and finished after
    seen = board.latest("r")
    assert seen is not None and seen.control == CANCELLED and seen.at == 10.0
    board.observe("r", STEERED, started_at=11.0)
    assert board.fresh("r", max_age_s=1.0, now=11.5) == STEERED


def test_fresh_only_within_the_age_bound_and_forget_drops_the_snapshot() -> None:
    board = ControlBoard()
    board.observe("r", IDLE, started_at=100.0)
    assert board.fresh("r", max_age_s=1.0, now=100.9) == IDLE
    assert board.fresh("r", max_age_s=1.0, now=101.1) is None
    assert board.fresh("other", max_age_s=1.0, now=100.0) is None
    board.forget("r")
    assert board.latest("r") is None


def test_the_board_is_bounded_oldest_first() -> None:
    board = ControlBoard(capacity=2)
    for n, rid in enumerate(("a", "b", "c")):
        board.observe(rid, IDLE, started_at=float(n))
    assert board.latest("a") is None
    assert board.latest("b") is not None and board.latest("c") is not None


async def test_wait_returns_on_a_new_snapshot_and_otherwise_after_the_timeout() -> None:
    board = ControlBoard()
    waiter = asyncio.create_task(board.wait("r", 30.0))
    await asyncio.sleep(0.01)
    assert not waiter.done()
    board.observe("r", CANCELLED, started_at=time.monotonic())
    await asyncio.wait_for(waiter, 1.0)
    started = time.monotonic()
    await board.wait("r", 0.05)
    assert time.monotonic() - started >= 0.04


async def test_a_change_handled_in_this_process_reaches_the_phase_without_a_read() -> None:
    board, store, ctx = ControlBoard(), CountingStore(), context()
    board.observe("r", IDLE, started_at=time.monotonic())  # the phase's start snapshot
    poller = ControlPoller(store, "r", ctx, interval_s=30.0, load=CommittedFeed(), controls=board)  # type: ignore[arg-type]
    poller.start()
    try:
        await asyncio.sleep(0.02)
        assert not ctx.should_stop
        board.observe("r", STEERED, started_at=time.monotonic())  # a steering turn's CAS, handled here
        for _ in range(100):
            if ctx.should_stop:
                break
            await asyncio.sleep(0.005)
        assert ctx.pending_input_count == 1 and ctx.should_stop
        assert store.reads == 0 and poller.reads == 0
    finally:
        await poller.stop()


async def test_a_change_made_elsewhere_is_read_once_the_newest_snapshot_is_older_than_the_interval() -> None:
    board, store, ctx = ControlBoard(), CountingStore(), context()
    board.observe("r", IDLE, started_at=time.monotonic())
    poller = ControlPoller(store, "r", ctx, interval_s=0.1, load=CommittedFeed(), controls=board)  # type: ignore[arg-type]
    poller.start()
    try:
        store.row = CANCELLED  # another instance cancelled: nothing in this process knows
        await asyncio.sleep(0.05)
        assert not ctx.cancelled and store.reads == 0
        for _ in range(100):
            if ctx.cancelled:
                break
            await asyncio.sleep(0.01)
        assert ctx.cancelled and store.reads >= 1
        seen = board.latest("r")
        assert seen is not None and seen.control == CANCELLED  # the read told the board
        reads = store.reads
        await asyncio.sleep(0.25)
        later_reads = store.reads - reads
        assert later_reads >= 1  # it keeps reading once per interval (0.1 s) ...
        assert later_reads <= 4  # ... and does not spin: a poller that reads in a loop makes hundreds
    finally:
        await poller.stop()


async def test_a_late_read_does_not_undo_a_newer_snapshot() -> None:
    board, ctx = ControlBoard(), context()

    class SlowStore(CountingStore):
        async def get_control(self, response_id: str) -> Control:
            self.reads += 1
            row = self.row  # what the row holds when this read starts
            await asyncio.sleep(0.05)
            return row

    store = SlowStore()
    poller = ControlPoller(store, "r", ctx, interval_s=0.01, load=CommittedFeed(), controls=board)  # type: ignore[arg-type]
    board.observe("r", IDLE, started_at=time.monotonic() - 1.0)  # stale: the poller reads at once
    poller.start()
    try:
        for _ in range(100):
            if store.reads:
                break
            await asyncio.sleep(0.001)
        store.row = CANCELLED  # a cancel's write, while the read is out
        board.observe("r", CANCELLED, started_at=time.monotonic())
        await asyncio.sleep(0.08)  # the slow read (started before the cancel) has come back by now
        assert store.reads >= 2 and ctx.cancelled
        seen = board.latest("r")
        assert seen is not None and seen.control == CANCELLED
    finally:
        await poller.stop()


def test_the_control_interval_is_a_bounded_setting() -> None:
    import pytest

    from resilient.engine.run.batching import Tuning
    from resilient.settings import Settings

    assert Tuning.from_settings(Settings.from_env({})).control_interval_s == 1.0
    assert Tuning.from_settings(Settings.from_env({"RESILIENT_CONTROL_INTERVAL_MS": "250"})).control_interval_s == 0.25
    for bad in ("5", "60000", "-1"):
        with pytest.raises(ValueError, match="RESILIENT_CONTROL_INTERVAL_MS"):
            Settings.from_env({"RESILIENT_CONTROL_INTERVAL_MS": bad})
