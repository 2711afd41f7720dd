"""The per-response event log on append blobs: :class:`BlobEventLog` implements ``EventLog``.

Why append blobs of SSE frames: replay and reconnect (``starting_after=N``) need no orchestration
and no agent, only storage (its reads are :mod:`.eventreader`'s). This module creates logs, positions
fenced writers at their end (see :mod:`.eventwriter`) and deletes them. See :mod:`.logformat` for the
layout.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from contextlib import suppress
from datetime import datetime

from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError
from azure.storage.blob.aio import ContainerClient

from resilient.ids import validate_id
from resilient.protocol.sse import parse_frame
from resilient.storage.connection import translate_errors
from resilient.storage.errors import AlreadyExists, LostOwnership, NotFound
from resilient.storage.eventreader import DEFAULT_TAIL_WINDOW, BlobEventReader, list_segments
from resilient.storage.eventwriter import MAX_BLOCK_BYTES, BlobEventWriter, LogLimits, WriterPosition
from resilient.storage.feed import CommittedFeed
from resilient.storage.kept import KEPT_WRITERS, KeptWriters
from resilient.storage.logformat import (
    Tail,
    index_blob,
    log_prefix,
    scan_tail,
    segment_blob,
)
from resilient.storage.ports import EventWriter, JsonDict, ReadCursor, ReadResult

__all__ = ["KEPT_WRITERS", "BlobEventLog"]

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
        self.reader = BlobEventReader(container, tail_window=tail_window)  # its reads count there
        self._tail_window = self.reader.tail_window
        self.storage_calls = 0  # every round trip made by this object (not by the writers it returns)

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
        self.storage_calls += 1
        return await list_segments(self._container, rid)

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

    # -- reading (see :mod:`.eventreader`) ---------------------------------------------------------------
    async def read_after(self, response_id: str, starting_after: int) -> ReadResult:
        return await self.reader.read_after(response_id, starting_after)

    async def read_first(self, response_id: str, starting_after: int) -> ReadResult:
        return await self.reader.read_first(response_id, starting_after)

    async def read_more(self, response_id: str, cursor: ReadCursor) -> ReadResult:
        return await self.reader.read_more(response_id, cursor)

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
