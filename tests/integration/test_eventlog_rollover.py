"""Segment rollover and crash-during-rollover recovery, with tiny segments (5 blocks)."""

from __future__ import annotations

import pytest

from resilient.storage.eventlog import BlobEventLog
from resilient.storage.factory import Storage
from resilient.storage.logformat import marker_frame, parse_index, segment_blob
from tests.integration.test_eventlog import assert_contiguous, created, delta

pytestmark = pytest.mark.azurite


def small_log(storage: Storage) -> BlobEventLog:
    container = storage.clients.container(storage.clients.events_container_name)
    return BlobEventLog(container, feed=storage.feed, max_blocks_per_segment=5, index_every=2)


async def _segments(storage: Storage, rid: str) -> dict[str, tuple[int, int]]:
    """name -> (size, committed blocks)."""
    container = storage.clients.container(storage.clients.events_container_name)
    found: dict[str, tuple[int, int]] = {}
    async for blob in container.list_blobs(name_starts_with=f"{rid}/seg-"):
        props = await container.get_blob_client(blob.name).get_blob_properties()
        found[blob.name] = (int(props.size), int(props.append_blob_committed_block_count or 0))
    return found


async def test_rollover_across_segments(storage: Storage, rid: str) -> None:
    log = small_log(storage)
    writer = await log.create(rid, [created()])
    for batch in range(22):
        await writer.append([delta(f"b{batch}")] * 3)
    last = writer.next_sequence_number - 1  # 66
    segments = await _segments(storage, rid)
    assert len(segments) == 5  # 23 data blocks at 5 per segment
    for name, (_, blocks) in segments.items():
        assert blocks <= 6, name  # 5 data blocks + the marker
    assert_contiguous(await log.read_after(rid, -1), 0, last)
    for after in (0, 14, 15, 16, 30, 44, 60, last - 1):
        assert_contiguous(await log.read_after(rid, after), after + 1, last)
    index = parse_index(
        await (
            await storage.clients.container(storage.clients.events_container_name).download_blob(f"{rid}/index")
        ).readall()
    )
    assert {entry.segment for entry in index} == {0, 1, 2, 3, 4}
    # Tail reads start in the last segment: segment 0 ends with a marker, so list, then read its tail.
    before = log.reader.storage_calls
    tail = await log.read_after(rid, last - 2)
    assert log.reader.storage_calls - before == 3 and tail.cursor.segment == 4

    reopened = await log.open_writer(rid)
    assert reopened.next_sequence_number == last + 1
    for _ in range(6):
        await reopened.append([delta("after")])
    assert_contiguous(await log.read_after(rid, -1), 0, last + 6)
    assert len(await _segments(storage, rid)) == 6


async def test_read_more_follows_rollover(storage: Storage, rid: str) -> None:
    log = small_log(storage)
    writer = await log.create(rid, [created()])
    for _ in range(4):
        await writer.append([delta()])
    tail = await log.read_after(rid, -1)  # ends in segment 0 (5 blocks, full but no marker yet)
    assert tail.cursor.segment == 0
    await writer.append([delta("s1")])  # marker in segment 0, then segment 1
    more = await log.read_more(rid, tail.cursor)
    assert [e.sequence_number for e in more.events] == [5] and more.cursor.segment == 1
    assert (await log.read_more(rid, more.cursor)).events == []


async def test_open_writer_after_crash_during_rollover(storage: Storage, rid: str) -> None:
    log = small_log(storage)
    writer = await log.create(rid, [created()])
    for _ in range(4):
        await writer.append([delta()] * 2)
    # Simulate a crash after the marker was appended and before segment 1 was created.
    container = storage.clients.container(storage.clients.events_container_name)
    seg0 = container.get_blob_client(segment_blob(rid, 0))
    size = (await seg0.get_blob_properties()).size
    await seg0.append_block(marker_frame(1), appendpos_condition=size)
    # A reader stops at the marker without error.
    partial = await log.read_after(rid, -1)
    assert_contiguous(partial, 0, 8)
    assert partial.cursor.segment == 1 and partial.cursor.offset == 0
    assert (await log.read_more(rid, partial.cursor)).events == []

    recovered = await log.open_writer(rid)
    assert recovered.next_sequence_number == 9
    assert recovered.last_event is not None and recovered.last_event["sequence_number"] == 8
    await recovered.append([{"type": "response.in_progress", "response": {"id": rid}}])
    await recovered.append([delta("after")] * 3)
    assert_contiguous(await log.read_after(rid, -1), 0, 12)
    assert_contiguous(await log.read_more(rid, partial.cursor), 9, 12)
    assert set(await _segments(storage, rid)) == {segment_blob(rid, 0), segment_blob(rid, 1)}


async def test_open_writer_when_new_segment_is_empty(storage: Storage, rid: str) -> None:
    log = small_log(storage)
    writer = await log.create(rid, [created()])
    for _ in range(4):
        await writer.append([delta()])
    container = storage.clients.container(storage.clients.events_container_name)
    seg0 = container.get_blob_client(segment_blob(rid, 0))
    size = (await seg0.get_blob_properties()).size
    await seg0.append_block(marker_frame(1), appendpos_condition=size)
    await container.get_blob_client(segment_blob(rid, 1)).create_append_blob()
    recovered = await log.open_writer(rid)  # the last event lives in segment 0
    assert recovered.next_sequence_number == 5 and recovered.last_event is not None
    await recovered.append([delta()])
    assert_contiguous(await log.read_after(rid, -1), 0, 5)
    assert_contiguous(await log.read_after(rid, 4), 5, 5)


async def test_missing_index_reads_fall_back_and_the_next_hint_recreates_it(storage: Storage, rid: str) -> None:
    log = small_log(storage)
    writer = await log.create(rid, [created()])
    await writer.append([delta()] * 3)  # second block: the first hint, which creates the index
    container = storage.clients.container(storage.clients.events_container_name)
    await container.delete_blob(f"{rid}/index")
    assert_contiguous(await log.read_after(rid, 2), 3, 3)  # no hints: read from the start
    reopened = await log.open_writer(rid)
    await reopened.append([delta()])
    await reopened.append([delta()])  # the reopened writer's second block: a hint, and a new index
    assert_contiguous(await log.read_after(rid, -1), 0, 5)
    entries = parse_index(await (await container.download_blob(f"{rid}/index")).readall())
    assert [e.first_seq for e in entries] == [5]
    at = await (await container.download_blob(segment_blob(rid, entries[0].segment),
                                              offset=entries[0].offset)).readall()
    assert at.startswith(b"event: response.output_text.delta\nid: 5\n")


async def test_a_first_read_that_stops_in_the_head_reads_on_across_segments(storage: Storage, rid: str) -> None:
    """``read_first`` answered from the head of segment 0 (``more``), then ``read_more`` follows the
    next-segment markers to the end: every event once, in order."""
    container = storage.clients.container(storage.clients.events_container_name)
    log = BlobEventLog(container, feed=storage.feed, max_blocks_per_segment=5, index_every=2, tail_window=1024)
    writer = await log.create(rid, [created()])
    for batch in range(22):
        await writer.append([delta(f"b{batch} " + "w" * 200)] * 3)
    last = writer.next_sequence_number - 1
    for after in (-1, 0, 1):
        first = await log.read_first(rid, after)
        assert first.more and first.cursor.segment == 0, after
        events, cursor, more = list(first.events), first.cursor, first.more
        while more or cursor.last_sequence_number < last:
            rest = await log.read_more(rid, cursor)
            assert rest.events or rest.cursor != cursor, "no progress"
            events, cursor, more = events + rest.events, rest.cursor, rest.more
        assert [e.sequence_number for e in events] == list(range(after + 1, last + 1))
