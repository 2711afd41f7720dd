"""Readers in the writer's process: committed blocks come through the in-process feed, storage stays the truth.

Every test reads with its own ``BlobEventLog`` object, so ``reader_log.reader.storage_calls`` counts the reader's
storage round trips only; the writer appends through ``storage.events`` (which publishes to the global feed).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from typing import Any

import pytest

from resilient.http.paces import WAITED_FOR, Paces
from resilient.http.streaming import tail_events
from resilient.protocol.sse import parse_frame
from resilient.storage.eventlog import BlobEventLog
from resilient.storage.factory import Storage
from resilient.storage.feed import CommittedBlock, CommittedFeed
from resilient.storage.ports import EventWriter, ReadCursor, StoredEvent

pytestmark = pytest.mark.azurite

APPENDS = 30


def delta(n: int) -> dict[str, object]:
    return {"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0,
            "delta": f"w{n} ", "logprobs": []}


def completed() -> dict[str, object]:
    return {"type": "response.completed", "response": {"id": "resp_x", "status": "completed"}}


def created() -> dict[str, object]:
    return {"type": "response.created", "response": {"id": "resp_x", "status": "queued"}}


def reader_log(storage: Storage) -> BlobEventLog:
    return BlobEventLog(storage.clients.container(storage.clients.events_container_name), feed=storage.feed)


def sequence_numbers(chunks: list[bytes]) -> list[int]:
    frames = b"".join(chunks).split(b"\n\n")[:-1]
    return [parse_frame(frame + b"\n\n")[0] for frame in frames]


def _paced(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with the paces among them (``poll_min=…``) gathered into one :class:`Paces` (no keep-alives)."""
    fields = set(Paces.__dataclass_fields__)
    paces = Paces(**{"keepalive_seconds": None, **{k: v for k, v in options.items() if k in fields}})
    return {"paces": paces, **{k: v for k, v in options.items() if k not in fields}}


async def collect(log: BlobEventLog, rid: str, feed: CommittedFeed, **options: Any) -> list[bytes]:
    chunks: list[bytes] = []
    async for chunk in tail_events(log, rid, -1, feed=feed, **_paced(options)):
        chunks.append(chunk)
    return chunks


async def write_phase(writer: EventWriter, appends: int = APPENDS) -> None:
    for n in range(appends):
        await writer.append([delta(2 * n), delta(2 * n + 1)])
        await asyncio.sleep(0.005)
    await writer.append([completed()])


async def test_reader_in_the_writer_process_reads_storage_once(storage: Storage, rid: str) -> None:
    writer = await storage.events.create(rid, [created()])
    log = reader_log(storage)
    with storage.feed.writing(rid):
        # safety polls of storage only every 60 s, so none happens during the test, however slow the machine
        reader = asyncio.create_task(collect(log, rid, storage.feed, poll_while_local=60.0))
        await asyncio.sleep(0.1)  # the reader's first (storage) read is done; the rest comes from the feed
        await write_phase(writer)
        chunks = await asyncio.wait_for(reader, 10)
    assert sequence_numbers(chunks) == list(range(2 * APPENDS + 2))
    assert log.reader.storage_calls == 1  # one read of the (short) log up front, nothing per append
    assert len(chunks) <= APPENDS + 2  # one write per committed block, not one per frame


async def test_reader_elsewhere_polls_storage_and_gets_the_same_events(storage: Storage, rid: str) -> None:
    writer = await storage.events.create(rid, [created()])
    log = reader_log(storage)
    elsewhere = CommittedFeed()  # a reader in another process never sees this process's blocks
    reader = asyncio.create_task(collect(log, rid, elsewhere))
    await asyncio.sleep(0.05)
    await write_phase(writer)
    chunks = await asyncio.wait_for(reader, 10)
    assert sequence_numbers(chunks) == list(range(2 * APPENDS + 2))
    assert log.reader.storage_calls > 3  # it had to poll


async def test_a_block_that_does_not_continue_the_reader_sends_it_to_storage(storage: Storage, rid: str) -> None:
    writer = await storage.events.create(rid, [created()])
    feed = CommittedFeed()
    log = reader_log(storage)
    with feed.writing(rid):  # a phase streams "here": the reader does not poll storage on its own (60 s)
        tail = tail_events(log, rid, -1, feed=feed, paces=Paces(keepalive_seconds=None, poll_while_local=60.0))
        chunks = [await anext(tail)]  # event 0, from storage
        await writer.append([delta(1), delta(2)])  # events 1, 2: not published to this feed
        await writer.append([completed()])  # event 3, published with a gap before it:
        frame = b"event: response.completed\nid: 3\ndata: {}\n\n"
        feed.publish(rid, CommittedBlock((StoredEvent(3, "response.completed", frame),), ReadCursor(0, 10**9, 3)))
        chunks += [chunk async for chunk in tail]
    assert sequence_numbers(chunks) == [0, 1, 2, 3]
    assert b"data: {}" not in b"".join(chunks)  # the gap sent it to storage, which has the real frames


async def test_a_reader_that_falls_behind_catches_up_from_storage(storage: Storage, rid: str) -> None:
    writer = await storage.events.create(rid, [created()])
    feed = CommittedFeed(max_pending_bytes=200)  # a few frames: the pending blocks overflow at once
    log = reader_log(storage)
    got: list[bytes] = []
    with feed.writing(rid):
        tail = tail_events(log, rid, -1, feed=feed, paces=WAITED_FOR)
        got.append(await anext(tail))  # event 0; the reader now stalls (a slow client)
        for n in range(10):
            block_events = [delta(n)]
            await writer.append(block_events)
        await writer.append([completed()])
        stored = await reader_log(storage).read_after(rid, 0)
        for event in stored.events:  # what a writer here would have published, far more than 200 bytes
            feed.publish(rid, CommittedBlock((event,), ReadCursor(0, 0, event.sequence_number)))
        async for chunk in tail:
            got.append(chunk)
    assert sequence_numbers(got) == list(range(12))


async def test_the_stream_of_a_create_starts_from_the_created_block_without_reading_storage(
        storage: Storage, rid: str) -> None:
    writer = await storage.events.create(rid, [created()])
    assert writer.last_committed is not None and writer.last_committed.first_sequence_number == 0
    log = reader_log(storage)
    with storage.feed.writing(rid):
        reader = asyncio.create_task(collect_from(log, rid, storage.feed, writer.last_committed))
        await asyncio.sleep(0.05)
        await write_phase(writer, appends=5)
        chunks = await asyncio.wait_for(reader, 10)
    assert sequence_numbers(chunks) == list(range(12))
    assert log.reader.storage_calls == 0


async def test_a_run_expected_here_but_written_elsewhere_still_reaches_the_reader(storage: Storage, rid: str) -> None:
    writer = await storage.events.create(rid, [created()])
    feed = CommittedFeed()  # the reader's process: it expects the run, whose writer is in another process
    feed.expect(rid, 30.0)
    log = reader_log(storage)
    reader = asyncio.create_task(collect(log, rid, feed))
    await asyncio.sleep(0.05)
    await write_phase(writer, appends=5)
    chunks = await asyncio.wait_for(reader, 20)
    assert sequence_numbers(chunks) == list(range(12))
    feed.expect(rid, 0)
    assert not feed.expected_here(rid)


async def collect_from(log: BlobEventLog, rid: str, feed: CommittedFeed, start: CommittedBlock,
                       **options: Any) -> list[bytes]:
    return [chunk async for chunk in tail_events(log, rid, -1, feed=feed, start=start,
                                                 **_paced(options))]


@pytest.mark.parametrize("state", ["writing", "expected", "elsewhere"])
async def test_polls_stretch_with_the_load(storage: Storage, rid: str, state: str) -> None:
    """``widen`` (the process's load factor) stretches a reader's storage polls: the safety net while a run
    is written (or expected) here, and the idle back-off's ceiling otherwise. Two readers side by side, one
    widened 4×, neither getting events: the widened one polls storage far less."""
    writer = await storage.events.create(rid, [created()])
    counts: dict[float, int] = {}

    async def read_for(seconds: float, slack: float) -> None:
        feed = CommittedFeed()  # each reader its own process, where the log's first block was written
        feed.publish(rid, writer.last_committed)
        log = reader_log(storage)
        if state == "expected":
            feed.expect(rid, 30.0)
        with feed.writing(rid) if state == "writing" else contextlib.nullcontext():
            task = asyncio.create_task(collect(log, rid, feed, poll_min=0.2, poll_max=0.2, poll_while_local=0.2,
                                               poll_while_expected=0.2, widen=lambda: slack))
            await asyncio.sleep(seconds)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        counts[slack] = log.reader.storage_calls

    await asyncio.gather(read_for(1.5, 1.0), read_for(1.5, 4.0))
    # widened: the first read, then polls 0.8 s apart (writing) or backing off from 0.2 s to 0.8 s (the others)
    assert counts[4.0] <= (3 if state == "writing" else 4), counts
    assert counts[1.0] >= counts[4.0] + 2, counts


async def test_the_gap_after_a_phase_written_here_is_not_polled_the_moment_it_begins(
        storage: Storage, rid: str) -> None:
    """The next activity cannot append before the phase here ends, so the reader's first poll of the gap
    between two activities comes one ``poll_while_expected`` after that end, not at once (which a phase
    longer than that interval used to cause: one storage read per phase that could find nothing)."""
    writer = await storage.events.create(rid, [created()])
    assert writer.last_committed is not None
    log = reader_log(storage)
    reader = asyncio.create_task(collect_from(log, rid, storage.feed, writer.last_committed, poll_while_local=60.0,
                                              poll_while_expected=1.0))
    try:
        with storage.feed.writing(rid):
            for n in range(12):  # a phase of ~1.2 s: longer than the gap's poll interval
                await writer.append([delta(n)])
                await asyncio.sleep(0.1)
            storage.feed.expect(rid, 30.0)  # what the engine says when a phase ends
        await asyncio.sleep(0.1)  # the orchestration schedules the next activity, here
        with storage.feed.writing(rid):
            await writer.append([delta(12), delta(13)])
            await writer.append([completed()])
        chunks = await asyncio.wait_for(reader, 10)
    finally:
        storage.feed.expect(rid, 0)
    assert sequence_numbers(chunks) == list(range(16))
    assert log.reader.storage_calls == 0


async def test_after_a_phase_here_a_next_phase_written_elsewhere_still_reaches_the_reader(
        storage: Storage, rid: str) -> None:
    writer = await storage.events.create(rid, [created()])
    feed = CommittedFeed()  # the reader's process; the writer's blocks are not published to it
    log = reader_log(storage)
    reader = asyncio.create_task(collect(log, rid, feed, poll_while_local=60.0, poll_while_expected=0.3))
    with feed.writing(rid):  # a phase here that said nothing for a while
        await asyncio.sleep(0.5)
        feed.expect(rid, 30.0)
    began = time.monotonic()
    await write_phase(writer, appends=5)  # the next activity ran on another instance
    writing = time.monotonic() - began
    chunks = await asyncio.wait_for(reader, 10)
    assert sequence_numbers(chunks) == list(range(12))
    # the first read, then the gap's polls every 0.3 s: one finds the whole next phase, and while it is being
    # written (longer on a loaded machine) one poll per 0.3 s may land mid-way; polling at 20 ms would be
    # one per 20 ms
    most = 3 + math.ceil(writing / 0.3)
    assert 2 <= log.reader.storage_calls <= most, (log.reader.storage_calls, f"{writing:.2f} s writing")


async def test_two_readers_of_a_response_in_one_process_poll_storage_as_one(storage: Storage, rid: str) -> None:
    """Readers of one response here poll on one schedule; when one is due while another's read is in flight,
    it waits for that read (which found nothing it lacks) instead of issuing the same read at the same time.
    Side by side: a pair of readers sharing a process against one reader alone, no events coming."""
    await storage.events.create(rid, [created()])
    pace = {"poll_min": 0.1, "poll_max": 0.1, "poll_while_local": 0.1, "poll_while_expected": 0.1}

    async def read_for(feed: CommittedFeed, seconds: float) -> int:
        log = reader_log(storage)
        task = asyncio.create_task(collect(log, rid, feed, **pace))
        await asyncio.sleep(seconds)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return log.reader.storage_calls

    pair_feed, lone_feed = CommittedFeed(), CommittedFeed()
    first, second, lone = await asyncio.gather(read_for(pair_feed, 1.5), read_for(pair_feed, 1.5),
                                               read_for(lone_feed, 1.5))
    assert lone >= 6, lone  # it polled all along (a first read, then every 0.1 s)
    assert first + second <= lone + 3, (first, second, lone)  # not twice as many
