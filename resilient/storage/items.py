"""Input items and per-phase output items in Azure Table storage: :class:`TableItemStore`.

One partition per response (PartitionKey = response_id). RowKeys sort lexically, so they carry
zero-padded positions: ``i-000000`` … for input items (request order), ``o-000000`` … for output
items (phase index; each output item is that phase's checkpoint), and one ``n`` row holding the
number of input items so a descending page can be range-read without scanning the partition. A put of
one input item (most turns) writes its row alone, with ``count`` on it: a single entity write instead of
a table transaction, whose multipart request and response the SDK builds and parses with the standard
library's ``email`` package, the costliest part of the call (``bench/call_cost.py`` measures both).
The item JSON is in ``body``/``body_blob`` (spilled when large, see :mod:`.spill`), its id in
``item_id`` (so ``after=<item id>`` can be found by a filter).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any, Literal

from azure.core.exceptions import ResourceNotFoundError
from azure.data.tables import TransactionOperation, UpdateMode
from azure.data.tables.aio import TableClient

from resilient.ids import validate_id
from resilient.storage.connection import translate_errors
from resilient.storage.errors import NotFound
from resilient.storage.ports import ItemPage, JsonDict
from resilient.storage.spill import JsonSpill

MAX_POSITION = 999_999
_BATCH_OPS = 100  # Table transactions: at most 100 operations ...
_BATCH_BYTES = 3 * 1024 * 1024  # ... and 4 MiB of payload; keep a margin for the multipart framing.
_COUNT_ROW = "n"
_ONLY_ROW_COUNT = "count"  # on row ``i-000000`` of a one-item put, which has no count row
_IDS_IN_FILTER = 16  # find_items names up to this many ids in its filter, else reads the whole partition

_Op = tuple[TransactionOperation, dict[str, Any], dict[str, Any]]


def input_key(position: int) -> str:
    return f"i-{_check_position(position):06d}"


def output_key(index: int) -> str:
    return f"o-{_check_position(index):06d}"


def _check_position(position: int) -> int:
    if not isinstance(position, int) or isinstance(position, bool) or not 0 <= position <= MAX_POSITION:
        raise ValueError(f"position must be an int in [0, {MAX_POSITION}], got {position!r}")
    return position


def _position(row_key: str) -> int:
    return int(row_key[2:])


def _entity_size(entity: dict[str, Any]) -> int:
    return sum(len(str(v).encode("utf-8")) for v in entity.values()) + 64


class TableItemStore:
    """``ItemStore`` over one Azure Table (``<prefix>items``)."""

    def __init__(self, table: TableClient, spill: JsonSpill) -> None:
        self._table = table
        self._spill = spill
        self.storage_calls = 0

    # -- input items --------------------------------------------------------------------------------
    @translate_errors
    async def put_input_items(self, response_id: str, items: Sequence[JsonDict]) -> None:
        rid = validate_id(response_id, param="response_id")
        if len(items) > MAX_POSITION + 1:
            raise ValueError(f"at most {MAX_POSITION + 1} input items")
        ids = [validate_id(item.get("id") if isinstance(item, dict) else None, param="item id") for item in items]
        if len(set(ids)) != len(ids):
            raise ValueError("input item ids must be unique")
        entities: list[dict[str, Any]] = []
        for position, (item_id, item) in enumerate(zip(ids, items, strict=True)):
            key = input_key(position)
            entities.append(
                {
                    "PartitionKey": rid,
                    "RowKey": key,
                    "item_id": item_id,
                    **await self._spill.pack(rid, "body", key, item),
                }
            )
        if len(entities) == 1:  # its own count: one row is written whole or not at all
            self.storage_calls += 1
            await self._table.upsert_entity({**entities[0], _ONLY_ROW_COUNT: 1}, mode=UpdateMode.REPLACE)
            return
        # The count row goes last: a reader that sees it sees every item row of the same put.
        entities.append({"PartitionKey": rid, "RowKey": _COUNT_ROW, "count": len(items)})
        await self._upsert_batches(entities)

    async def _upsert_batches(self, entities: list[dict[str, Any]]) -> None:
        batch: list[_Op] = []
        size = 0
        for entity in entities:
            entity_size = _entity_size(entity)
            if batch and (len(batch) >= _BATCH_OPS or size + entity_size > _BATCH_BYTES):
                await self._submit(batch)
                batch, size = [], 0
            batch.append((TransactionOperation.UPSERT, entity, {"mode": UpdateMode.REPLACE}))
            size += entity_size
        if batch:
            await self._submit(batch)

    async def _submit(self, batch: list[_Op]) -> None:
        self.storage_calls += 1
        await self._table.submit_transaction(batch)

    @translate_errors
    async def list_input_items(
        self, response_id: str, *, after: str | None, limit: int, order: Literal["asc", "desc"]
    ) -> ItemPage:
        rid = validate_id(response_id, param="response_id")
        after_id = None if after is None else validate_id(after, param="after")
        if order not in ("asc", "desc"):
            raise ValueError("order must be 'asc' or 'desc'")
        if limit < 1:
            raise ValueError("limit must be >= 1")
        after_key = None if after_id is None else await self._find_input_key(rid, after_id)
        if order == "asc":
            low = "i-" if after_key is None else after_key
            low_op = "ge" if after_key is None else "gt"
            rows = await self._query(
                f"PartitionKey eq @pk and RowKey {low_op} @lo and RowKey lt @hi",
                {"pk": rid, "lo": low, "hi": "i."},
                top=limit + 1,
            )
        else:
            if after_key is not None:
                end = _position(after_key)
            else:
                end, only_row = await self._input_count(rid)
                if only_row is not None:  # a one-item put: its row is the whole listing
                    return ItemPage(data=[await self._spill.unpack(only_row, "body")], has_more=False)
            start = max(0, end - limit - 1)
            if end == 0:
                return ItemPage(data=[], has_more=False)
            rows = await self._query(
                "PartitionKey eq @pk and RowKey ge @lo and RowKey lt @hi",
                {"pk": rid, "lo": input_key(start), "hi": input_key(end) if end <= MAX_POSITION else "i."},
                top=limit + 1,
            )
            rows.reverse()
        page = rows[:limit]
        return ItemPage(data=[await self._spill.unpack(row, "body") for row in page], has_more=len(rows) > limit)

    async def _find_input_key(self, rid: str, item_id: str) -> str:
        rows = await self._query(
            "PartitionKey eq @pk and RowKey ge @lo and RowKey lt @hi and item_id eq @id",
            {"pk": rid, "lo": "i-", "hi": "i.", "id": item_id},
            top=1,
            select=["RowKey"],
        )
        if not rows:
            raise NotFound(f"item {item_id!r} not found in response {rid!r}")
        return str(rows[0]["RowKey"])

    async def _input_count(self, rid: str) -> tuple[int, Any | None]:
        """The number of input items: the count row of a multi-item put, else the only row of a one-item
        put (returned too, since it is the whole listing). Without either there is nothing to list yet:
        a multi-item put writes its count row last."""
        self.storage_calls += 1
        try:
            row = await self._table.get_entity(rid, _COUNT_ROW)
        except ResourceNotFoundError:
            pass
        else:
            return int(row.get("count", 0)), None
        self.storage_calls += 1
        try:
            first = await self._table.get_entity(rid, input_key(0))
        except ResourceNotFoundError:
            return 0, None
        if first.get(_ONLY_ROW_COUNT) == 1:
            return 1, first
        return 0, None

    async def _query(
        self,
        query: str,
        parameters: dict[str, Any],
        *,
        top: int | None = None,
        select: list[str] | None = None,
    ) -> list[Any]:
        """Run a partition query, stopping after ``top`` rows (normally one page = one round trip)."""
        pager = self._table.query_entities(query, parameters=parameters, results_per_page=top, select=select)
        rows: list[Any] = []
        async for page in pager.by_page():
            self.storage_calls += 1
            async for row in page:
                rows.append(row)
            if top is not None and len(rows) >= top:
                return rows[:top]
        return rows

    # -- output items (checkpoints) ------------------------------------------------------------------
    @translate_errors
    async def put_output_item(self, response_id: str, index: int, item: JsonDict) -> None:
        rid = validate_id(response_id, param="response_id")
        key = output_key(index)
        item_id = item.get("id")
        entity: dict[str, Any] = {
            "PartitionKey": rid,
            "RowKey": key,
            "item_id": validate_id(item_id, param="item id") if item_id is not None else "",
            **await self._spill.pack(rid, "body", key, item),
        }
        self.storage_calls += 1
        await self._table.upsert_entity(entity, mode=UpdateMode.REPLACE)

    @translate_errors
    async def put_output_items(self, response_id: str, first_index: int, items: Sequence[JsonDict]) -> None:
        rid = validate_id(response_id, param="response_id")
        entities: list[dict[str, Any]] = []
        for offset, item in enumerate(items):
            key = output_key(first_index + offset)
            item_id = item.get("id")
            entities.append({
                "PartitionKey": rid,
                "RowKey": key,
                "item_id": validate_id(item_id, param="item id") if item_id is not None else "",
                **await self._spill.pack(rid, "body", key, item),
            })
        if len(entities) > _BATCH_OPS or sum(map(_entity_size, entities)) > _BATCH_BYTES:
            raise ValueError("the items of one phase must fit one table transaction (100 items, 3 MiB)")
        await self._upsert_batches(entities)

    @translate_errors
    async def get_output_item(self, response_id: str, index: int) -> JsonDict | None:
        rid = validate_id(response_id, param="response_id")
        key = output_key(index)
        self.storage_calls += 1
        try:
            entity = await self._table.get_entity(rid, key)
        except ResourceNotFoundError:
            return None
        return await self._spill.unpack(entity, "body")

    @translate_errors
    async def list_output_items(self, response_id: str) -> list[JsonDict]:
        rid = validate_id(response_id, param="response_id")
        rows = await self._query(
            "PartitionKey eq @pk and RowKey ge @lo and RowKey lt @hi", {"pk": rid, "lo": "o-", "hi": "o."}
        )
        return [await self._spill.unpack(row, "body") for row in rows]

    @translate_errors
    async def find_items(self, response_id: str, item_ids: Collection[str]) -> list[JsonDict]:
        rid = validate_id(response_id, param="response_id")
        wanted = sorted({validate_id(item_id, param="item id") for item_id in item_ids})
        if not wanted:
            return []
        if len(wanted) <= _IDS_IN_FILTER:  # only the rows wanted come over the wire
            names = {f"i{n}": item_id for n, item_id in enumerate(wanted)}
            clause = " or ".join(f"item_id eq @{name}" for name in names)  # the SDK finds a parameter by
            rows = await self._query(f"PartitionKey eq @pk and ( {clause} )", {"pk": rid, **names})  # whitespace
        else:  # a long filter costs more than the rows: one page holds 1,000 of them
            rows = await self._query("PartitionKey eq @pk", {"pk": rid})
        found = set(wanted)
        return [await self._spill.unpack(row, "body") for row in rows if row.get("item_id") in found]

    # -- deletion -------------------------------------------------------------------------------------
    @translate_errors
    async def delete_all(self, response_id: str) -> None:
        rid = validate_id(response_id, param="response_id")
        rows = await self._query("PartitionKey eq @pk", {"pk": rid}, select=["PartitionKey", "RowKey"])
        for start in range(0, len(rows), _BATCH_OPS):
            chunk = rows[start : start + _BATCH_OPS]
            ops: list[_Op] = [
                (TransactionOperation.DELETE, {"PartitionKey": rid, "RowKey": row["RowKey"]}, {}) for row in chunk
            ]
            await self._submit(ops)
        await self._spill.delete_prefix(f"{rid}/i-")
        await self._spill.delete_prefix(f"{rid}/o-")
