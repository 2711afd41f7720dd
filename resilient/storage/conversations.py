"""Conversation rows in Azure Table storage: :class:`TableConversationStore` implements ``ConversationStore``.

Kept in the chains table, in the conversation's own partition (PartitionKey = conversation id), beside its
chain row (RowKey ``c``): the row ``conv`` (created_at, metadata, batch count, deleted mark), one row
``b-000001``… per item batch added through the API (the chain's newest turn when it was added), and one row
``h-<item id>`` per item deleted from the conversation. One partition query reads all of a conversation's
edits; no new table has to be provisioned.
"""

from __future__ import annotations

import json
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import ResourceExistsError, ResourceModifiedError, ResourceNotFoundError
from azure.data.tables import UpdateMode
from azure.data.tables.aio import TableClient

from resilient.ids import CONVERSATION_PREFIX, validate_id
from resilient.storage.connection import translate_errors
from resilient.storage.errors import AlreadyExists, NotFound, PreconditionFailed
from resilient.storage.ports import ConversationEdits, ConversationRecord

ROW_KEY = "conv"
BATCH_PREFIX = "b-"
HIDDEN_PREFIX = "h-"


def _cid(conversation_id: str) -> str:
    return validate_id(conversation_id, prefix=CONVERSATION_PREFIX, param="conversation_id")


def batch_key(number: int) -> str:
    if not isinstance(number, int) or isinstance(number, bool) or not 1 <= number <= 999_999:
        raise ValueError(f"batch number must be an int in [1, 999999], got {number!r}")
    return f"{BATCH_PREFIX}{number:06d}"


def _record(cid: str, entity: Any) -> ConversationRecord:
    etag = str((getattr(entity, "metadata", None) or {}).get("etag", ""))
    return ConversationRecord(cid, int(entity.get("created_at", 0)), dict(json.loads(entity.get("metadata") or "{}")),
                              int(entity.get("batches", 0)), bool(entity.get("deleted", False)), etag)


class TableConversationStore:
    """``ConversationStore`` over the chains table (``<prefix>chains``)."""

    def __init__(self, table: TableClient) -> None:
        self._table = table
        self.storage_calls = 0

    @translate_errors
    async def create(self, conversation_id: str, created_at: int, metadata: dict[str, str],
                     batches: int) -> ConversationRecord:
        cid = _cid(conversation_id)
        entity = {"PartitionKey": cid, "RowKey": ROW_KEY, "created_at": int(created_at),
                  "metadata": json.dumps(metadata), "batches": int(batches), "deleted": False}
        self.storage_calls += 1
        try:
            result = await self._table.create_entity(entity)
        except ResourceExistsError:
            raise AlreadyExists(f"conversation {cid!r} exists") from None
        etag = str(result.get("etag", "")) if isinstance(result, dict) else ""
        return ConversationRecord(cid, int(created_at), dict(metadata), int(batches), False, etag)

    @translate_errors
    async def get(self, conversation_id: str) -> ConversationRecord:
        cid = _cid(conversation_id)
        self.storage_calls += 1
        try:
            entity = await self._table.get_entity(cid, ROW_KEY)
        except ResourceNotFoundError:
            raise NotFound(f"conversation {cid!r} not found") from None
        return _record(cid, entity)

    @translate_errors
    async def replace(self, record: ConversationRecord, *, metadata: dict[str, str] | None = None,
                      batches: int | None = None, deleted: bool | None = None) -> ConversationRecord:
        cid = _cid(record.conversation_id)
        changed = ConversationRecord(
            cid, record.created_at, dict(record.metadata if metadata is None else metadata),
            record.batches if batches is None else int(batches), record.deleted if deleted is None else deleted,
            record.etag)
        entity = {"PartitionKey": cid, "RowKey": ROW_KEY, "created_at": changed.created_at,
                  "metadata": json.dumps(changed.metadata), "batches": changed.batches, "deleted": changed.deleted}
        self.storage_calls += 1
        try:
            result = await self._table.update_entity(entity, mode=UpdateMode.REPLACE, etag=record.etag,
                                                     match_condition=MatchConditions.IfNotModified)
        except ResourceModifiedError:
            raise PreconditionFailed(f"conversation {cid!r} changed since it was read") from None
        except ResourceNotFoundError:
            raise NotFound(f"conversation {cid!r} not found") from None
        etag = str(result.get("etag", "")) if isinstance(result, dict) else ""
        return ConversationRecord(cid, changed.created_at, changed.metadata, changed.batches, changed.deleted, etag)

    @translate_errors
    async def add_batch(self, conversation_id: str, number: int, after_turn: str | None) -> None:
        cid = _cid(conversation_id)
        after = "" if after_turn is None else validate_id(after_turn, param="after_turn")
        self.storage_calls += 1
        await self._table.upsert_entity({"PartitionKey": cid, "RowKey": batch_key(number), "after_turn": after},
                                        mode=UpdateMode.REPLACE)

    @translate_errors
    async def hide_item(self, conversation_id: str, item_id: str) -> None:
        cid = _cid(conversation_id)
        key = HIDDEN_PREFIX + validate_id(item_id, param="item_id")
        self.storage_calls += 1
        await self._table.upsert_entity({"PartitionKey": cid, "RowKey": key}, mode=UpdateMode.REPLACE)

    @translate_errors
    async def edits(self, conversation_id: str) -> ConversationEdits:
        cid = _cid(conversation_id)
        batches: list[tuple[int, str | None]] = []
        hidden: set[str] = set()
        for row in await self._rows(cid, "RowKey ge @lo and RowKey lt @hi", {"lo": BATCH_PREFIX, "hi": "i"}):
            key = str(row["RowKey"])
            if key.startswith(BATCH_PREFIX):
                batches.append((int(key[len(BATCH_PREFIX):]), str(row.get("after_turn") or "") or None))
            elif key.startswith(HIDDEN_PREFIX):
                hidden.add(key[len(HIDDEN_PREFIX):])
        return ConversationEdits(tuple(sorted(batches)), frozenset(hidden))

    @translate_errors
    async def delete(self, conversation_id: str) -> None:
        cid = _cid(conversation_id)
        keys = [str(row["RowKey"]) for row in await self._rows(cid, "RowKey ne @chain", {"chain": "c"})]
        # The conversation row last: until then a retried deletion still finds the conversation to finish.
        keys.sort(key=lambda key: key == ROW_KEY)
        for key in keys:  # one by one: a delete of a row already gone is no error, so a racing delete is none
            self.storage_calls += 1
            await self._table.delete_entity(cid, key)

    async def _rows(self, cid: str, condition: str, parameters: dict[str, Any]) -> list[Any]:
        pager = self._table.query_entities(f"PartitionKey eq @pk and {condition}", parameters={"pk": cid,
                                           **parameters})
        rows: list[Any] = []
        async for page in pager.by_page():
            self.storage_calls += 1
            rows += [row async for row in page]
        return rows
