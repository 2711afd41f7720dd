"""Input and output items in memory, with :class:`~resilient.storage.items.TableItemStore`'s semantics.

Kept the same on purpose: positions are ints in ``[0, 999_999]``; a put of input items upserts by position
(a re-put of fewer items leaves the rows past them, as the table does); a descending listing reads the
count the last multi-item put wrote (or the one-item row's own); ``after`` names an item id and an unknown
one raises ``NotFound``; the items of one phase are written all or none and must fit one table
transaction (100 items, 3 MiB) or the call raises ``ValueError``.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Literal

from resilient.ids import validate_id
from resilient.storage.errors import NotFound
from resilient.storage.ports import ItemPage, JsonDict
from tests.memory_storage.backend import ItemRows, MemoryBackend, frozen_json, round_trip, thawed_json

MAX_POSITION = 999_999
_BATCH_OPS = 100
_BATCH_BYTES = 3 * 1024 * 1024


def _check_position(position: int) -> int:
    if not isinstance(position, int) or isinstance(position, bool) or not 0 <= position <= MAX_POSITION:
        raise ValueError(f"position must be an int in [0, {MAX_POSITION}], got {position!r}")
    return position


class MemoryItemStore:
    """``ItemStore`` over a :class:`MemoryBackend`."""

    def __init__(self, backend: MemoryBackend) -> None:
        self._parts = backend.items
        self.storage_calls = 0

    def _part(self, rid: str) -> ItemRows:
        return self._parts.setdefault(rid, ItemRows())

    # -- input items --------------------------------------------------------------------------------
    async def put_input_items(self, response_id: str, items: Sequence[JsonDict]) -> None:
        rid = validate_id(response_id, param="response_id")
        if len(items) > MAX_POSITION + 1:
            raise ValueError(f"at most {MAX_POSITION + 1} input items")
        ids = [validate_id(item.get("id") if isinstance(item, dict) else None, param="item id") for item in items]
        if len(set(ids)) != len(ids):
            raise ValueError("input item ids must be unique")
        rows = [(item_id, frozen_json(item)) for item_id, item in zip(ids, items, strict=True)]
        self.storage_calls += 1
        await round_trip()
        part = self._part(rid)
        part.inputs.update(enumerate(rows))
        if len(rows) == 1:
            part.only_row = True
        elif rows:
            part.only_row = False
            part.count = len(rows)

    async def list_input_items(
        self, response_id: str, *, after: str | None, limit: int, order: Literal["asc", "desc"]
    ) -> ItemPage:
        rid = validate_id(response_id, param="response_id")
        after_id = None if after is None else validate_id(after, param="after")
        if order not in ("asc", "desc"):
            raise ValueError("order must be 'asc' or 'desc'")
        if limit < 1:
            raise ValueError("limit must be >= 1")
        self.storage_calls += 1
        await round_trip()
        part = self._parts.get(rid) or ItemRows()
        after_position: int | None = None
        if after_id is not None:
            matches = [p for p, (item_id, _) in part.inputs.items() if item_id == after_id]
            if not matches:
                raise NotFound(f"item {after_id!r} not found in response {rid!r}")
            after_position = min(matches)
        if order == "asc":
            low = -1 if after_position is None else after_position
            positions = sorted(p for p in part.inputs if p > low)
        else:
            end = after_position if after_position is not None else self._count(part)
            positions = sorted((p for p in part.inputs if p < end), reverse=True)
        chosen = positions[: limit + 1]
        page = [thawed_json(part.inputs[p][1]) for p in chosen[:limit]]
        return ItemPage(data=page, has_more=len(chosen) > limit)

    @staticmethod
    def _count(part: ItemRows) -> int:
        """What a descending listing starts from: the count row, else a one-item put's own row."""
        if part.count is not None:
            return part.count
        return 1 if part.only_row and 0 in part.inputs else 0

    # -- output items (checkpoints) ------------------------------------------------------------------
    async def put_output_item(self, response_id: str, index: int, item: JsonDict) -> None:
        await self._put_outputs(response_id, index, [item], one_transaction=False)  # one row: spills when large

    async def put_output_items(self, response_id: str, first_index: int, items: Sequence[JsonDict]) -> None:
        await self._put_outputs(response_id, first_index, items, one_transaction=True)

    async def _put_outputs(self, response_id: str, first_index: int, items: Sequence[JsonDict], *,
                           one_transaction: bool) -> None:
        rid = validate_id(response_id, param="response_id")
        rows: dict[int, str] = {}
        for offset, item in enumerate(items):
            index = _check_position(first_index + offset)
            item_id = item.get("id")
            if item_id is not None:
                validate_id(item_id, param="item id")
            rows[index] = frozen_json(item)
        too_big = len(rows) > _BATCH_OPS or sum(len(row.encode()) + 64 for row in rows.values()) > _BATCH_BYTES
        if one_transaction and too_big:
            raise ValueError("the items of one phase must fit one table transaction (100 items, 3 MiB)")
        self.storage_calls += 1
        await round_trip()
        self._part(rid).outputs.update(rows)

    async def get_output_item(self, response_id: str, index: int) -> JsonDict | None:
        rid = validate_id(response_id, param="response_id")
        _check_position(index)
        self.storage_calls += 1
        await round_trip()
        part = self._parts.get(rid)
        row = None if part is None else part.outputs.get(index)
        return None if row is None else thawed_json(row)

    async def list_output_items(self, response_id: str) -> list[JsonDict]:
        rid = validate_id(response_id, param="response_id")
        self.storage_calls += 1
        await round_trip()
        part = self._parts.get(rid) or ItemRows()
        return [thawed_json(part.outputs[index]) for index in sorted(part.outputs)]

    async def find_items(self, response_id: str, item_ids: Collection[str]) -> list[JsonDict]:
        rid = validate_id(response_id, param="response_id")
        wanted = {validate_id(item_id, param="item id") for item_id in item_ids}
        if not wanted:
            return []
        self.storage_calls += 1
        await round_trip()
        part = self._parts.get(rid) or ItemRows()
        found = [thawed_json(part.inputs[p][1]) for p in sorted(part.inputs) if part.inputs[p][0] in wanted]
        outputs = [thawed_json(part.outputs[index]) for index in sorted(part.outputs)]
        return found + [item for item in outputs if item.get("id") in wanted]

    # -- deletion -------------------------------------------------------------------------------------
    async def delete_all(self, response_id: str) -> None:
        rid = validate_id(response_id, param="response_id")
        self.storage_calls += 1
        await round_trip()
        self._parts.pop(rid, None)
