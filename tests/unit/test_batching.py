"""Group-committed appends: one append in flight, the rest ride in the next; the window widens under load.
The storage side is a stand-in whose appends the test holds open: what is checked is the batching."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from contextlib import ExitStack

import pytest

from resilient.engine.run.batching import MAX_LOAD_FACTOR, Appender, Tuning
from resilient.storage.feed import CommittedFeed
from resilient.storage.ports import JsonDict


class GatedTarget:
    """Records every append; an append waits until the test opens the gate (a slow storage round trip)."""

    def __init__(self, fail: bool = False) -> None:
        self.batches: list[list[JsonDict]] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.in_flight = asyncio.Event()
        self.fail = fail

    async def append(self, events: Sequence[JsonDict]) -> object:
        if self.fail:
            raise RuntimeError("lost the log")
        self.in_flight.set()
        await self.gate.wait()
        self.batches.append(list(events))
        return None


def event(n: int) -> JsonDict:
    return {"type": "response.output_text.delta", "n": n}


async def test_events_that_arrive_during_an_append_ride_in_the_next_one() -> None:
    target = GatedTarget()
    appender = Appender(target, Tuning(flush_interval_s=0.0), load=CommittedFeed())
    appender.add([event(0)])
    await appender.open()
    target.in_flight.clear()
    target.gate.clear()  # storage is slow: the next append stays in flight
    appender.add([event(1)])
    await asyncio.wait_for(target.in_flight.wait(), 5)
    for n in range(2, 100):
        appender.add([event(n)])  # all of these arrive while that append is in flight
    target.gate.set()
    await appender.finish([{"type": "response.output_item.done"}])
    assert [[e.get("n") for e in batch] for batch in target.batches] == [[0], [1], [*range(2, 100), None]]
    assert target.batches[-1][-1] == {"type": "response.output_item.done"}
    assert appender.appends == 3


async def test_nothing_is_appended_before_the_window_and_the_closing_events_go_with_the_last_deltas() -> None:
    target = GatedTarget()
    appender = Appender(target, Tuning(flush_interval_s=30.0), load=CommittedFeed())
    appender.add([event(0)])
    await appender.open()
    for n in range(1, 10):
        appender.add([event(n)])
        await asyncio.sleep(0)
    await asyncio.sleep(0.05)
    assert len(target.batches) == 1  # the window (30 s) has not passed since the opening append: the rest wait
    await appender.finish([{"type": "closing"}])  # the phase ends: everything goes out at once
    assert [len(batch) for batch in target.batches] == [1, 10] and target.batches[1][-1] == {"type": "closing"}


async def test_an_appender_not_opened_collects_and_its_finish_is_the_only_append() -> None:
    """An agent that never waits: its events and the closing events are one append."""
    target = GatedTarget()
    appender = Appender(target, Tuning(flush_interval_s=0.0), load=CommittedFeed())
    for n in range(40):
        appender.add([event(n)])
        await asyncio.sleep(0)
    await asyncio.sleep(0.02)
    assert target.batches == [] and appender.waiting and not appender.opened
    await appender.finish([{"type": "closing"}])
    assert [len(batch) for batch in target.batches] == [41] and appender.appends == 1
    assert not appender.waiting


async def test_open_appends_what_was_collected_inline_and_only_once() -> None:
    target = GatedTarget()
    appender = Appender(target, Tuning(flush_interval_s=30.0, flush_max_events=3), load=CommittedFeed())
    await appender.open()  # nothing collected: nothing to claim with yet
    assert not appender.opened and target.batches == []
    appender.add([event(0), event(1)])
    assert not appender.full
    appender.add([event(2)])
    assert appender.full  # the caller opens now rather than collect more
    await appender.open()
    assert appender.opened and target.batches == [[event(0), event(1), event(2)]]
    await appender.open()  # a second call appends nothing
    assert len(target.batches) == 1
    await appender.finish([])


async def test_a_failed_append_surfaces_from_open_the_next_add_or_finish() -> None:
    target = GatedTarget(fail=True)
    appender = Appender(target, Tuning(flush_interval_s=0.0), load=CommittedFeed())
    appender.add([event(0)])
    with pytest.raises(RuntimeError):
        await appender.open()  # the claim is inline: its failure reaches the pump
    target = GatedTarget()
    appender = Appender(target, Tuning(flush_interval_s=0.0), load=CommittedFeed())
    appender.add([event(0)])
    await appender.open()
    target.fail = True  # a later append fails in the background
    appender.add([event(1)])
    await asyncio.sleep(0.02)
    with pytest.raises(RuntimeError):
        appender.add([event(2)])
    with pytest.raises(RuntimeError):
        await appender.finish([])


async def test_the_window_widens_while_many_phases_stream_in_the_process() -> None:
    feed = CommittedFeed()
    appender = Appender(GatedTarget(), Tuning(flush_interval_s=0.2), load=feed)
    assert appender.window() == pytest.approx(0.2)
    with ExitStack() as stack:
        for n in range(16):
            stack.enter_context(feed.writing(f"resp_{n}"))
        assert appender.window() == pytest.approx(0.4)
        for n in range(16, 200):
            stack.enter_context(feed.writing(f"resp_{n}"))
        assert appender.window() == pytest.approx(0.2 * MAX_LOAD_FACTOR)
    assert appender.window() == pytest.approx(0.2)
