"""A phase attempt that finds the log ending inside an item: takes a dead writer's log over at once, waits for
a live one (real Azurite; the storage service's Last-Modified tells how long ago the log was written)."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from resilient.engine.run.liveness import Liveness, behind_live_writer
from resilient.protocol.items import output_message
from resilient.storage.factory import Storage
from resilient.storage.ports import EventWriter
from tests.integration.test_eventlog import created, delta

pytestmark = pytest.mark.azurite

LIVENESS = Liveness(quiet_s=1.5, poll_s=0.1)


async def _item_left_open(storage: Storage, rid: str) -> EventWriter:
    writer = await storage.events.create(rid, [created()])
    await writer.append([{"type": "response.output_item.added", "output_index": 0,
                          "item": {"type": "message", "id": "msg_1", "status": "in_progress"}}, delta()])
    return writer


async def _keep_writing(writer: EventWriter, seconds: float) -> None:
    """A live attempt: a delta every 0.2 s (the default append window) for ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        await writer.append([delta()])


async def test_a_log_quiet_for_longer_than_the_window_is_taken_over_at_once(storage: Storage, rid: str) -> None:
    await _item_left_open(storage, rid)
    await asyncio.sleep(LIVENESS.quiet_s + 0.2)
    opened = await storage.events.open_writer(rid)
    assert opened.written_at is not None
    calls = storage.items.storage_calls
    started = time.monotonic()
    found = await behind_live_writer(storage.events, storage.items, rid, 0, opened, LIVENESS)
    assert found is opened and time.monotonic() - started < 0.1
    assert storage.items.storage_calls == calls  # a crash recovery pays nothing for the check


async def test_a_live_writer_that_checkpoints_the_phase_makes_this_attempt_a_duplicate(
        storage: Storage, rid: str) -> None:
    live = await _item_left_open(storage, rid)
    opened = await storage.events.open_writer(rid)
    waiting = asyncio.create_task(behind_live_writer(storage.events, storage.items, rid, 0, opened, LIVENESS))
    await _keep_writing(live, 2.0)  # longer than quiet_s: only the appends keep it waiting
    assert not waiting.done()
    item = output_message("msg_1", "done")
    await storage.items.put_output_item(rid, 0, item)
    found = await asyncio.wait_for(waiting, 2.0)
    assert isinstance(found, list) and found[0]["id"] == "msg_1"


async def test_a_live_writer_that_stops_is_taken_over_once_the_log_went_quiet(storage: Storage, rid: str) -> None:
    live = await _item_left_open(storage, rid)
    opened = await storage.events.open_writer(rid)
    waiting = asyncio.create_task(behind_live_writer(storage.events, storage.items, rid, 0, opened, LIVENESS))
    await _keep_writing(live, 0.8)
    stopped = time.monotonic()
    found = await asyncio.wait_for(waiting, 5.0)
    assert not isinstance(found, list)
    assert time.monotonic() - stopped >= LIVENESS.quiet_s - LIVENESS.poll_s
    assert found.next_sequence_number == live.next_sequence_number  # a fresh writer at the log's real end


async def test_waiting_ends_at_the_phase_deadline(storage: Storage, rid: str) -> None:
    live = await _item_left_open(storage, rid)
    opened = await storage.events.open_writer(rid)
    writing = asyncio.create_task(_keep_writing(live, 3.0))
    started = time.monotonic()
    found = await behind_live_writer(storage.events, storage.items, rid, 0, opened, LIVENESS,
                                     deadline=started + 0.5)
    assert not isinstance(found, list) and 0.5 <= time.monotonic() - started < 1.5
    writing.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await writing
