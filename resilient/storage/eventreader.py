"""The read side of the per-response event log: :class:`BlobEventReader` (``read_after``, ``read_more``).

Why a reader of its own: replay and reconnect (``starting_after=N``) need no orchestration, no agent and
no writer, only ranged reads of the log's segments; frames are stored exactly as sent, so a reader splits
on blank lines and reads the ``id:`` line, never the JSON. A tail read costs two round trips whatever the
log's length (a listing, then one ranged read of the last segment's tail); a deeper read adds the small
offset index and one ranged read from its best hint. A tailing reader (``read_more``) costs one ranged
read per poll. See :mod:`.logformat` for the layout and :mod:`.eventlog` for the log that owns a reader.
"""

from __future__ import annotations

from datetime import datetime

from azure.core.exceptions import HttpResponseError, ResourceNotFoundError
from azure.storage.blob.aio import BlobClient, ContainerClient

from resilient.ids import validate_id
from resilient.storage.connection import translate_errors
from resilient.storage.errors import NotFound
from resilient.storage.logformat import (
    IndexEntry,
    best_entry,
    first_event_seq,
    first_frame_start,
    index_blob,
    log_prefix,
    parse_index,
    scan_frames,
    segment_blob,
    segment_number,
)
from resilient.storage.ports import ReadCursor, ReadResult, StoredEvent

__all__ = ["DEFAULT_TAIL_WINDOW", "BlobEventReader", "list_segments"]

BLOB_CLIENT_CACHE = 512
# Events are rarely smaller than this: a read that starts after more events than fit the tail window at
# this size goes to the tail straight away instead of trying the head of the log first.
SMALL_EVENT_BYTES = 256
DEFAULT_TAIL_WINDOW = 64 * 1024


def _total_size(content_range: str | None, fallback: int) -> int:
    """The blob size from a ranged download's ``Content-Range`` (``bytes 0-99/1234`` → 1234)."""
    total = (content_range or "").rpartition("/")[2]
    return int(total) if total.isdigit() else fallback


async def list_segments(container: ContainerClient, rid: str) -> tuple[dict[int, int], dict[int, datetime]]:
    """Segment sizes and Last-Modified times by number (one listing call)."""
    sizes: dict[int, int] = {}
    written: dict[int, datetime] = {}
    async for blob in container.list_blobs(name_starts_with=log_prefix(rid)):
        number = segment_number(blob.name, rid)
        if number is not None:
            sizes[number] = int(blob.size or 0)
            if blob.last_modified is not None:
                written[number] = blob.last_modified
    return sizes, written


class BlobEventReader:
    """Reads one blob container's event logs (``<prefix>-events``); no writer state, no fencing."""

    def __init__(self, container: ContainerClient, *, tail_window: int = DEFAULT_TAIL_WINDOW) -> None:
        self._container = container
        self.tail_window = max(1024, tail_window)
        self.storage_calls = 0  # every round trip made by this reader
        self._blob_clients: dict[str, BlobClient] = {}

    async def _list(self, rid: str) -> dict[int, int]:
        """Segment sizes by number (one listing call)."""
        self.storage_calls += 1
        sizes, _ = await list_segments(self._container, rid)
        return sizes

    @translate_errors
    async def read_after(self, response_id: str, starting_after: int) -> ReadResult:
        """Every event after ``starting_after`` (see :meth:`_read_after` for the reads it makes)."""
        return await self._read_after(response_id, starting_after, partial=False)

    @translate_errors
    async def read_first(self, response_id: str, starting_after: int) -> ReadResult:
        """A reconnect's first read: like :meth:`read_after`, but a log longer than the head window whose head
        holds the first event wanted is answered from that one ranged read, with ``more`` set (the rest is
        read with ``read_more``), so a reconnect sends its first event after one read of the log."""
        return await self._read_after(response_id, starting_after, partial=True)

    async def _read_after(self, response_id: str, starting_after: int, *, partial: bool) -> ReadResult:
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
        if after < self.tail_window // SMALL_EVENT_BYTES:  # the head of the log probably covers it
            found = await self._read_single_segment(rid, after, partial=partial)
            if found is not None:
                return found
        sizes = await self._list(rid)
        if not sizes:
            raise NotFound(f"event log {rid!r} not found")
        found = await self._read_from_tail(rid, sizes, after)
        if found is not None:
            return found
        entry = best_entry(await self._read_index(rid), after)
        return await self._read_from(rid, entry.segment, entry.offset, after, missing_ok=False)

    async def _read_single_segment(self, rid: str, after: int, *, partial: bool) -> ReadResult | None:
        """The common log, one segment: read its first ``tail_window`` bytes (one call, which also tells
        the segment's size). A log that fits is answered from them; a longer one too when they hold the first
        event wanted and ``partial`` (the result says ``more``: the caller reads on from its cursor), else
        from one more ranged read of its tail. None (use the listing) when segment 0 is missing, ends with a
        next-segment marker, or its tail window starts after ``after`` + 1."""
        blob = self._blob(segment_blob(rid, 0))
        self.storage_calls += 1
        try:
            downloader = await blob.download_blob(offset=0, length=self.tail_window)
            head = await downloader.readall()
        except ResourceNotFoundError:
            return None
        except HttpResponseError as error:
            if error.status_code == 416:  # an empty segment: the log is being created
                return ReadResult(cursor=ReadCursor(0, 0, after))
            raise
        size = _total_size(downloader.properties.content_range, len(head))
        scan = scan_frames(head, after)
        if size <= len(head):
            if scan.next_segment is not None:
                return None
            return ReadResult(scan.events, ReadCursor(0, scan.consumed, scan.last_seq))
        if partial and scan.events:  # the head holds the first event wanted: the rest is one read_more away
            return ReadResult(scan.events, ReadCursor(0, scan.consumed, scan.last_seq), more=True)
        start = size - self.tail_window
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
        start = max(0, sizes[last] - self.tail_window)
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
