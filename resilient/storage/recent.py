"""The logs this process wrote from their first event: a reconnect reads them without a storage round trip.

Why: a client that drops usually reconnects within seconds, to the instance that ran its response (one
instance, or the same one by chance on many). Reading the log back from storage is the slowest step of a
reconnect (a ranged download, billed) although this process published every byte of it a moment ago.

Why it is safe: a log is append-only and fenced. A block is remembered only after storage accepted it at
the stated position (:class:`~resilient.storage.ports.CommittedBlock`), and only while the remembered
events are contiguous from sequence number 0: any block this process did not see (another instance wrote
it) breaks the chain and the log is forgotten. So what is remembered is always a true prefix of the
stored log, and its cursor is a true storage position: a reader that starts from it continues from
storage (or the feed) exactly as one that read the prefix from storage. The caller still checks the
response's row on every reconnect, so a deletion on another instance is seen; a deletion here forgets the
log at once. Memory is bounded (per log and in total, oldest forgotten first) and a log is served for
:data:`RECENT_LOG_SECONDS` after its last block only.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field

from resilient.storage.ports import CommittedBlock, ReadCursor, StoredEvent

__all__ = ["RECENT_LOG_BYTES", "RECENT_LOG_MAX_BYTES", "RECENT_LOG_SECONDS", "RecentLogs"]

# All remembered logs together (the typical 3-phase response is ~50 KB: a few hundred of them).
RECENT_LOG_BYTES = 16 * 1024 * 1024
# A longer log is not remembered (it is read from storage like any other).
RECENT_LOG_MAX_BYTES = 1024 * 1024
# A reconnect is served from memory this long after the log's last block; later it reads storage.
RECENT_LOG_SECONDS = 120.0


@dataclass
class _Log:
    events: list[StoredEvent] = field(default_factory=list)
    cursor: ReadCursor = field(default_factory=lambda: ReadCursor(0, 0, -1))
    size: int = 0
    touched: float = 0.0


class RecentLogs:
    """Prefixes of logs committed in this process. Not thread-safe: the caller holds its own lock."""

    def __init__(self, max_bytes: int = RECENT_LOG_BYTES, max_log_bytes: int = RECENT_LOG_MAX_BYTES,
                 keep_seconds: float = RECENT_LOG_SECONDS) -> None:
        self._logs: OrderedDict[str, _Log] = OrderedDict()
        self._bytes = 0
        self._max_bytes = max_bytes
        self._max_log_bytes = max_log_bytes
        self._keep_seconds = keep_seconds

    @property
    def size(self) -> int:
        """Bytes of frames remembered (for tests and diagnostics)."""
        return self._bytes

    def add(self, response_id: str, block: CommittedBlock) -> None:
        """Remember a committed block if it continues the log's remembered prefix (or starts the log)."""
        if not block.events:
            return
        entry = self._logs.get(response_id)
        first = block.first_sequence_number
        if entry is None:
            if first != 0:
                return  # the log's start was written elsewhere (or before this process started)
            entry = self._logs[response_id] = _Log()
        elif first != entry.cursor.last_sequence_number + 1:
            self.forget(response_id)  # a block written elsewhere came in between: no longer a known prefix
            return
        size = block.size
        if entry.size + size > self._max_log_bytes:
            self.forget(response_id)
            return
        entry.events.extend(block.events)
        entry.cursor = block.cursor
        entry.size += size
        entry.touched = time.monotonic()
        self._bytes += size
        self._logs.move_to_end(response_id)
        while self._bytes > self._max_bytes and self._logs:
            self.forget(next(iter(self._logs)))

    def after(self, response_id: str, starting_after: int) -> CommittedBlock | None:
        """The remembered events after ``starting_after`` and the log position after them, or None when the
        log is not remembered, is too old, or does not reach past ``starting_after``."""
        entry = self._logs.get(response_id)
        if entry is None:
            return None
        if time.monotonic() - entry.touched > self._keep_seconds:
            self.forget(response_id)
            return None
        if entry.cursor.last_sequence_number <= starting_after:
            return None  # nothing new here: let the reader ask storage (which may have more)
        start = max(0, starting_after + 1)
        return CommittedBlock(tuple(entry.events[start:]), entry.cursor)

    def forget(self, response_id: str) -> None:
        entry = self._logs.pop(response_id, None)
        if entry is not None:
            self._bytes -= entry.size
