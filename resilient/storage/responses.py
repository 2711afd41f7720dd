"""The response row in Azure Table storage: :class:`TableResponseStore` implements ``ResponseStore``.

One entity per response: PartitionKey = response_id, RowKey = "r"; columns ``status``,
``doc``/``doc_blob`` (JSON, spilled when large), ``cancel_requested``, ``pending_input_count``.

Why every decisive write is a MERGE with ``IfNotModified`` on the ETag: terminal transitions,
cancel vs. complete and pending-input counts race between the orchestrator's activities and HTTP
requests; the ETag compare-and-swap lets exactly one of two racing writers win. MERGE (not REPLACE)
so a write that does not change the document does not have to re-send (or re-spill) it.
"""

from __future__ import annotations

import time
from contextlib import suppress
from datetime import UTC, datetime
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import ResourceExistsError, ResourceModifiedError, ResourceNotFoundError
from azure.data.tables import UpdateMode
from azure.data.tables.aio import TableClient

from resilient.ids import validate_id
from resilient.storage import cas
from resilient.storage.connection import translate_errors
from resilient.storage.controls import ControlBoard
from resilient.storage.errors import NotFound, PreconditionFailed
from resilient.storage.ports import TERMINAL_STATUSES, Control, JsonDict, ResponseRecord
from resilient.storage.spill import JsonSpill

ROW_KEY = "r"
_CONTROL_COLUMNS = ["status", "cancel_requested", "pending_input_count"]


def _etag(entity: Any) -> str:
    metadata = getattr(entity, "metadata", None) or {}
    return str(metadata.get("etag", ""))


class TableResponseStore:
    """``ResponseStore`` over one Azure Table (``<prefix>responses``)."""

    def __init__(self, table: TableClient, spill: JsonSpill, *, controls: ControlBoard) -> None:
        self._table = table
        self._spill = spill
        self._controls = controls  # every row this store reads or writes tells running phases here
        self.storage_calls = 0

    def _observed(self, record: ResponseRecord, started_at: float) -> ResponseRecord:
        control = Control(record.status, record.cancel_requested, record.pending_input_count)
        self._controls.observe(record.response_id, control, started_at)
        return record

    # -- reads ------------------------------------------------------------------------------------
    @translate_errors
    async def get(self, response_id: str) -> ResponseRecord:
        rid = validate_id(response_id, param="response_id")
        started_at = time.monotonic()
        entity = await self._get_entity(rid, None)
        return self._observed(ResponseRecord(
            response_id=rid,
            status=str(entity["status"]),
            doc=await self._spill.unpack(entity, "doc"),
            etag=_etag(entity),
            cancel_requested=bool(entity.get("cancel_requested", False)),
            pending_input_count=int(entity.get("pending_input_count", 0)),
        ), started_at)

    @translate_errors
    async def get_control(self, response_id: str) -> Control:
        rid = validate_id(response_id, param="response_id")
        started_at = time.monotonic()
        entity = await self._get_entity(rid, _CONTROL_COLUMNS)
        control = Control(
            status=str(entity["status"]),
            cancel_requested=bool(entity.get("cancel_requested", False)),
            pending_input_count=int(entity.get("pending_input_count", 0)),
        )
        self._controls.observe(rid, control, started_at)
        return control

    async def _get_entity(self, rid: str, select: list[str] | None) -> Any:
        self.storage_calls += 1
        try:
            return await self._table.get_entity(rid, ROW_KEY, select=select)
        except ResourceNotFoundError as error:
            raise NotFound(f"response {rid!r} not found") from error

    # -- writes -----------------------------------------------------------------------------------
    @translate_errors
    async def create(self, response_id: str, status: str, doc: JsonDict) -> ResponseRecord:
        rid = validate_id(response_id, param="response_id")
        entity: dict[str, Any] = {
            "PartitionKey": rid,
            "RowKey": ROW_KEY,
            "status": status,
            "cancel_requested": False,
            "pending_input_count": 0,
            **await self._spill.pack(rid, "doc", "doc", doc),
        }
        self.storage_calls += 1
        started_at = time.monotonic()
        try:
            result = await self._table.create_entity(entity)
        except ResourceExistsError:
            return await self.get(rid)  # a retried create: the stored row is the answer
        return self._observed(ResponseRecord(rid, status, dict(doc), str(result.get("etag", "")), False, 0),
                              started_at)

    @translate_errors
    async def replace(
        self,
        record: ResponseRecord,
        *,
        status: str | None = None,
        doc_changes: JsonDict | None = None,
        cancel_requested: bool | None = None,
        pending_input_count: int | None = None,
    ) -> ResponseRecord:
        rid = validate_id(record.response_id, param="response_id")
        entity: dict[str, Any] = {"PartitionKey": rid, "RowKey": ROW_KEY}
        doc = record.doc
        if status is not None:
            entity["status"] = status
        if cancel_requested is not None:
            entity["cancel_requested"] = cancel_requested
        if pending_input_count is not None:
            entity["pending_input_count"] = max(0, pending_input_count)
        if doc_changes:
            doc = {**record.doc, **doc_changes}
            entity.update(await self._spill.pack(rid, "doc", "doc", doc))
        self.storage_calls += 1
        started_at = time.monotonic()
        try:
            result = await self._table.update_entity(
                entity, mode=UpdateMode.MERGE, etag=record.etag, match_condition=MatchConditions.IfNotModified
            )
        except ResourceModifiedError as error:
            raise PreconditionFailed(f"response {rid!r} changed since it was read") from error
        except ResourceNotFoundError as error:
            raise NotFound(f"response {rid!r} not found") from error
        # The CAS succeeded, so the row was exactly ``record`` plus these changes: a whole snapshot.
        return self._observed(ResponseRecord(
            response_id=rid,
            status=record.status if status is None else status,
            doc=doc,
            etag=str(result.get("etag", "")),
            cancel_requested=record.cancel_requested if cancel_requested is None else cancel_requested,
            pending_input_count=int(entity.get("pending_input_count", record.pending_input_count)),
        ), started_at)

    @translate_errors
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
        return await cas.transition_row(self, validate_id(response_id, param="response_id"), to_status,
                                        allowed_from=allowed_from, doc_changes=doc_changes,
                                        cancel_requested=cancel_requested, current=current)

    @translate_errors
    async def add_pending_input(self, response_id: str, delta: int) -> ResponseRecord:
        return await cas.add_pending_input(self, validate_id(response_id, param="response_id"), delta)

    @translate_errors
    async def list_finished_before(self, cutoff_epoch_seconds: float, limit: int) -> list[str]:
        """One filtered query on the row's own ``Timestamp`` (last write = the terminal transition)."""
        cutoff = datetime.fromtimestamp(cutoff_epoch_seconds, tz=UTC)
        statuses = " or ".join(f"status eq '{s}'" for s in sorted(TERMINAL_STATUSES))
        query = f"RowKey eq '{ROW_KEY}' and Timestamp lt @cutoff and ({statuses})"
        found: list[str] = []
        self.storage_calls += 1
        pager = self._table.query_entities(query, parameters={"cutoff": cutoff}, select=["PartitionKey"],
                                           results_per_page=min(limit, 1000))
        async for entity in pager:
            found.append(str(entity["PartitionKey"]))
            if len(found) >= limit:
                break
        return found

    @translate_errors
    async def delete(self, response_id: str) -> None:
        rid = validate_id(response_id, param="response_id")
        self.storage_calls += 1
        self._controls.forget(rid)
        with suppress(ResourceNotFoundError):
            await self._table.delete_entity(rid, ROW_KEY)
        await self._spill.delete_prefix(f"{rid}/doc-")
