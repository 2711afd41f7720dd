"""Conversations in memory, with :class:`~resilient.storage.conversations.TableConversationStore`'s semantics:
create-if-absent (``AlreadyExists``), a compare-and-swap on the ETag (``PreconditionFailed``, ``NotFound``
once gone), idempotent batch rows, hidden marks and deletion, the same id validation."""

from __future__ import annotations

import json

from resilient.ids import CONVERSATION_PREFIX, validate_id
from resilient.storage.conversations import batch_key
from resilient.storage.errors import AlreadyExists, NotFound, PreconditionFailed
from resilient.storage.ports import ConversationEdits, ConversationRecord
from tests.memory_storage.backend import ConversationRows, MemoryBackend, round_trip


def _cid(conversation_id: str) -> str:
    return validate_id(conversation_id, prefix=CONVERSATION_PREFIX, param="conversation_id")


def _record(cid: str, rows: ConversationRows) -> ConversationRecord:
    return ConversationRecord(cid, rows.created_at, dict(json.loads(rows.metadata)), rows.batches, rows.deleted,
                              rows.etag)


class MemoryConversationStore:
    """``ConversationStore`` over a :class:`MemoryBackend`."""

    def __init__(self, backend: MemoryBackend) -> None:
        self._rows = backend.conversations
        self._backend = backend
        self.storage_calls = 0

    async def _call(self) -> None:
        self.storage_calls += 1
        await round_trip()

    async def create(self, conversation_id: str, created_at: int, metadata: dict[str, str],
                     batches: int) -> ConversationRecord:
        cid = _cid(conversation_id)
        await self._call()
        rows = self._rows.setdefault(cid, ConversationRows())
        if rows.exists:
            raise AlreadyExists(f"conversation {cid!r} exists")
        rows.exists, rows.created_at, rows.metadata = True, int(created_at), json.dumps(metadata)
        rows.batches, rows.deleted, rows.etag = int(batches), False, self._backend.new_etag()
        return _record(cid, rows)

    async def get(self, conversation_id: str) -> ConversationRecord:
        cid = _cid(conversation_id)
        await self._call()
        rows = self._rows.get(cid)
        if rows is None or not rows.exists:
            raise NotFound(f"conversation {cid!r} not found")
        return _record(cid, rows)

    async def replace(self, record: ConversationRecord, *, metadata: dict[str, str] | None = None,
                      batches: int | None = None, deleted: bool | None = None) -> ConversationRecord:
        cid = _cid(record.conversation_id)
        await self._call()
        rows = self._rows.get(cid)
        if rows is None or not rows.exists:
            raise NotFound(f"conversation {cid!r} not found")
        if rows.etag != record.etag:
            raise PreconditionFailed(f"conversation {cid!r} changed since it was read")
        rows.metadata = json.dumps(record.metadata if metadata is None else metadata)
        rows.batches = record.batches if batches is None else int(batches)
        rows.deleted = record.deleted if deleted is None else deleted
        rows.etag = self._backend.new_etag()
        return _record(cid, rows)

    async def add_batch(self, conversation_id: str, number: int, after_turn: str | None) -> None:
        cid = _cid(conversation_id)
        batch_key(number)
        after = None if after_turn is None else validate_id(after_turn, param="after_turn")
        await self._call()
        self._rows.setdefault(cid, ConversationRows()).added[number] = after

    async def hide_item(self, conversation_id: str, item_id: str) -> None:
        cid = _cid(conversation_id)
        iid = validate_id(item_id, param="item_id")
        await self._call()
        self._rows.setdefault(cid, ConversationRows()).hidden.add(iid)

    async def edits(self, conversation_id: str) -> ConversationEdits:
        cid = _cid(conversation_id)
        await self._call()
        rows = self._rows.get(cid)
        if rows is None:
            return ConversationEdits((), frozenset())
        return ConversationEdits(tuple(sorted(rows.added.items())), frozenset(rows.hidden))

    async def delete(self, conversation_id: str) -> None:
        cid = _cid(conversation_id)
        await self._call()
        self._rows.pop(cid, None)
