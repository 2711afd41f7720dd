"""The event log in memory: :class:`MemoryEventLog` and its fenced :class:`MemoryEventWriter`.

Same contract as :class:`~resilient.storage.eventlog.BlobEventLog`: frames are the SSE bytes stored
exactly as sent, sequence numbers are contiguous, and an append is fenced by the byte position the writer
expects the log to end at. Appending at a stale position raises ``LostOwnership`` and kills the writer for
good, unless the bytes already there are exactly the ones it meant to write (the blob adapter's rule for a
retried append). Each committed block is published to the process's :class:`CommittedFeed` with the log
position after it, so in-process readers behave as with the blob log. One segment; no offset index.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from datetime import UTC, datetime

from resilient.ids import validate_id
from resilient.protocol.sse import encode_frame
from resilient.storage.errors import AlreadyExists, LostOwnership, NotFound
from resilient.storage.feed import CommittedFeed
from resilient.storage.ports import (
    CommittedBlock,
    EventWriter,
    JsonDict,
    ReadCursor,
    ReadResult,
    StoredEvent,
)
from tests.memory_storage.backend import LogData, MemoryBackend, round_trip

MAX_BLOCK_BYTES = 4 * 1024 * 1024  # an append blob's block limit: one frame may not exceed it
KEPT_WRITERS = 1024


class MemoryEventWriter:
    """``EventWriter`` at the end of one in-memory log; obtain one from :class:`MemoryEventLog`."""

    def __init__(self, logs: dict[str, LogData], response_id: str, *, offset: int, next_seq: int,
                 last_event: JsonDict | None, written_at: datetime | None, feed: CommittedFeed,
                 max_block_bytes: int = MAX_BLOCK_BYTES, storage_calls: int = 0) -> None:
        self._logs = logs
        self._rid = response_id
        self._offset = offset
        self._next_seq = next_seq
        self._last_event = last_event
        self._written_at = written_at
        self._feed = feed
        self._max_block_bytes = max_block_bytes
        self._calls = storage_calls
        self._dead = False
        self._last_committed: CommittedBlock | None = None

    @property
    def response_id(self) -> str:
        return self._rid

    @property
    def next_sequence_number(self) -> int:
        return self._next_seq

    @property
    def last_event(self) -> JsonDict | None:
        return self._last_event

    @property
    def storage_calls(self) -> int:
        return self._calls

    @property
    def written_at(self) -> datetime | None:
        return self._written_at

    @property
    def last_committed(self) -> CommittedBlock | None:
        return self._last_committed

    @property
    def dead(self) -> bool:
        return self._dead

    def check(self, events: Sequence[JsonDict]) -> None:
        """Raise ValueError if ``events`` could not be appended (bad type, frame over the block limit)."""
        self._pack(events)

    async def append(self, events: Sequence[JsonDict]) -> int:
        if self._dead:
            raise LostOwnership(f"event log {self._rid!r}: this writer lost ownership earlier")
        blocks = self._pack(events)  # validates everything before the first write
        for block in blocks:
            await self._append_fenced(block)
        return self._next_seq - 1

    def _pack(self, events: Sequence[JsonDict]) -> list[list[tuple[JsonDict, StoredEvent]]]:
        """Stamp and frame the events, grouped into blocks of whole frames of ≤ max_block_bytes."""
        blocks: list[list[tuple[JsonDict, StoredEvent]]] = []
        current: list[tuple[JsonDict, StoredEvent]] = []
        size = 0
        for seq, event in enumerate(events, start=self._next_seq):
            stamped = {**event, "sequence_number": seq}
            frame = encode_frame(stamped)
            if len(frame) > self._max_block_bytes:
                raise ValueError(f"event {seq} frame is {len(frame)} bytes, over the {self._max_block_bytes} limit")
            if current and size + len(frame) > self._max_block_bytes:
                blocks.append(current)
                current, size = [], 0
            current.append((stamped, StoredEvent(seq, str(stamped["type"]), frame)))
            size += len(frame)
        if current:
            blocks.append(current)
        return blocks

    async def _append_fenced(self, block: list[tuple[JsonDict, StoredEvent]]) -> None:
        data = b"".join(stored.frame for _, stored in block)
        self._calls += 1
        await round_trip()
        log = self._logs.get(self._rid)
        if log is None:
            self._dead = True
            raise LostOwnership(f"event log {self._rid!r} is gone")
        expected = self._offset
        if len(log.data) != expected:
            if bytes(log.data[expected : expected + len(data)]) != data:
                self._dead = True
                raise LostOwnership(f"event log {self._rid!r}: another writer appended at {expected}")
        else:
            for _, stored in block:
                log.frames.append((len(log.data), stored.sequence_number, stored.type, stored.frame))
                log.data += stored.frame
            log.modified = datetime.now(UTC)
        self._offset = expected + len(data)
        self._last_event = block[-1][0]
        self._next_seq = block[-1][1].sequence_number + 1
        # Committed: readers in this process may have it now, without reading it back.
        self._last_committed = CommittedBlock(tuple(stored for _, stored in block),
                                              ReadCursor(0, self._offset, self._next_seq - 1))
        self._feed.publish(self._rid, self._last_committed)


class MemoryEventLog:
    """``EventLog`` over a :class:`MemoryBackend`; its kept writers are this object's (one per process)."""

    def __init__(self, backend: MemoryBackend, *, feed: CommittedFeed,
                 max_block_bytes: int = MAX_BLOCK_BYTES) -> None:
        self._logs = backend.logs
        self._feed = feed
        self._max_block_bytes = max_block_bytes
        self._kept: OrderedDict[str, MemoryEventWriter] = OrderedDict()
        self.storage_calls = 0

    # -- writers kept between the activities of a run --------------------------------------------------
    def take_writer(self, response_id: str) -> MemoryEventWriter | None:
        writer = self._kept.pop(response_id, None)
        return None if writer is None or writer.dead else writer

    def keep_writer(self, writer: EventWriter) -> None:
        if not isinstance(writer, MemoryEventWriter) or writer.dead:
            return
        self._kept[writer.response_id] = writer
        self._kept.move_to_end(writer.response_id)
        while len(self._kept) > KEPT_WRITERS:
            self._kept.popitem(last=False)

    # -- writing ------------------------------------------------------------------------------------
    def _writer(self, rid: str, log: LogData | None, *, written_at: datetime | None) -> MemoryEventWriter:
        last = log.frames[-1] if log is not None and log.frames else None
        last_event = None if last is None else _event_json(last[3])
        return MemoryEventWriter(self._logs, rid, offset=0 if log is None else len(log.data),
                                 next_seq=0 if last is None else last[1] + 1, last_event=last_event,
                                 written_at=written_at, feed=self._feed, max_block_bytes=self._max_block_bytes,
                                 storage_calls=1)

    async def create(self, response_id: str, first_events: Sequence[JsonDict]) -> MemoryEventWriter:
        rid = validate_id(response_id, param="response_id")
        writer = self._writer(rid, None, written_at=None)
        writer.check(first_events)  # a bad event must not leave an empty log behind
        self.storage_calls += 1
        await round_trip()
        if rid in self._logs:
            raise AlreadyExists(f"event log {rid!r} exists")
        self._logs[rid] = LogData(bytearray(), [], datetime.now(UTC))
        await writer.append(first_events)
        return writer

    async def open_writer(self, response_id: str) -> MemoryEventWriter:
        rid = validate_id(response_id, param="response_id")
        self.storage_calls += 1
        await round_trip()
        log = self._logs.get(rid)
        if log is None:
            raise NotFound(f"event log {rid!r} not found")
        return self._writer(rid, log, written_at=log.modified)

    # -- reading ------------------------------------------------------------------------------------
    async def read_after(self, response_id: str, starting_after: int) -> ReadResult:
        rid = validate_id(response_id, param="response_id")
        if not isinstance(starting_after, int) or isinstance(starting_after, bool):
            raise ValueError("starting_after must be an int")
        return await self._read(rid, 0, max(-1, starting_after))

    async def read_first(self, response_id: str, starting_after: int) -> ReadResult:
        return await self.read_after(response_id, starting_after)  # one call reads it all here

    async def read_more(self, response_id: str, cursor: ReadCursor) -> ReadResult:
        rid = validate_id(response_id, param="response_id")
        return await self._read(rid, cursor.offset, cursor.last_sequence_number)

    async def _read(self, rid: str, offset: int, after: int) -> ReadResult:
        """Frames from ``offset`` on whose sequence number is above ``after``; the cursor ends the log."""
        self.storage_calls += 1
        await round_trip()
        log = self._logs.get(rid)
        if log is None:
            raise NotFound(f"event log {rid!r} not found")
        events = [StoredEvent(seq, kind, frame) for at, seq, kind, frame in log.frames
                  if at >= offset and seq > after]
        last = events[-1].sequence_number if events else after
        return ReadResult(events, ReadCursor(0, max(offset, len(log.data)), last))

    # -- deletion -----------------------------------------------------------------------------------
    async def delete(self, response_id: str) -> None:
        rid = validate_id(response_id, param="response_id")
        self._kept.pop(rid, None)
        self._feed.forget_log(rid)  # before the deletion: a reconnect here must not outlive the log
        self.storage_calls += 1
        await round_trip()
        self._logs.pop(rid, None)


def _event_json(frame: bytes) -> JsonDict:
    return StoredEvent(0, "", frame).json()
