"""Responses, chains and the active index in memory, with the Table adapters' row semantics.

The response row is a compare-and-swap on its ETag exactly as :class:`~resilient.storage.responses.
TableResponseStore` (MERGE with ``IfNotModified``): a stale ETag raises ``PreconditionFailed``, a missing
row ``NotFound``, and every read and write reports the control columns to the process's control board.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence

from resilient.ids import validate_id
from resilient.storage import cas
from resilient.storage.controls import ControlBoard
from resilient.storage.errors import NotFound, PreconditionFailed
from resilient.storage.ports import TERMINAL_STATUSES, ActiveEntry, ChainRecord, Control, JsonDict, ResponseRecord
from tests.memory_storage.backend import ChainRow, MemoryBackend, ResponseRow, frozen_json, round_trip, thawed_json

_ACTIVE_SHARDS = 16  # the Table adapter's partitions, kept only so listings come in the same order


class MemoryResponseStore:
    """``ResponseStore`` over a :class:`MemoryBackend`."""

    def __init__(self, backend: MemoryBackend, *, controls: ControlBoard) -> None:
        self._rows = backend.responses
        self._backend = backend
        self._controls = controls
        self.storage_calls = 0

    def _record(self, rid: str, row: ResponseRow, started_at: float) -> ResponseRecord:
        record = ResponseRecord(rid, row.status, thawed_json(row.doc), row.etag, row.cancel_requested,
                                row.pending_input_count)
        control = Control(record.status, record.cancel_requested, record.pending_input_count)
        self._controls.observe(rid, control, started_at)
        return record

    async def _row(self, rid: str) -> tuple[ResponseRow, float]:
        self.storage_calls += 1
        started_at = time.monotonic()
        await round_trip()
        row = self._rows.get(rid)
        if row is None:
            raise NotFound(f"response {rid!r} not found")
        return row, started_at

    async def get(self, response_id: str) -> ResponseRecord:
        rid = validate_id(response_id, param="response_id")
        row, started_at = await self._row(rid)
        return self._record(rid, row, started_at)

    async def get_control(self, response_id: str) -> Control:
        rid = validate_id(response_id, param="response_id")
        row, started_at = await self._row(rid)
        control = Control(row.status, row.cancel_requested, row.pending_input_count)
        self._controls.observe(rid, control, started_at)
        return control

    async def create(self, response_id: str, status: str, doc: JsonDict) -> ResponseRecord:
        rid = validate_id(response_id, param="response_id")
        frozen = frozen_json(doc)
        self.storage_calls += 1
        started_at = time.monotonic()
        await round_trip()
        row = self._rows.get(rid)
        if row is None:
            row = self._rows[rid] = ResponseRow(status, frozen, False, 0, self._backend.new_etag(), time.time())
        # else: a retried create, the stored row is the answer
        return self._record(rid, row, started_at)

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
        doc = {**record.doc, **doc_changes} if doc_changes else None
        frozen = frozen_json(doc) if doc is not None else None
        self.storage_calls += 1
        started_at = time.monotonic()
        await round_trip()
        row = self._rows.get(rid)
        if row is None:
            raise NotFound(f"response {rid!r} not found")
        if row.etag != record.etag:
            raise PreconditionFailed(f"response {rid!r} changed since it was read")
        # MERGE: only the given columns change.
        if status is not None:
            row.status = status
        if cancel_requested is not None:
            row.cancel_requested = cancel_requested
        if pending_input_count is not None:
            row.pending_input_count = max(0, pending_input_count)
        if frozen is not None:
            row.doc = frozen
        row.etag = self._backend.new_etag()
        row.modified = time.time()
        return self._record(rid, row, started_at)

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

    async def add_pending_input(self, response_id: str, delta: int) -> ResponseRecord:
        return await cas.add_pending_input(self, validate_id(response_id, param="response_id"), delta)

    async def list_finished_before(self, cutoff_epoch_seconds: float, limit: int) -> list[str]:
        self.storage_calls += 1
        await round_trip()
        found = [rid for rid, row in sorted(self._rows.items())
                 if row.status in TERMINAL_STATUSES and row.modified < cutoff_epoch_seconds]
        return found[:limit]

    async def delete(self, response_id: str) -> None:
        rid = validate_id(response_id, param="response_id")
        self.storage_calls += 1
        self._controls.forget(rid)
        await round_trip()
        self._rows.pop(rid, None)


class MemoryChainStore:
    """``ChainStore`` over a :class:`MemoryBackend`: one CAS per turn, as the Table row."""

    def __init__(self, backend: MemoryBackend) -> None:
        self._rows = backend.chains
        self._backend = backend
        self.storage_calls = 0

    async def get(self, chain_id: str) -> ChainRecord:
        cid = validate_id(chain_id, param="chain_id")
        self.storage_calls += 1
        await round_trip()
        row = self._rows.get(cid)
        if row is None:
            return ChainRecord(cid, None, (), None)
        return ChainRecord(cid, row.latest or None, row.open_turns, row.etag)

    async def append_turn(self, record: ChainRecord, response_id: str, open_turns: Sequence[str]) -> ChainRecord:
        cid = validate_id(record.chain_id, param="chain_id")
        rid = validate_id(response_id, param="response_id")
        turns = tuple(validate_id(t, param="open_turns") for t in open_turns)
        self.storage_calls += 1
        await round_trip()
        row = self._rows.get(cid)
        if record.etag is None:
            if row is not None:  # create-if-absent lost (409)
                raise PreconditionFailed(f"chain {cid!r} changed concurrently")
        elif row is None:
            raise NotFound(f"chain {cid!r} not found")
        elif row.etag != record.etag:
            raise PreconditionFailed(f"chain {cid!r} changed concurrently")
        row = self._rows[cid] = ChainRow(rid, turns, self._backend.new_etag())
        return ChainRecord(cid, rid, turns, row.etag)

    async def delete(self, chain_id: str) -> None:
        cid = validate_id(chain_id, param="chain_id")
        self.storage_calls += 1
        await round_trip()
        self._rows.pop(cid, None)


def _shard(response_id: str) -> str:
    return f"a{int(hashlib.sha256(response_id.encode()).hexdigest()[:4], 16) % _ACTIVE_SHARDS:02d}"


class MemoryActiveIndex:
    """``ActiveIndex`` over a :class:`MemoryBackend`."""

    def __init__(self, backend: MemoryBackend) -> None:
        self._rows = backend.active
        self.storage_calls = 0

    async def add(self, response_id: str, since_epoch_seconds: float) -> None:
        rid = validate_id(response_id, param="response_id")
        self.storage_calls += 1
        await round_trip()
        self._rows[rid] = float(since_epoch_seconds)

    async def remove(self, response_id: str) -> None:
        rid = validate_id(response_id, param="response_id")
        self.storage_calls += 1
        await round_trip()
        self._rows.pop(rid, None)

    async def list(self, limit: int) -> list[ActiveEntry]:
        self.storage_calls += 1
        await round_trip()
        ordered = sorted(self._rows.items(), key=lambda entry: (_shard(entry[0]), entry[0]))
        return [ActiveEntry(rid, since) for rid, since in ordered[:max(limit, 0)]]
