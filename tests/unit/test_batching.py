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
    target.gate.clear()  # storage is slow: the first append stays in flight
    appender = Appender(target, Tuning(flush_interval_s=0.0), load=CommittedFeed())
    appender.add(event(0))
    await asyncio.wait_for(target.in_flight.wait(), 5)
    for n in range(1, 100):
        appender.add(event(n))  # all of these arrive while that append is in flight
    target.gate.set()
    await appender.finish([{"type": "response.output_item.done"}])
    assert [[e.get("n") for e in batch] for batch in target.batches] == [[0], [*range(1, 100), None]]
    assert target.batches[-1][-1] == {"type": "response.output_item.done"}
    assert appender.appends == 2


async def test_nothing_is_appended_before_the_window_and_the_closing_events_go_with_the_last_deltas() -> None:
    target = GatedTarget()
    appender = Appender(target, Tuning(flush_interval_s=30.0), load=CommittedFeed())
    for n in range(10):
        appender.add(event(n))
        await asyncio.sleep(0)
    await asyncio.sleep(0.05)
    assert target.batches == []  # the window (30 s) has not passed: the deltas wait
    await appender.finish([{"type": "closing"}])  # the phase ends: everything goes out at once
    assert [len(batch) for batch in target.batches] == [11] and target.batches[0][-1] == {"type": "closing"}


async def test_a_failed_append_surfaces_at_the_next_add_or_at_finish() -> None:
    target = GatedTarget(fail=True)
    appender = Appender(target, Tuning(flush_interval_s=0.0), load=CommittedFeed())
    appender.add(event(0))
    await asyncio.sleep(0.02)
    with pytest.raises(RuntimeError):
        appender.add(event(1))
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
