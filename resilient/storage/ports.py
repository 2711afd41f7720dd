"""The storage Protocols the engine and HTTP layer program against.

Why Protocols: the engine must be testable and readable without the Azure SDK, and the Azure-backed
implementations (``tables.py``, ``eventlog.py``) are swappable (e.g. for Durable Task Scheduler later).
All methods are async because activities, SSE tailing and HTTP handlers share one event loop.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

# The conversation port has its own module; re-exported so every port is importable from here.
from resilient.storage.conversation_port import ConversationEdits, ConversationRecord, ConversationStore

__all__ = ["ConversationEdits", "ConversationRecord", "ConversationStore"]

JsonDict = dict[str, Any]

TERMINAL_STATUSES = frozenset({"completed", "failed", "cancelled", "incomplete"})
ACTIVE_STATUSES = frozenset({"queued", "in_progress"})


@dataclass(frozen=True)
class ResponseRecord:
    """One stored response row.

    ``doc`` holds everything needed to rebuild the response object except ``output`` (which lives
    in the item store as per-phase checkpoints): model, created_at, background, store, instructions,
    metadata, previous_response_id, conversation, chain_id, error, incomplete_details, usage,
    completed_at, plan, ... ``cancel_requested`` and ``pending_input_count`` are separate columns so
    the hot control check (:meth:`ResponseStore.get_control`) reads two small properties.
    """

    response_id: str
    status: str
    doc: JsonDict
    etag: str
    cancel_requested: bool = False
    pending_input_count: int = 0


@dataclass(frozen=True)
class Control:
    """The live control flags a running phase polls between deltas (cheap projection of the row)."""

    status: str
    cancel_requested: bool
    pending_input_count: int


class ResponseStore(Protocol):
    async def create(self, response_id: str, status: str, doc: JsonDict) -> ResponseRecord:
        """Create-if-absent. If the row exists already (a retried request), return the stored row."""
        ...

    async def get(self, response_id: str) -> ResponseRecord:
        """Raise NotFound if absent."""
        ...

    async def get_control(self, response_id: str) -> Control:
        """Cheap read of status / cancel flag / pending count. Raise NotFound if absent."""
        ...

    async def replace(
        self,
        record: ResponseRecord,
        *,
        status: str | None = None,
        doc_changes: JsonDict | None = None,
        cancel_requested: bool | None = None,
        pending_input_count: int | None = None,
    ) -> ResponseRecord:
        """Compare-and-swap on ``record.etag``: merge the changes and write, or raise PreconditionFailed."""
        ...

    async def transition(
        self,
        response_id: str,
        to_status: str,
        *,
        allowed_from: frozenset[str],
        doc_changes: JsonDict | None = None,
        cancel_requested: bool | None = None,
        current: ResponseRecord | None = None,
    ) -> ResponseRecord:
        """Read, check ``status in allowed_from``, CAS; retry on PreconditionFailed.

        Raise InvalidTransition(current) when the current status is not allowed. Exactly one of two
        racing terminal transitions wins because both CAS from the same non-terminal ETag. ``current``
        (a row the caller read or wrote earlier) saves the first read: a stale one just loses its CAS.
        """
        ...

    async def add_pending_input(self, response_id: str, delta: int) -> ResponseRecord:
        """Atomically (CAS loop) add ``delta`` to pending_input_count (never below 0)."""
        ...

    async def delete(self, response_id: str) -> None:
        """Idempotent delete (absent is fine)."""
        ...

    async def list_finished_before(self, cutoff_epoch_seconds: float, limit: int) -> list[str]:
        """Ids of terminal responses last modified before ``cutoff`` (for retention clean-up)."""
        ...


@dataclass(frozen=True)
class ItemPage:
    data: list[JsonDict]
    has_more: bool


class ItemStore(Protocol):
    """Input items and per-phase output items (each output item is that phase's checkpoint).

    Items larger than a Table property (64 KiB string / 1 MiB entity) spill to a blob transparently.
    """

    async def put_input_items(self, response_id: str, items: Sequence[JsonDict]) -> None:
        """Idempotent (upsert by position). Each item must carry a unique ``id``."""
        ...

    async def list_input_items(
        self, response_id: str, *, after: str | None, limit: int, order: Literal["asc", "desc"]
    ) -> ItemPage:
        """Page in ``order``; ``after`` is an item id (exclusive). Unknown ``after`` raises NotFound."""
        ...

    async def put_output_item(self, response_id: str, index: int, item: JsonDict) -> None:
        """Write the checkpoint for phase ``index`` (upsert: a re-delivered phase rewrites the same row)."""
        ...

    async def put_output_items(self, response_id: str, first_index: int, items: Sequence[JsonDict]) -> None:
        """Write the items of one phase at ``first_index``, ``first_index + 1``, ... in one transaction
        (a phase that ends with function calls has several items; all or none must be its checkpoint)."""
        ...

    async def get_output_item(self, response_id: str, index: int) -> JsonDict | None:
        ...

    async def list_output_items(self, response_id: str) -> list[JsonDict]:
        """All checkpointed output items, by index."""
        ...

    async def find_items(self, response_id: str, item_ids: Collection[str]) -> list[JsonDict]:
        """The response's input and output items whose id is one of ``item_ids`` (input items first, then
        output items, each in order), read with one partition query: how an ``item_reference`` to an
        item whose id names this response resolves. Ids not found are simply absent."""
        ...

    async def delete_all(self, response_id: str) -> None:
        ...


@dataclass(frozen=True)
class StoredEvent:
    """One event as stored: its SSE frame bytes (``event:``/``id:``/``data:`` + blank line)."""

    sequence_number: int
    type: str
    frame: bytes

    def json(self) -> JsonDict:
        """Parse the ``data:`` line (only when a caller needs the payload)."""
        import json

        for line in self.frame.split(b"\n"):
            if line.startswith(b"data: "):
                parsed: JsonDict = json.loads(line[6:])
                return parsed
        raise ValueError("frame has no data line")


@dataclass(frozen=True)
class ReadCursor:
    """Where a reader stopped: resume a tail without re-reading or re-parsing what it has seen."""

    segment: int
    offset: int
    last_sequence_number: int


@dataclass(frozen=True)
class CommittedBlock:
    """Events that one append committed (contiguous sequence numbers) and the log position after them."""

    events: tuple[StoredEvent, ...]
    cursor: ReadCursor

    @property
    def first_sequence_number(self) -> int:
        return self.events[0].sequence_number if self.events else self.cursor.last_sequence_number + 1

    @property
    def size(self) -> int:
        return sum(len(event.frame) for event in self.events)


@dataclass
class ReadResult:
    events: list[StoredEvent] = field(default_factory=list)
    cursor: ReadCursor = field(default_factory=lambda: ReadCursor(0, 0, -1))
    # The read stopped before the end of the log it saw (a first read answered from the log's head, so the
    # first event goes out after one ranged read): read on from ``cursor`` at once, not at the next poll.
    more: bool = False


class EventWriter(Protocol):
    """A fenced writer positioned at the end of one response's log."""

    @property
    def response_id(self) -> str: ...

    @property
    def next_sequence_number(self) -> int: ...

    @property
    def last_event(self) -> JsonDict | None:
        """The last stored event's JSON (None for an empty log): recovery decisions read it."""
        ...

    @property
    def storage_calls(self) -> int:
        """Storage round trips made by this writer (for benchmarks)."""
        ...

    @property
    def written_at(self) -> datetime | None:
        """When the log last changed, as the storage service stamped it when this writer was opened
        (None if not known, e.g. a writer that created the log). Recovery reads it to tell a log another
        attempt is writing right now from one whose writer died."""
        ...

    @property
    def last_committed(self) -> CommittedBlock | None:
        """The block of this writer's last append (None before its first): what a reader that starts
        right here can begin with instead of reading it back from storage."""
        ...

    async def append(self, events: Sequence[JsonDict]) -> int:
        """Stamp contiguous ``sequence_number``s, append as few blocks as possible, return the last one.

        Fenced by append position: raise LostOwnership (appending nothing) if another writer appended
        since this writer's last known position.
        """
        ...


class EventLog(Protocol):
    async def create(self, response_id: str, first_events: Sequence[JsonDict]) -> EventWriter:
        """Create the log (segment 0) with its first events; raise AlreadyExists if it exists."""
        ...

    async def open_writer(self, response_id: str) -> EventWriter:
        """Position a writer at the current end of the log (raise NotFound if there is no log)."""
        ...

    def take_writer(self, response_id: str) -> EventWriter | None:
        """The writer last given to :meth:`keep_writer` for this log, handed out once; else None.

        It is positioned after its own last append, which is the end of the log unless somebody else
        appended since. Its next append proves that nobody did, or fails with LostOwnership (appending
        nothing). So whatever a caller decides from its ``last_event`` is confirmed by that append; a
        decision that appends nothing must come from :meth:`open_writer` instead. No storage call.
        """
        ...

    def keep_writer(self, writer: EventWriter) -> None:
        """Keep a live writer for the next activity of the same run in this process (bounded, LRU)."""
        ...

    async def read_after(self, response_id: str, starting_after: int) -> ReadResult:
        """Events with sequence_number > starting_after, by ranged reads from the offset index."""
        ...

    async def read_first(self, response_id: str, starting_after: int) -> ReadResult:
        """A reconnect's first read: events after ``starting_after`` in as few reads as the log allows, possibly
        not all of them (``more`` is then set: the rest comes from ``read_more`` with the cursor)."""
        ...

    async def read_more(self, response_id: str, cursor: ReadCursor) -> ReadResult:
        """Events appended after ``cursor`` (empty when there are none yet)."""
        ...

    async def delete(self, response_id: str) -> None:
        ...


@dataclass(frozen=True)
class ChainRecord:
    """A conversation chain's bookkeeping row: its newest turn and the turns not yet known finished.

    The Durable entity is the lock (who runs); this row is what the HTTP layer serializes new turns on
    (fork detection, queue position, steering counts) with one ETag compare-and-swap per turn.
    """

    chain_id: str
    latest_response_id: str | None
    open_turns: tuple[str, ...]
    etag: str | None  # None: the row does not exist yet


class ChainStore(Protocol):
    async def get(self, chain_id: str) -> ChainRecord:
        """The chain row, or an empty record (etag None) when the chain has no turn yet."""
        ...

    async def append_turn(self, record: ChainRecord, response_id: str, open_turns: Sequence[str]) -> ChainRecord:
        """CAS: make ``response_id`` the latest turn and set the open turns; PreconditionFailed if raced."""
        ...

    async def delete(self, chain_id: str) -> None:
        """Idempotent delete of the chain row (a deleted conversation's)."""
        ...


@dataclass(frozen=True)
class ActiveEntry:
    """One unfinished response in the :class:`ActiveIndex`."""

    response_id: str
    since: float  # creation time, epoch seconds


class ActiveIndex(Protocol):
    """The responses not yet finalized, so the repair path finds stuck runs without scanning every row."""

    async def add(self, response_id: str, since_epoch_seconds: float) -> None:
        """Idempotent (upsert)."""
        ...

    async def remove(self, response_id: str) -> None:
        """Idempotent delete (absent is fine)."""
        ...

    async def list(self, limit: int) -> list[ActiveEntry]:
        """Up to ``limit`` entries, in no particular order."""
        ...

