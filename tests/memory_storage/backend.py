"""The state every in-memory store of one "storage account" shares: :class:`MemoryBackend`.

Why one object: tests build a second ``Storage`` over the same account to play another process
(``build_memory_storage(storage.clients, ...)``); both must see the same rows and logs but keep their own
process-local caches (kept writers), exactly as with two sets of Azure clients.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from resilient.protocol.sse import compact_json
from resilient.storage.ports import JsonDict


def frozen_json(value: JsonDict) -> str:
    """Serialize as storage would: a later change to the caller's dict must not reach the stored copy."""
    return compact_json(value)


def thawed_json(text: str) -> JsonDict:
    """A fresh copy of a stored document (callers may mutate what they read)."""
    value: JsonDict = json.loads(text)
    return value


async def round_trip() -> None:
    """Yield once, like a request in flight, so concurrent callers interleave between read and write."""
    await asyncio.sleep(0)


@dataclass
class ResponseRow:
    status: str
    doc: str
    cancel_requested: bool
    pending_input_count: int
    etag: str
    modified: float  # epoch seconds of the last write (the Table's ``Timestamp``)


@dataclass
class ItemRows:
    """One response's item partition: input rows by position, the count row, output rows by index."""

    inputs: dict[int, tuple[str, str]] = field(default_factory=dict)  # position -> (item id, JSON)
    count: int | None = None  # the count row of a multi-item put
    only_row: bool = False  # row 0 was written by a one-item put (it carries its own count)
    outputs: dict[int, str] = field(default_factory=dict)


@dataclass
class ChainRow:
    latest: str
    open_turns: tuple[str, ...]
    etag: str


@dataclass
class ConversationRows:
    """One conversation's partition: its own row (``exists``, created_at … etag), its item batches and its
    hidden items (which, as in the table, can be written without the row)."""

    exists: bool = False
    created_at: int = 0
    metadata: str = "{}"
    batches: int = 0
    deleted: bool = False
    etag: str = ""
    added: dict[int, str | None] = field(default_factory=dict)  # batch number -> the turn it follows
    hidden: set[str] = field(default_factory=set)


@dataclass
class LogData:
    """One event log: its bytes (one segment), each frame's start offset, and when it last changed."""

    data: bytearray
    frames: list[tuple[int, int, str, bytes]]  # (offset, sequence number, type, frame)
    modified: datetime


@dataclass
class MemoryBackend:
    """Plays the storage account: the rows and logs all stores built over it share."""

    responses: dict[str, ResponseRow] = field(default_factory=dict)
    items: dict[str, ItemRows] = field(default_factory=dict)
    chains: dict[str, ChainRow] = field(default_factory=dict)
    conversations: dict[str, ConversationRows] = field(default_factory=dict)
    active: dict[str, float] = field(default_factory=dict)
    logs: dict[str, LogData] = field(default_factory=dict)
    _etags: itertools.count[int] = field(default_factory=lambda: itertools.count(1), repr=False)

    def new_etag(self) -> str:
        """A fresh ETag: every write changes it, so a stale compare-and-swap always loses."""
        return f'W/"mem-{next(self._etags)}"'

    async def close(self) -> None:
        """Nothing to release (the ``StorageClients.close`` counterpart)."""

    async def delete_all(self) -> None:
        """Forget everything (the ``StorageClients.delete_all`` counterpart)."""
        for table in (self.responses, self.items, self.chains, self.conversations, self.active, self.logs):
            table.clear()

    def describe_rows(self) -> dict[str, Mapping[str, Any]]:
        """Every kind of row by key (response id, or chain id for chains): what a test asks is left."""
        return {"responses": self.responses, "items": self.items, "chains": self.chains,
                "conversations": self.conversations, "active": self.active, "logs": self.logs}
