"""The index of unfinished responses: :class:`TableActiveIndex` implements ``ActiveIndex``.

Why an index: the repair path (:mod:`resilient.engine.heal.repair`) must find responses whose orchestration
died while their row still says ``queued``/``in_progress``. The response rows are one partition each, so a
filter on ``status`` is a scan of every row kept for retention (days of finished responses), every minute.
This table holds one small row per *unfinished* response instead: written when the response is created
(in parallel with its other writes, so no added latency), deleted when it is finalized (or by the repair
path when it finds a leftover), so listing it costs about one request per thousand runs in flight.

Rows: PartitionKey = one of ``SHARDS`` buckets (spreads inserts/deletes over partitions, whose throughput
is limited each), RowKey = response id, ``since`` = creation time (epoch seconds).
"""

from __future__ import annotations

import hashlib
from contextlib import suppress

from azure.core.exceptions import ResourceNotFoundError
from azure.data.tables import UpdateMode
from azure.data.tables.aio import TableClient

from resilient.ids import validate_id
from resilient.storage.connection import translate_errors
from resilient.storage.ports import ActiveEntry

SHARDS = 16


def shard_of(response_id: str) -> str:
    return f"a{int(hashlib.sha256(response_id.encode()).hexdigest()[:4], 16) % SHARDS:02d}"


class TableActiveIndex:
    """``ActiveIndex`` over one Azure Table (``<prefix>active``)."""

    def __init__(self, table: TableClient) -> None:
        self._table = table
        self.storage_calls = 0

    @translate_errors
    async def add(self, response_id: str, since_epoch_seconds: float) -> None:
        rid = validate_id(response_id, param="response_id")
        self.storage_calls += 1
        await self._table.upsert_entity({"PartitionKey": shard_of(rid), "RowKey": rid,
                                         "since": float(since_epoch_seconds)}, mode=UpdateMode.REPLACE)

    @translate_errors
    async def remove(self, response_id: str) -> None:
        rid = validate_id(response_id, param="response_id")
        self.storage_calls += 1
        with suppress(ResourceNotFoundError):
            await self._table.delete_entity(shard_of(rid), rid)

    @translate_errors
    async def list(self, limit: int) -> list[ActiveEntry]:
        found: list[ActiveEntry] = []
        self.storage_calls += 1
        pager = self._table.list_entities(select=["RowKey", "since"], results_per_page=min(max(limit, 1), 1000))
        async for entity in pager:
            found.append(ActiveEntry(str(entity["RowKey"]), float(entity.get("since") or 0.0)))
            if len(found) >= limit:
                break
        return found
