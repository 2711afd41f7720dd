"""Conversation-chain rows in Azure Table storage: :class:`TableChainStore` implements ``ChainStore``.

One entity per chain: PartitionKey = chain id, RowKey = "c"; columns ``latest`` (newest turn) and
``open_turns`` (JSON list of turns not yet seen finished). Creating a turn is one compare-and-swap on
this row, so two turns racing onto one chain are ordered, and a ``previous_response_id`` that is not
the newest turn is detected as a fork.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import ResourceExistsError, ResourceModifiedError, ResourceNotFoundError
from azure.data.tables import UpdateMode
from azure.data.tables.aio import TableClient

from resilient.ids import validate_id
from resilient.storage.connection import translate_errors
from resilient.storage.errors import PreconditionFailed
from resilient.storage.ports import ChainRecord

ROW_KEY = "c"


def _etag(entity: Any) -> str:
    metadata = getattr(entity, "metadata", None) or {}
    return str(metadata.get("etag", ""))


class TableChainStore:
    """``ChainStore`` over one Azure Table (``<prefix>chains``)."""

    def __init__(self, table: TableClient) -> None:
        self._table = table
        self.storage_calls = 0

    @translate_errors
    async def get(self, chain_id: str) -> ChainRecord:
        cid = validate_id(chain_id, param="chain_id")
        self.storage_calls += 1
        try:
            entity = await self._table.get_entity(cid, ROW_KEY)
        except ResourceNotFoundError:
            return ChainRecord(cid, None, (), None)
        open_turns = tuple(str(x) for x in json.loads(entity.get("open_turns") or "[]"))
        latest = entity.get("latest")
        return ChainRecord(cid, str(latest) if latest else None, open_turns, _etag(entity))

    @translate_errors
    async def append_turn(self, record: ChainRecord, response_id: str, open_turns: Sequence[str]) -> ChainRecord:
        cid = validate_id(record.chain_id, param="chain_id")
        rid = validate_id(response_id, param="response_id")
        turns = [validate_id(t, param="open_turns") for t in open_turns]
        entity = {"PartitionKey": cid, "RowKey": ROW_KEY, "latest": rid, "open_turns": json.dumps(turns)}
        self.storage_calls += 1
        try:
            if record.etag is None:
                result = await self._table.create_entity(entity)
            else:
                result = await self._table.update_entity(
                    entity, mode=UpdateMode.REPLACE, etag=record.etag, match_condition=MatchConditions.IfNotModified
                )
        except (ResourceExistsError, ResourceModifiedError):
            raise PreconditionFailed(f"chain {cid!r} changed concurrently") from None
        etag = str((result or {}).get("etag", "")) if isinstance(result, dict) else ""
        return ChainRecord(cid, rid, tuple(turns), etag or None)

    @translate_errors
    async def delete(self, chain_id: str) -> None:
        cid = validate_id(chain_id, param="chain_id")
        self.storage_calls += 1
        await self._table.delete_entity(cid, ROW_KEY)  # absent: no error
