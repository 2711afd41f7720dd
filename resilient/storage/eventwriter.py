"""The fenced writer at the end of one response's event log: :class:`BlobEventWriter`.

Why the append position is the fence: an append blob accepts ``append_block`` with
``appendpos_condition=<expected size>`` and refuses it (412 ``AppendPositionConditionNotMet``) when
anybody else appended since. A zombie activity (the host re-delivered its work to another worker)
therefore fails its next append and stops, while the log stays contiguous: no lock, no lease, no
extra round trip. A writer that lost once is dead for good.

The writer batches: one ``append`` call packs all its frames into as few blocks as possible (one
round trip per ≤ 4 MiB), stamps contiguous sequence numbers, and every ``index_every`` blocks adds a
hint to the offset index. A segment that reaches ``max_blocks_per_segment`` blocks (append blobs
allow 50,000) is closed with a ``: next-segment <n>`` marker and the log continues in segment n.

Each event is encoded once, straight into its frame with its sequence number
(:func:`~resilient.protocol.sse.stamped_frame`): the event itself is neither copied nor changed between
the agent that made it and the blob; only a block's last event is kept as a stamped copy (``last_event``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime

from azure.core.exceptions import (
    HttpResponseError,
    ResourceExistsError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.storage.blob.aio import BlobClient, ContainerClient

from resilient.protocol.sse import stamped_frame
from resilient.storage.connection import translate_errors
from resilient.storage.errors import LostOwnership
from resilient.storage.feed import CommittedFeed
from resilient.storage.logformat import index_blob, index_record, marker_frame, segment_blob
from resilient.storage.ports import CommittedBlock, JsonDict, ReadCursor, StoredEvent

log = logging.getLogger(__name__)

MAX_BLOCK_BYTES = 4 * 1024 * 1024
_APPEND_POSITION_NOT_MET = "AppendPositionConditionNotMet"


@dataclass(frozen=True)
class LogLimits:
    """Tunables of the log layout (tests lower them to exercise rollover and packing)."""

    index_every: int = 16
    max_blocks_per_segment: int = 49_000
    max_block_bytes: int = MAX_BLOCK_BYTES

    def __post_init__(self) -> None:
        if self.index_every < 1 or self.max_blocks_per_segment < 1 or not 0 < self.max_block_bytes <= MAX_BLOCK_BYTES:
            raise ValueError(f"invalid log limits: {self}")


@dataclass
class WriterPosition:
    """Where the log ends, as far as this writer knows."""

    segment: int
    offset: int  # == the segment's size == the expected append position
    block_count: int  # committed blocks in the segment
    next_seq: int
    last_event: JsonDict | None
    # the segment's Last-Modified as found when the writer was opened (None when unknown): how long ago
    # somebody last wrote the log, for telling a live writer from a dead one
    written_at: datetime | None = None


@dataclass(frozen=True)
class _Block:
    data: bytes
    first_seq: int
    last_event: JsonDict
    events: tuple[StoredEvent, ...]


def _block(events: list[StoredEvent], last: JsonDict) -> _Block:
    last_seq = events[-1].sequence_number
    return _Block(b"".join(e.frame for e in events), events[0].sequence_number,
                  {**last, "sequence_number": last_seq}, tuple(events))


@dataclass(frozen=True)
class PreparedEvents:
    """``events`` stamped from ``first_seq`` and framed into blocks by :meth:`BlobEventWriter.prepare`."""

    first_seq: int
    blocks: list[_Block]
    events: Sequence[JsonDict]


class BlobEventWriter:
    """``EventWriter`` over append-blob segments; obtain one from :class:`~.eventlog.BlobEventLog`."""

    def __init__(
        self,
        container: ContainerClient,
        response_id: str,
        position: WriterPosition,
        limits: LogLimits,
        *,
        storage_calls: int = 0,
        feed: CommittedFeed,
    ) -> None:
        self._container = container
        self._feed = feed  # readers in this process get each committed block from it
        self._rid = response_id
        self._pos = position
        self._limits = limits
        self._calls = storage_calls
        self._blocks_since_index = 0
        self._dead = False
        self._segment_client: BlobClient | None = None
        self._last_committed: CommittedBlock | None = None

    @property
    def response_id(self) -> str:
        return self._rid

    @property
    def next_sequence_number(self) -> int:
        return self._pos.next_seq

    @property
    def last_event(self) -> JsonDict | None:
        return self._pos.last_event

    @property
    def storage_calls(self) -> int:
        return self._calls

    @property
    def written_at(self) -> datetime | None:
        return self._pos.written_at

    @property
    def last_committed(self) -> CommittedBlock | None:
        return self._last_committed

    @property
    def segment(self) -> int:
        return self._pos.segment

    @property
    def dead(self) -> bool:
        return self._dead

    def prepare(self, events: Sequence[JsonDict]) -> PreparedEvents:
        """Stamp and frame ``events`` for :meth:`append_prepared`: raises ValueError when they could not be
        appended (bad type, frame over the block limit) before any storage call, and the frames are not
        encoded a second time when they are appended."""
        return PreparedEvents(self._pos.next_seq, self._pack(events), events)

    def add_calls(self, count: int) -> None:
        """Charge round trips spent on this writer's behalf (creating or opening the log)."""
        self._calls += count

    @translate_errors
    async def add_index_hint(self, first_seq: int, segment: int, offset: int) -> None:
        """Record that event ``first_seq`` starts at ``offset`` of ``segment`` (caller guarantees it)."""
        await self._add_index_record(first_seq, segment, offset)

    @translate_errors
    async def append(self, events: Sequence[JsonDict]) -> int:
        if self._dead:
            raise LostOwnership(f"event log {self._rid!r}: this writer lost ownership earlier")
        return await self._append_blocks(self._pack(events))  # validates everything before the first call

    @translate_errors
    async def append_prepared(self, prepared: PreparedEvents) -> int:
        """Append events made ready by :meth:`prepare` (re-framed if the log moved on since)."""
        if self._dead:
            raise LostOwnership(f"event log {self._rid!r}: this writer lost ownership earlier")
        if prepared.first_seq != self._pos.next_seq:
            return await self._append_blocks(self._pack(prepared.events))
        return await self._append_blocks(prepared.blocks)

    async def _append_blocks(self, blocks: list[_Block]) -> int:
        for block in blocks:
            if self._pos.block_count >= self._limits.max_blocks_per_segment:
                await self._roll_over()
            offset = self._pos.offset
            await self._append_fenced(block.data)
            self._pos.block_count += 1
            self._pos.next_seq = int(block.last_event["sequence_number"]) + 1
            self._pos.last_event = block.last_event
            self._blocks_since_index += 1
            # Committed: readers in this process may have it now, without reading it back from storage.
            cursor = ReadCursor(self._pos.segment, self._pos.offset, self._pos.next_seq - 1)
            self._last_committed = CommittedBlock(block.events, cursor)
            self._feed.publish(self._rid, self._last_committed)
            if self._blocks_since_index >= self._limits.index_every:
                await self._add_index_record(block.first_seq, self._pos.segment, offset)
        return self._pos.next_seq - 1

    def _pack(self, events: Sequence[JsonDict]) -> list[_Block]:
        """Frame the events with their sequence numbers, then group whole frames into blocks of
        ≤ max_block_bytes."""
        blocks: list[_Block] = []
        current: list[StoredEvent] = []
        size = 0
        seq = self._pos.next_seq
        limit = self._limits.max_block_bytes
        previous: JsonDict = {}
        for event in events:
            frame = stamped_frame(event, seq)
            if len(frame) > limit:
                raise ValueError(f"event {seq} frame is {len(frame)} bytes, over the {limit} limit")
            if current and size + len(frame) > limit:
                blocks.append(_block(current, previous))
                current, size = [], 0
            current.append(StoredEvent(seq, event["type"], frame))
            size += len(frame)
            previous = event
            seq += 1
        if current:
            blocks.append(_block(current, previous))
        return blocks

    def _segment_blob(self) -> BlobClient:
        if self._segment_client is None:
            self._segment_client = self._container.get_blob_client(segment_blob(self._rid, self._pos.segment))
        return self._segment_client

    async def _append_fenced(self, data: bytes) -> None:
        """Append at exactly the expected position, or die with LostOwnership."""
        blob = self._segment_blob()
        expected = self._pos.offset
        self._calls += 1
        try:
            await blob.append_block(data, length=len(data), appendpos_condition=expected)
        except ResourceNotFoundError as error:
            self._dead = True
            raise LostOwnership(f"event log {self._rid!r} segment {self._pos.segment} is gone") from error
        except HttpResponseError as error:
            if error.status_code != 412 or getattr(error, "error_code", None) != _APPEND_POSITION_NOT_MET:
                raise
            if not await self._landed(blob, expected, data):
                self._dead = True
                raise LostOwnership(f"event log {self._rid!r}: another writer appended at {expected}") from error
        self._pos.offset = expected + len(data)

    async def _landed(self, blob: BlobClient, expected: int, data: bytes) -> bool:
        """After a 412: is the block at ``expected`` byte-for-byte ours?

        Why: the SDK retries an append whose response was lost; the retry then fails the position
        check against our own, already committed block. Identical bytes (same sequence numbers, same
        events) mean the log holds exactly what we meant to write, so it is not a lost race.
        """
        self._calls += 1
        try:
            downloader = await blob.download_blob(offset=expected, length=len(data))
            return await downloader.readall() == data
        except HttpResponseError:
            return False

    async def _roll_over(self) -> None:
        """Close the full segment with a fenced marker, then continue in a fresh segment."""
        next_segment = self._pos.segment + 1
        await self._append_fenced(marker_frame(next_segment))
        self._pos.block_count += 1
        blob = self._container.get_blob_client(segment_blob(self._rid, next_segment))
        self._calls += 1
        try:
            await blob.create_append_blob(if_none_match="*")
        except ResourceExistsError as error:
            # Ours after an SDK retry, or a recovering opener's: both are fine while still empty
            # (the first append to it is fenced at position 0 anyway).
            self._calls += 1
            if (await blob.get_blob_properties()).size != 0:
                self._dead = True
                raise LostOwnership(f"event log {self._rid!r}: segment {next_segment} taken over") from error
        self._pos = WriterPosition(next_segment, 0, 0, self._pos.next_seq, self._pos.last_event)
        self._segment_client = blob
        self._blocks_since_index = 0
        await self._add_index_record(self._pos.next_seq, next_segment, 0)

    async def _add_index_record(self, first_seq: int, segment: int, offset: int) -> None:
        """Append an index hint, creating the index with the first one. Best effort: a missing hint only
        makes some read longer."""
        self._blocks_since_index = 0
        index = self._container.get_blob_client(index_blob(self._rid))
        record = index_record(first_seq, segment, offset)
        try:
            try:
                self._calls += 1
                await index.append_block(record)
            except ResourceNotFoundError:
                self._calls += 2
                with suppress(ResourceExistsError):  # another writer of this log created it meanwhile
                    await index.create_append_blob(if_none_match="*")
                await index.append_block(record)
        except (HttpResponseError, ServiceRequestError, ServiceResponseError) as error:
            log.warning("event log %s: index record for seq %d not written: %s", self._rid, first_seq, error)
