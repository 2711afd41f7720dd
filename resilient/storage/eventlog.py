"""The per-response event log on append blobs: :class:`BlobEventLog` implements ``EventLog``.

Why append blobs of SSE frames: replay and reconnect (``starting_after=N``) need no orchestration
and no agent, only storage; frames are stored exactly as sent, so a reader splits on blank lines and
reads the ``id:`` line, never the JSON. A tail read costs two round trips whatever the log's length
(a listing, then one ranged read of the last segment's tail); a deeper read adds the small offset
index and one ranged read from its best hint. A tailing reader (``read_more``) costs one ranged read
per poll. See :mod:`.logformat` for the layout and :mod:`.eventwriter` for the fenced writer.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from contextlib import suppress
from datetime import datetime

from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceNotFoundError
from azure.storage.blob.aio import BlobClient, ContainerClient

from resilient.ids import validate_id
from resilient.protocol.sse import parse_frame
from resilient.storage.connection import translate_errors
from resilient.storage.errors import AlreadyExists, LostOwnership, NotFound
from resilient.storage.eventwriter import MAX_BLOCK_BYTES, BlobEventWriter, LogLimits, WriterPosition
from resilient.storage.feed import CommittedFeed
from resilient.storage.kept import KEPT_WRITERS, KeptWriters
from resilient.storage.logformat import (
    IndexEntry,
    Tail,
    best_entry,
    first_event_seq,
    first_frame_start,
    index_blob,
    log_prefix,
    parse_index,
    scan_frames,
    scan_tail,
    segment_blob,
    segment_number,
)
from resilient.storage.ports import EventWriter, JsonDict, ReadCursor, ReadResult, StoredEvent

__all__ = ["KEPT_WRITERS", "BlobEventLog"]

BLOB_CLIENT_CACHE = 512
# Events are rarely smaller than this: a read that starts after more events than fit the tail window at
# this size goes to the tail straight away instead of trying the head of the log first.
SMALL_EVENT_BYTES = 256


def _total_size(content_range: str | None, fallback: int) -> int:
    """The blob size from a ranged download's ``Content-Range`` (``bytes 0-99/1234`` → 1234)."""
    total = (content_range or "").rpartition("/")[2]
    return int(total) if total.isdigit() else fallback

DEFAULT_TAIL_WINDOW = 64 * 1024
_OPEN_ATTEMPTS = 3


class BlobEventLog:
    """``EventLog`` over one blob container (``<prefix>-events``)."""

    def __init__(
        self,
        container: ContainerClient,
        *,
        feed: CommittedFeed,
        index_every: int = 16,
        max_blocks_per_segment: int = 49_000,
        max_block_bytes: int = MAX_BLOCK_BYTES,
        tail_window: int = DEFAULT_TAIL_WINDOW,
        kept: KeptWriters | None = None,
    ) -> None:
        self._container = container
        self._feed = feed  # this process's readers: its writers publish to it, a deletion forgets the log
        self._kept = kept if kept is not None else KeptWriters()
        self._limits = LogLimits(index_every, max_blocks_per_segment, max_block_bytes)
        self._tail_window = max(1024, tail_window)
        self.storage_calls = 0  # every round trip made by this object (not by the writers it returns)
        self._blob_clients: dict[str, BlobClient] = {}

    # -- writers kept between the activities of a run (see EventLog.take_writer) -----------------------
    def take_writer(self, response_id: str) -> BlobEventWriter | None:
        return self._kept.take(response_id)

    def keep_writer(self, writer: EventWriter) -> None:
        if not isinstance(writer, BlobEventWriter) or writer.dead:
            return
        self._kept.keep(writer)

    # -- writing ------------------------------------------------------------------------------------
    @translate_errors
    async def create(self, response_id: str, first_events: Sequence[JsonDict]) -> BlobEventWriter:
        rid = validate_id(response_id, param="response_id")
        writer = BlobEventWriter(self._container, rid, WriterPosition(0, 0, 0, 0, None), self._limits,
                                 feed=self._feed)
        prepared = writer.prepare(first_events)  # a bad event must not leave an empty log behind
        self.storage_calls += 1
        try:
            await self._container.get_blob_client(segment_blob(rid, 0)).create_append_blob(if_none_match="*")
        except ResourceExistsError as error:
            raise AlreadyExists(f"event log {rid!r} exists") from error
        # No index yet: the writer creates it with its first hint (most logs never need one; a reader
        # without an index reads from the start). A stale index cannot exist here: delete removes the
        # index before any segment, so a missing segment 0 means a missing index.
        writer.add_calls(1)
        await writer.append_prepared(prepared)  # framed once, above
        return writer

    @translate_errors
    async def open_writer(self, response_id: str) -> BlobEventWriter:
        rid = validate_id(response_id, param="response_id")
        before = self.storage_calls
        for _ in range(_OPEN_ATTEMPTS):
            sizes, written = await self._list(rid)
            if not sizes:
                raise NotFound(f"event log {rid!r} not found")
            last = max(sizes)
            tail, block_count = await self._tail(rid, last, sizes[last])
            next_seq, last_event = await self._last_event(rid, sizes, last, tail)
            if tail.next_segment is None:
                position = WriterPosition(last, sizes[last], block_count, next_seq, last_event, written.get(last))
                return self._writer(rid, position, self.storage_calls - before)
            # Crash during rollover: the marker is written, the next segment is not (or not listed).
            self.storage_calls += 1
            try:
                await self._container.get_blob_client(segment_blob(rid, tail.next_segment)).create_append_blob(
                    if_none_match="*"
                )
            except ResourceExistsError:
                continue  # somebody else finished the rollover: look again
            writer = self._writer(rid, WriterPosition(tail.next_segment, 0, 0, next_seq, last_event), 0)
            await writer.add_index_hint(next_seq, tail.next_segment, 0)
            writer.add_calls(self.storage_calls - before)
            return writer
        raise LostOwnership(f"event log {rid!r}: another writer keeps rolling the log over")

    def _writer(self, rid: str, position: WriterPosition, calls: int) -> BlobEventWriter:
        return BlobEventWriter(self._container, rid, position, self._limits, storage_calls=calls, feed=self._feed)

    async def _list(self, rid: str) -> tuple[dict[int, int], dict[int, datetime]]:
        """Segment sizes and Last-Modified times by number (one listing call)."""
        sizes: dict[int, int] = {}
        written: dict[int, datetime] = {}
        self.storage_calls += 1
        async for blob in self._container.list_blobs(name_starts_with=log_prefix(rid)):
            number = segment_number(blob.name, rid)
            if number is not None:
                sizes[number] = int(blob.size or 0)
                if blob.last_modified is not None:
                    written[number] = blob.last_modified
        return sizes, written

    async def _tail(self, rid: str, segment: int, size: int) -> tuple[Tail, int]:
        """The last frames of a segment and its committed block count (usually one ranged read)."""
        if size == 0:
            return Tail(None, None), 0
        blob = self._container.get_blob_client(segment_blob(rid, segment))
        window = self._tail_window
        while True:
            start = max(0, size - window)
            self.storage_calls += 1
            downloader = await blob.download_blob(offset=start, length=size - start)
            data = await downloader.readall()
            block_count = downloader.properties.append_blob_committed_block_count
            if block_count is None:
                self.storage_calls += 1
                block_count = (await blob.get_blob_properties()).append_blob_committed_block_count or 0
            tail = scan_tail(data, start == 0)
            if tail.last_frame is not None or start == 0:
                return tail, int(block_count)
            window *= 4  # the last event frame is longer than the window

    async def _last_event(
        self, rid: str, sizes: dict[int, int], segment: int, tail: Tail
    ) -> tuple[int, JsonDict | None]:
        """``(next_seq, last event JSON)``, looking into earlier segments when the last has no event."""
        while tail.last_frame is None and segment > 0:
            segment -= 1
            tail, _ = await self._tail(rid, segment, sizes.get(segment, 0))
        if tail.last_frame is None:
            return 0, None
        seq, _, data = parse_frame(tail.last_frame)
        event: JsonDict = json.loads(data)
        return seq + 1, event

    # -- reading ------------------------------------------------------------------------------------
    @translate_errors
    async def read_after(self, response_id: str, starting_after: int) -> ReadResult:
        """Head (for a read near the start), then tail, then index.

        0. A read that starts within the first few hundred events tries the head of segment 0 first:
           one call answers it when the log fits the tail window (most logs), one more reads the tail.
        1. List the log (sizes) and range-read the last ``tail_window`` bytes of the last segment: a
           reconnect near the end of a long log is answered in these two calls, whatever the log's
           length. 2. Otherwise download the offset index, start at the best hint and follow
           next-segment markers. Why not the index first: on Azurite a download costs per block, and
           the index gains one block per hint, so reading it whole on every reconnect grows with the
           log; the tail window does not.
        """
        rid = validate_id(response_id, param="response_id")
        if not isinstance(starting_after, int) or isinstance(starting_after, bool):
            raise ValueError("starting_after must be an int")
        after = max(-1, starting_after)
        if after < self._tail_window // SMALL_EVENT_BYTES:  # the head of the log probably covers it
            found = await self._read_single_segment(rid, after)
            if found is not None:
                return found
        sizes, _ = await self._list(rid)
        if not sizes:
            raise NotFound(f"event log {rid!r} not found")
        found = await self._read_from_tail(rid, sizes, after)
        if found is not None:
            return found
        entry = best_entry(await self._read_index(rid), after)
        return await self._read_from(rid, entry.segment, entry.offset, after, missing_ok=False)

    async def _read_single_segment(self, rid: str, after: int) -> ReadResult | None:
        """The common log, one segment: read its first ``tail_window`` bytes (one call, which also tells
        the segment's size); a log that fits is answered from them, a longer one from one more ranged read
        of its tail. None (use the listing) when segment 0 is missing, ends with a next-segment marker, or
        its tail window starts after ``after`` + 1."""
        blob = self._blob(segment_blob(rid, 0))
        self.storage_calls += 1
        try:
            downloader = await blob.download_blob(offset=0, length=self._tail_window)
            head = await downloader.readall()
        except ResourceNotFoundError:
            return None
        except HttpResponseError as error:
            if error.status_code == 416:  # an empty segment: the log is being created
                return ReadResult(cursor=ReadCursor(0, 0, after))
            raise
        size = _total_size(downloader.properties.content_range, len(head))
        if size <= len(head):
            scan = scan_frames(head, after)
            if scan.next_segment is not None:
                return None
            return ReadResult(scan.events, ReadCursor(0, scan.consumed, scan.last_seq))
        start = size - self._tail_window
        data = await self._range(rid, 0, start)
        if data is None:
            return None
        frames_at = first_frame_start(data, False)
        first_seq = None if frames_at is None else first_event_seq(data[frames_at:])
        if frames_at is None or first_seq is None or first_seq > after + 1:
            return None
        scan = scan_frames(data[frames_at:], after)
        if scan.next_segment is not None:
            return None
        return ReadResult(scan.events, ReadCursor(0, start + frames_at + scan.consumed, scan.last_seq))

    async def _read_from_tail(self, rid: str, sizes: dict[int, int], after: int) -> ReadResult | None:
        """Answer from the last segment's tail window, or None when the window starts too late."""
        last = max(sizes)
        start = max(0, sizes[last] - self._tail_window)
        if sizes[last] == 0:
            return None if last > 0 else ReadResult(cursor=ReadCursor(0, 0, after))
        data = await self._range(rid, last, start)
        if data is None:
            raise NotFound(f"event log {rid!r} not found")
        at_zero = start == 0
        frames_at = first_frame_start(data, at_zero)
        if frames_at is None:
            return None
        first_seq = first_event_seq(data[frames_at:])
        covers = (at_zero and last == 0) or (first_seq is not None and first_seq <= after + 1)
        if not covers:
            return None
        scan = scan_frames(data[frames_at:], after)
        result = ReadResult(scan.events, ReadCursor(last, start + frames_at + scan.consumed, scan.last_seq))
        if scan.next_segment is None:
            return result
        # The last listed segment ends with a marker: a rollover is in progress (or crashed midway).
        more = await self._read_from(rid, scan.next_segment, 0, scan.last_seq, missing_ok=True)
        return ReadResult(result.events + more.events, more.cursor)

    @translate_errors
    async def read_more(self, response_id: str, cursor: ReadCursor) -> ReadResult:
        rid = validate_id(response_id, param="response_id")
        # A cursor at the start of a later segment may be waiting for the rollover to create it.
        pending_segment = cursor.offset == 0 and cursor.segment > 0
        return await self._read_from(
            rid, cursor.segment, cursor.offset, cursor.last_sequence_number, missing_ok=pending_segment
        )

    async def _read_index(self, rid: str) -> list[IndexEntry]:
        self.storage_calls += 1
        try:
            downloader = await self._container.download_blob(index_blob(rid))
            return parse_index(await downloader.readall())
        except ResourceNotFoundError:
            return []  # no hints: read from the start (segment 0 tells whether the log exists)

    async def _read_from(
        self, rid: str, segment: int, offset: int, skip_through: int, *, missing_ok: bool
    ) -> ReadResult:
        """Ranged reads from (segment, offset) to the end of the log, following next-segment markers."""
        events: list[StoredEvent] = []
        last_seq = skip_through
        while True:
            data = await self._range(rid, segment, offset)
            if data is None:
                if missing_ok:
                    break
                raise NotFound(f"event log {rid!r} not found")
            scan = scan_frames(data, last_seq)
            events.extend(scan.events)
            last_seq = scan.last_seq
            offset += scan.consumed
            if scan.next_segment is None:
                break
            segment, offset, missing_ok = scan.next_segment, 0, True
        return ReadResult(events=events, cursor=ReadCursor(segment, offset, last_seq))

    def _blob(self, name: str) -> BlobClient:
        """A cached client for a segment: tails poll the same blob many times, and a BlobClient (its pipeline
        and generated client) costs more to build than many of the reads it serves."""
        client = self._blob_clients.pop(name, None) or self._container.get_blob_client(name)
        self._blob_clients[name] = client  # most recently used last
        while len(self._blob_clients) > BLOB_CLIENT_CACHE:
            self._blob_clients.pop(next(iter(self._blob_clients)))
        return client

    async def _range(self, rid: str, segment: int, offset: int) -> bytes | None:
        """Bytes from ``offset`` to the end of a segment; b"" at or past the end; None if absent."""
        self.storage_calls += 1
        try:
            downloader = await self._blob(segment_blob(rid, segment)).download_blob(offset=offset)
            return await downloader.readall()
        except ResourceNotFoundError:
            return None
        except HttpResponseError as error:
            if error.status_code == 416:  # InvalidRange: past the end, or an empty blob
                return b""
            raise

    # -- deletion -----------------------------------------------------------------------------------
    @translate_errors
    async def delete(self, response_id: str) -> None:
        rid = validate_id(response_id, param="response_id")
        self._kept.drop(rid)
        self._feed.forget_log(rid)  # before the first call: a reconnect here must not outlive the log
        names: list[str] = []
        self.storage_calls += 1
        async for blob in self._container.list_blobs(name_starts_with=log_prefix(rid)):
            names.append(blob.name)
        # The index first: segments without an index still read correctly (from the start).
        names.sort(key=lambda name: (name != index_blob(rid), name))
        for name in names:
            self.storage_calls += 1
            with suppress(ResourceNotFoundError):
                await self._container.delete_blob(name)
