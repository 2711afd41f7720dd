"""BlobEventLog against Azurite: contiguous sequence numbers, fencing, reads, tailing, call counts."""

from __future__ import annotations

import asyncio
import json

import pytest

from resilient.ids import new_response_id
from resilient.protocol.sse import encode_frame
from resilient.storage.errors import AlreadyExists, LostOwnership, NotFound
from resilient.storage.eventlog import BlobEventLog
from resilient.storage.factory import Storage
from resilient.storage.ports import ReadResult
from tests.memory_storage import MemoryBackend
from tests.memory_storage.events import MAX_BLOCK_BYTES, MemoryEventLog

pytestmark = pytest.mark.azurite
STORAGE_ADAPTERS = ("azurite", "memory")  # the storage contract: both adapters must pass it


def delta(text: str = "word ") -> dict[str, object]:
    return {
        "type": "response.output_text.delta",
        "item_id": "msg_1",
        "output_index": 0,
        "content_index": 0,
        "delta": text,
        "logprobs": [],
    }


def created() -> dict[str, object]:
    return {"type": "response.created", "response": {"id": "resp_x", "status": "queued"}}


def event_log(storage: Storage, **kwargs: int) -> BlobEventLog | MemoryEventLog:
    """A log with tuned limits over the test's adapter (the memory log has no index: ``index_every`` is moot)."""
    if isinstance(storage.clients, MemoryBackend):
        return MemoryEventLog(storage.clients, feed=storage.feed,
                              max_block_bytes=kwargs.get("max_block_bytes", MAX_BLOCK_BYTES))
    return BlobEventLog(storage.clients.container(storage.clients.events_container_name), feed=storage.feed, **kwargs)


def assert_contiguous(result: ReadResult, first: int, last: int) -> None:
    assert [e.sequence_number for e in result.events] == list(range(first, last + 1))
    for event in result.events:
        body = event.json()
        assert body["sequence_number"] == event.sequence_number and body["type"] == event.type
        assert (
            event.frame
            == (
                f"event: {event.type}\nid: {event.sequence_number}\n"
                f"data: {json.dumps(body, separators=(',', ':'), ensure_ascii=False)}\n\n"
            ).encode()
        )
    assert result.cursor.last_sequence_number == max(last, first - 1)


async def test_contiguous_sequence_across_batches(storage: Storage, rid: str) -> None:
    log = storage.events
    writer = await log.create(rid, [created()])
    assert writer.next_sequence_number == 1
    total = 1
    for batch in range(40):
        size = 1 + batch % 7
        last = await writer.append([delta(f'{batch}-{i} é\n"q"') for i in range(size)])
        total += size
        assert last == total - 1 == writer.next_sequence_number - 1
    assert writer.last_event is not None and writer.last_event["sequence_number"] == total - 1
    assert_contiguous(await log.read_after(rid, -1), 0, total - 1)
    reopened = await log.open_writer(rid)
    assert reopened.next_sequence_number == total and reopened.last_event == writer.last_event
    assert await reopened.append([delta()]) == total
    assert_contiguous(await log.read_after(rid, -1), 0, total)


async def test_input_events_are_not_mutated_and_empty_append(storage: Storage, rid: str) -> None:
    event = delta()
    writer = await storage.events.create(rid, [])
    assert writer.next_sequence_number == 0 and writer.last_event is None
    assert await writer.append([]) == -1
    await writer.append([event])
    assert "sequence_number" not in event
    opened = await storage.events.open_writer(rid)
    assert opened.next_sequence_number == 1


async def test_create_twice_and_missing_log(storage: Storage, rid: str) -> None:
    await storage.events.create(rid, [created()])
    with pytest.raises(AlreadyExists):
        await storage.events.create(rid, [created()])
    missing = new_response_id()
    with pytest.raises(NotFound):
        await storage.events.open_writer(missing)
    with pytest.raises(NotFound):
        await storage.events.read_after(missing, -1)
    await storage.events.delete(rid)
    await storage.events.delete(rid)
    with pytest.raises(NotFound):
        await storage.events.read_after(rid, -1)
    with pytest.raises(NotFound):
        await storage.events.open_writer(rid)


async def test_fencing_first_append_wins(storage: Storage, rid: str) -> None:
    writer = await storage.events.create(rid, [created()])
    await writer.append([delta("a")])
    first = await storage.events.open_writer(rid)
    second = await storage.events.open_writer(rid)
    assert first.next_sequence_number == second.next_sequence_number == 2
    await first.append([delta("first")])
    with pytest.raises(LostOwnership):
        await second.append([delta("second"), delta("second")])
    with pytest.raises(LostOwnership):
        await second.append([delta("again")])  # dead for good
    with pytest.raises(LostOwnership):
        await writer.append([delta("the original writer is stale too")])
    await first.append([delta("more")])
    result = await storage.events.read_after(rid, -1)
    assert_contiguous(result, 0, 3)
    assert [e.json().get("delta") for e in result.events[1:]] == ["a", "first", "more"]


async def test_concurrent_writers_one_survives(storage: Storage, rid: str) -> None:
    await storage.events.create(rid, [created()])
    writers = [await storage.events.open_writer(rid) for _ in range(5)]
    results = await asyncio.gather(
        *(w.append([delta(f"w{i}")] * 3) for i, w in enumerate(writers)), return_exceptions=True
    )
    winners = [r for r in results if not isinstance(r, BaseException)]
    assert len(winners) == 1 and all(isinstance(r, LostOwnership) for r in results if r not in winners)
    assert_contiguous(await storage.events.read_after(rid, -1), 0, 3)


async def test_identical_append_after_a_lost_response_is_not_a_lost_race(storage: Storage, rid: str) -> None:
    """A 412 against a block that holds exactly our bytes (an SDK retry of our own append) is success."""
    await storage.events.create(rid, [created()])
    a = await storage.events.open_writer(rid)
    b = await storage.events.open_writer(rid)
    await a.append([delta("same")])
    assert await b.append([delta("same")]) == 1  # byte-identical: the log holds what b meant to write
    await b.append([delta("b")])
    with pytest.raises(LostOwnership):
        await a.append([delta("a")])
    assert_contiguous(await storage.events.read_after(rid, -1), 0, 2)


async def test_read_after_positions_and_tailing(storage: Storage, rid: str) -> None:
    log = event_log(storage, index_every=4)
    writer = await log.create(rid, [created()])
    for _ in range(30):
        await writer.append([delta()] * 5)
    last = writer.next_sequence_number - 1  # 150
    assert_contiguous(await log.read_after(rid, -1), 0, last)
    assert_contiguous(await log.read_after(rid, -7), 0, last)
    assert_contiguous(await log.read_after(rid, 77), 78, last)
    at_end = await log.read_after(rid, last)
    assert at_end.events == [] and at_end.cursor.last_sequence_number == last
    past = await log.read_after(rid, last + 1000)
    assert past.events == [] and past.cursor.last_sequence_number == last + 1000

    tail = await log.read_after(rid, last - 1)
    assert [e.sequence_number for e in tail.events] == [last]
    assert (await log.read_more(rid, tail.cursor)).events == []
    await writer.append([delta("n1"), delta("n2")])
    more = await log.read_more(rid, tail.cursor)
    assert [e.sequence_number for e in more.events] == [last + 1, last + 2]
    assert (await log.read_more(rid, more.cursor)).events == []
    # A cursor past the end filters by sequence number, not just by offset.
    await writer.append([delta()] * 3)
    assert (await log.read_more(rid, past.cursor)).events == []


@pytest.mark.adapters("azurite")  # counts Azure round trips
async def test_storage_call_counts(storage: Storage, rid: str) -> None:
    log = event_log(storage, index_every=16)
    writer = await log.create(rid, [created()])
    assert writer.storage_calls == 2  # create segment, append (the index comes with the first hint)
    for _ in range(32):
        await writer.append([delta()] * 32)
    # one block per append; a hint every 16 blocks, the first one creating the index (404, create, append)
    assert writer.storage_calls == 2 + 32 + 3 + 1
    before = log.reader.storage_calls
    result = await log.read_after(rid, writer.next_sequence_number - 101)
    assert len(result.events) == 100
    assert log.reader.storage_calls - before == 2  # deep in the log: list + one ranged read of the tail
    before = log.storage_calls
    opened = await log.open_writer(rid)
    assert log.storage_calls - before == 2 == opened.storage_calls  # list + tail read
    before = log.reader.storage_calls
    await log.read_more(rid, result.cursor)
    assert log.reader.storage_calls - before == 1


@pytest.mark.adapters("azurite")  # counts Azure round trips
async def test_a_log_that_fits_the_tail_window_is_read_in_one_call(storage: Storage, rid: str) -> None:
    log = event_log(storage)
    writer = await log.create(rid, [created()])
    for _ in range(20):
        await writer.append([delta()] * 5)
    for after in (101, -1, 0, 50, 100):
        before = log.reader.storage_calls
        result = await log.read_after(rid, after)
        assert log.reader.storage_calls - before == 1
        assert_contiguous(result, after + 1, 100)
    more = await log.read_more(rid, result.cursor)  # the cursor of a one-call read resumes exactly
    assert more.events == []
    await writer.append([delta()])
    assert [e.sequence_number for e in (await log.read_more(rid, result.cursor)).events] == [101]


async def test_read_first_then_read_more_reads_what_read_after_reads(storage: Storage, rid: str) -> None:
    """A reconnect's first read may stop early (``more``); reading on from its cursor gives exactly the rest."""
    log = storage.events
    writer = await log.create(rid, [created()])
    for _ in range(60):
        await writer.append([delta("w" * 200)] * 5)  # ~90 KiB: longer than the 64 KiB head window
    last = writer.next_sequence_number - 1
    for after in (-1, 0, 40, last - 3, last, last + 5):
        first = await log.read_first(rid, after)
        events, cursor, more = list(first.events), first.cursor, first.more
        while more:
            rest = await log.read_more(rid, cursor)
            events, cursor, more = events + rest.events, rest.cursor, rest.more
        assert_contiguous(ReadResult(events, cursor), after + 1, last)
        assert_contiguous(await log.read_after(rid, after), after + 1, last)
        assert not (await log.read_after(rid, after)).more


@pytest.mark.adapters("azurite")  # counts Azure round trips
async def test_read_first_of_a_long_log_is_one_ranged_read_when_its_head_holds_the_event(storage: Storage,
                                                                                       rid: str) -> None:
    log = event_log(storage)
    assert isinstance(log, BlobEventLog)
    writer = await log.create(rid, [created()])
    for _ in range(60):
        await writer.append([delta("w" * 200)] * 5)
    for after in (-1, 3, 100):
        before = log.reader.storage_calls
        first = await log.read_first(rid, after)
        assert log.reader.storage_calls - before == 1
        assert first.more and first.events[0].sequence_number == after + 1
        assert first.cursor.offset < log.reader.tail_window


async def test_packing_and_oversized_frames(storage: Storage, rid: str) -> None:
    log = event_log(storage, max_block_bytes=1000)
    writer = await log.create(rid, [])
    before = writer.storage_calls
    frame = len(encode_frame({**delta("x" * 200), "sequence_number": 10}))
    per_block = 1000 // frame
    await writer.append([delta("x" * 200) for _ in range(12)])  # whole frames, as many as fit
    assert per_block >= 2 and writer.storage_calls - before == -(-12 // per_block)
    with pytest.raises(ValueError):
        await writer.append([delta("ok"), delta("y" * 2000)])
    with pytest.raises(ValueError):
        await writer.append([{"no": "type"}])
    with pytest.raises(ValueError):
        await writer.append([{"type": "bad\ntype"}])
    assert_contiguous(await log.read_after(rid, -1), 0, 11)
    big = await storage.events.create(new_response_id(), [])
    with pytest.raises(ValueError):
        await big.append([delta("z" * (4 * 1024 * 1024 + 1))])
    assert big.next_sequence_number == 0
