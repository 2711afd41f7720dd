"""The task hub in a storage account, laid out like DurableTask.AzureStorage lays it out.

| what | where (``<hub>`` = task hub name) |
|---|---|
| instance status, one row per instance (entities too: ``@name@key``) | Table ``<hub>Instances``, RK ``""`` |
| history, one row per event + a ``sentinel`` row | Table ``<hub>History``, RK = sequence (``X16``) |
| orchestration messages | queues ``<hub>-control-00`` … (``partitionCount``) |
| activity messages | queue ``<hub>-workitems`` |
| values too large for a Table property or a queue message | container ``<hub>-largemessages`` (gzip JSON) |
| partition leases | container ``<hub>-leases`` |

Why the sentinel row: every episode commits its new history rows and the sentinel in one Table batch,
with the sentinel's ETag as the condition (``AzureTableTrackingStore.UploadHistoryBatch``). Two hosts that
both believe they own an instance can therefore never both commit: the loser gets 412 and aborts. That is
also what makes it safe to keep loaded histories in memory between episodes (the double's stand-in for
extended sessions): a stale cache can never commit.

Every call to storage goes through :class:`StorageCalls` so ``_double/stats`` can report how many calls
an episode or an activity costs.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import time
import uuid
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from azure.core import MatchConditions
from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceNotFoundError
from azure.core.pipeline.transport import AioHttpTransport
from azure.data.tables import UpdateMode
from azure.data.tables.aio import TableServiceClient
from azure.storage.blob.aio import BlobServiceClient
from azure.storage.queue.aio import QueueServiceClient

from .history import EVENT_NAMES

SENTINEL = "sentinel"
MAX_PROPERTY_CHARS = 30_000  # a Table string property holds 64 KiB of UTF-16 (DTFx spills above ~60 KiB)
MAX_BATCH = 99  # a Table batch holds 100 operations; one is kept for the sentinel
_CONNECT_TIMEOUT_S = 3.0
_READ_TIMEOUT_S = 15.0
# How long an idle connection stays pooled: .NET's SocketsHttpHandler.PooledConnectionIdleTimeout (60 s),
# the pool the real host's storage clients use (scripts/azurite.sh keeps Azurite's side open for 120 s).
_KEEP_ALIVE_S = 60.0


class HistoryConflict(Exception):
    """Another writer committed this instance's history first (sentinel ETag mismatch, or it exists)."""


class StorageCalls:
    """Counts storage calls by kind (``table.batch``, ``queue.send``, …) for ``_double/stats``."""

    def __init__(self) -> None:
        self.by_kind: Counter[str] = Counter()

    def add(self, kind: str, count: int = 1) -> None:
        self.by_kind[kind] += count

    @property
    def total(self) -> int:
        return sum(self.by_kind.values())

    def snapshot(self) -> dict[str, int]:
        return dict(sorted(self.by_kind.items()))


def fnv1a(text: str) -> int:
    """32-bit FNV-1a of the UTF-8 bytes (``Fnv1aHashHelper``), which picks an instance's control queue."""
    value = 2166136261
    for byte in text.encode():
        value = ((value ^ byte) * 16777619) & 0xFFFFFFFF
    return value


def escape_key(key: str) -> str:
    """A Table key for any id: ``/ \\ # ?``, ``^`` and control characters become ``^XXXX``."""
    out = []
    for char in key:
        code = ord(char)
        if char in "/\\#?^" or code < 0x20 or 0x7F <= code <= 0x9F:
            out.append(f"^{code:04X}")
        else:
            out.append(char)
    return "".join(out)


@dataclass(frozen=True)
class TaskHubNames:
    hub: str
    partition_count: int

    @property
    def instances_table(self) -> str:
        return f"{self.hub}Instances"

    @property
    def history_table(self) -> str:
        return f"{self.hub}History"

    def control_queue(self, partition: int) -> str:
        return f"{self.hub.lower()}-control-{partition:02d}"

    @property
    def work_item_queue(self) -> str:
        return f"{self.hub.lower()}-workitems"

    @property
    def large_container(self) -> str:
        return f"{self.hub.lower()}-largemessages"

    @property
    def lease_container(self) -> str:
        return f"{self.hub.lower()}-leases"

    @property
    def queues(self) -> list[str]:
        return [*(self.control_queue(p) for p in range(self.partition_count)), self.work_item_queue]

    def partition_of(self, instance_id: str) -> int:
        return fnv1a(instance_id) % self.partition_count


@dataclass
class LoadedHistory:
    """One instance's current execution as stored: its events (oldest first), ids of consumed messages."""

    execution_id: str | None
    events: list[dict[str, Any]]
    etag: str | None  # the sentinel's; None when the instance has no history yet
    msg_ids: set[str] = field(default_factory=set)
    state: dict[str, Any] = field(default_factory=dict)  # the double's own bookkeeping (see commit_history)


class Storage:
    """aio Table, Queue and Blob clients for one storage account and task hub, counting every call."""

    def __init__(self, connection_string: str, names: TaskHubNames, calls: StorageCalls | None = None) -> None:
        self.names = names
        self.calls = calls or StorageCalls()
        # use_env_settings=False: aiohttp otherwise looks up proxy variables and ~/.netrc on every request.
        common: dict[str, Any] = {"connection_timeout": _CONNECT_TIMEOUT_S, "read_timeout": _READ_TIMEOUT_S,
                                  "retry_total": 3, "use_env_settings": False}
        # One aiohttp session (made, as aiohttp requires, inside the running event loop) under all three
        # services, its idle connections kept as the real host's pool keeps them; the session's settings
        # are those the SDK's transport gives the session it makes itself.
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(keepalive_timeout=_KEEP_ALIVE_S), trust_env=False,
            cookie_jar=aiohttp.DummyCookieJar(), auto_decompress=False)

        def transport() -> AioHttpTransport:
            return AioHttpTransport(session=self._session, session_owner=False)

        self.tables = TableServiceClient.from_connection_string(connection_string, transport=transport(), **common)
        self.queues = QueueServiceClient.from_connection_string(connection_string, transport=transport(), **common)
        self.blobs = BlobServiceClient.from_connection_string(connection_string, transport=transport(), **common)
        self.instances = self.tables.get_table_client(names.instances_table)
        self.history = self.tables.get_table_client(names.history_table)
        self.large = self.blobs.get_container_client(names.large_container)

    async def close(self) -> None:
        await asyncio.gather(self.tables.close(), self.queues.close(), self.blobs.close(), return_exceptions=True)
        await self._session.close()

    # ------------------------------------------------------------------------------------------- task hub
    async def create_task_hub(self) -> None:
        """Tables, queues and containers of the hub (existing ones are fine)."""
        for table in (self.names.instances_table, self.names.history_table):
            self.calls.add("table.create")
            with contextlib.suppress(ResourceExistsError):
                await self.tables.create_table(table)
        for queue in self.names.queues:
            self.calls.add("queue.create")
            with contextlib.suppress(ResourceExistsError):
                await self.queues.create_queue(queue)
        for container in (self.names.large_container, self.names.lease_container):
            self.calls.add("blob.create")
            with contextlib.suppress(ResourceExistsError):
                await self.blobs.create_container(container)

    async def delete_task_hub(self) -> None:
        """Everything :meth:`create_task_hub` made (absent is fine): for tests that own their hub."""
        for table in (self.names.instances_table, self.names.history_table):
            with contextlib.suppress(ResourceNotFoundError):
                await self.tables.delete_table(table)
        for queue in self.names.queues:
            with contextlib.suppress(ResourceNotFoundError):
                await self.queues.delete_queue(queue)
        for container in (self.names.large_container, self.names.lease_container):
            with contextlib.suppress(ResourceNotFoundError):
                await self.blobs.delete_container(container)

    # ------------------------------------------------------------------------------------- large values
    async def put_large(self, instance_id: str, kind: str, text: str) -> str:
        name = f"{escape_key(instance_id)}/{kind}-{uuid.uuid4().hex}.json.gz"
        self.calls.add("blob.upload")
        await self.large.upload_blob(name, gzip.compress(text.encode()), overwrite=True)
        return name

    async def get_large(self, name: str) -> str:
        self.calls.add("blob.download")
        downloader = await self.large.download_blob(name)
        return gzip.decompress(await downloader.readall()).decode()

    async def _pack(self, instance_id: str, kind: str, text: str | None, row: dict[str, Any], column: str) -> None:
        """``row[column] = text``, or the name of a blob holding it when it is too large for a property."""
        if text is not None and len(text) > MAX_PROPERTY_CHARS:
            row[column + "BlobName"] = await self.put_large(instance_id, kind, text)
            row[column] = ""
        else:
            row[column] = text
            row[column + "BlobName"] = ""

    async def _unpack(self, row: dict[str, Any], column: str) -> str | None:
        blob = row.get(column + "BlobName")
        if blob:
            return await self.get_large(blob)
        value = row.get(column)
        return None if value is None else str(value)

    # ------------------------------------------------------------------------------------------ history
    async def load_history(self, instance_id: str) -> LoadedHistory:
        """The current execution's events, as committed (rows past the sentinel's count are ignored)."""
        pk = escape_key(instance_id)
        self.calls.add("table.query")
        rows = [row async for row in self.history.query_entities("PartitionKey eq @pk", parameters={"pk": pk})]
        sentinel = next((r for r in rows if r["RowKey"] == SENTINEL), None)
        if sentinel is None:
            return LoadedHistory(None, [], None)
        execution_id = str(sentinel.get("ExecutionId") or "")
        count = int(sentinel.get("EventCount") or 0)
        chosen = sorted((r for r in rows if r["RowKey"] != SENTINEL and int(r["RowKey"], 16) < count
                         and r.get("ExecutionId") == execution_id), key=lambda r: r["RowKey"])
        events: list[dict[str, Any]] = []
        msg_ids: set[str] = set()
        for row in chosen:
            text = await self._unpack(row, "Event")
            events.append(json.loads(text or "{}"))
            if row.get("MsgId"):
                msg_ids.add(str(row["MsgId"]))
        state = json.loads(await self._unpack(sentinel, "DoubleState") or "{}")
        return LoadedHistory(execution_id, events, sentinel.metadata["etag"], msg_ids, state)

    async def commit_history(self, instance_id: str, execution_id: str, first_index: int,
                             events: list[dict[str, Any]], msg_ids: dict[int, str], etag: str | None,
                             state: dict[str, Any]) -> str:
        """Append ``events`` at ``first_index`` and move the sentinel, conditioned on its ETag.

        ``state`` is the double's bookkeeping for the execution (which sequence number each action got,
        pending retries, cancelled timers): DTFx keeps the equivalent inside its runtime state; the double
        stores it on the sentinel so it commits atomically with the history it describes.

        ``msg_ids`` maps an index into ``events`` to the id of the message that event was consumed from
        (so a re-delivered message is recognised). Rows are upserts: an episode replayed after a failed
        commit overwrites what it wrote before. Returns the sentinel's new ETag; raises
        :class:`HistoryConflict` when another writer got there first.
        """
        pk = escape_key(instance_id)
        rows: list[dict[str, Any]] = []
        for offset, event in enumerate(events):
            stored = {k: v for k, v in event.items() if k != "IsPlayed"}
            row: dict[str, Any] = {
                "PartitionKey": pk, "RowKey": f"{first_index + offset:016X}", "ExecutionId": execution_id,
                "EventType": EVENT_NAMES.get(int(event["EventType"]), str(event["EventType"])),
                "EventId": int(event.get("EventId", -1)), "MsgId": msg_ids.get(offset, ""),
            }
            await self._pack(instance_id, f"history-{first_index + offset:016X}", json.dumps(stored), row, "Event")
            rows.append(row)
        sentinel: dict[str, Any] = {"PartitionKey": pk, "RowKey": SENTINEL, "ExecutionId": execution_id,
                                    "EventCount": first_index + len(events),
                                    "CheckpointCompletedTimestamp": time.time()}
        await self._pack(instance_id, "state", json.dumps(state), sentinel, "DoubleState")
        chunks = [rows[i:i + MAX_BATCH] for i in range(0, len(rows), MAX_BATCH)] or [[]]
        result: Any = None
        for index, chunk in enumerate(chunks):
            operations: list[Any] = [("upsert", row, {"mode": UpdateMode.REPLACE}) for row in chunk]
            if index == len(chunks) - 1:
                if etag is None:
                    operations.append(("create", sentinel))
                else:
                    operations.append(("update", sentinel, {"mode": UpdateMode.REPLACE, "etag": etag,
                                                            "match_condition": MatchConditions.IfNotModified}))
            self.calls.add("table.batch")
            try:
                result = await self.history.submit_transaction(operations)
            except HttpResponseError as error:
                if error.status_code in (409, 412):
                    raise HistoryConflict(f"history of {instance_id} was committed by another writer") from error
                raise
        return str(result[-1]["etag"])

    async def rewrite_history_rows(self, instance_id: str, updates: Iterable[tuple[str, dict[str, Any]]]) -> None:
        """Replace the stored event of rows by key (rewind turns failures into GenericEvents this way)."""
        pk = escape_key(instance_id)
        for row_key, event in updates:
            row: dict[str, Any] = {"PartitionKey": pk, "RowKey": row_key,
                                   "EventType": EVENT_NAMES.get(int(event["EventType"]), ""),
                                   "EventId": int(event.get("EventId", -1))}
            await self._pack(instance_id, f"history-{row_key}", json.dumps(event), row, "Event")
            self.calls.add("table.merge")
            await self.history.update_entity(row, mode=UpdateMode.MERGE)

    async def history_rows(self, instance_id: str) -> list[dict[str, Any]]:
        """Every raw history row of an instance (sentinel included), for rewind and purge."""
        self.calls.add("table.query")
        pk = escape_key(instance_id)
        return [dict(r) async for r in self.history.query_entities("PartitionKey eq @pk", parameters={"pk": pk})]

    async def event_of(self, row: dict[str, Any]) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads(await self._unpack(row, "Event") or "{}")
        return loaded

    async def delete_history(self, instance_id: str) -> int:
        rows = await self.history_rows(instance_id)
        for start in range(0, len(rows), 100):
            self.calls.add("table.batch")
            await self.history.submit_transaction([("delete", r) for r in rows[start:start + 100]])
        return len(rows)

    # ---------------------------------------------------------------------------------------- instances
    async def read_instance(self, instance_id: str) -> dict[str, Any] | None:
        """The instance row with ``Input``/``Output``/``CustomStatus``/``EntityState`` fetched, plus ``etag``."""
        self.calls.add("table.get")
        try:
            row = await self.instances.get_entity(escape_key(instance_id), "")
        except ResourceNotFoundError:
            return None
        return await self._materialise(dict(row), str(row.metadata["etag"]))

    async def _materialise(self, row: dict[str, Any], etag: str) -> dict[str, Any]:
        for column in ("Input", "Output", "CustomStatus", "EntityState"):
            if column in row or column + "BlobName" in row:
                row[column] = await self._unpack(row, column)
        row["etag"] = etag
        return row

    async def write_instance(self, instance_id: str, fields: dict[str, Any], *, etag: str | None = None,
                             create: bool = False, replace: bool = False) -> str:
        """Write the instance row. ``create``: only if absent; ``etag``: only if unchanged; else merge/replace.

        Raises ``ResourceExistsError`` / ``ResourceModifiedError`` (412) when the condition fails.
        """
        row: dict[str, Any] = {"PartitionKey": escape_key(instance_id), "RowKey": "", "InstanceId": instance_id}
        for key, value in fields.items():
            if key in ("Input", "Output", "CustomStatus", "EntityState"):
                await self._pack(instance_id, key.lower(), value, row, key)
            else:
                row[key] = value
        mode = UpdateMode.REPLACE if replace else UpdateMode.MERGE
        self.calls.add("table.create_entity" if create else "table.update" if etag is not None else "table.upsert")
        if create:
            written = await self.instances.create_entity(row)
        elif etag is not None:
            written = await self.instances.update_entity(row, mode=mode, etag=etag,
                                                         match_condition=MatchConditions.IfNotModified)
        else:
            written = await self.instances.upsert_entity(row, mode=mode)
        return str(written.get("etag", ""))

    async def delete_instance(self, instance_id: str) -> None:
        self.calls.add("table.delete")
        with contextlib.suppress(ResourceNotFoundError):
            await self.instances.delete_entity(escape_key(instance_id), "")

    async def query_instances(self, *, statuses: set[str] | None = None, prefix: str = "",
                              limit: int = 1000) -> list[dict[str, Any]]:
        """Instance rows (orchestrations only: entity rows start with ``@``), optionally filtered."""
        self.calls.add("table.query")
        found: list[dict[str, Any]] = []
        async for row in self.instances.list_entities():
            instance_id = str(row.get("InstanceId") or "")
            if instance_id.startswith("@") or not instance_id.startswith(prefix):
                continue
            if statuses and row.get("RuntimeStatus") not in statuses:
                continue
            found.append(await self._materialise(dict(row), str(row.metadata["etag"])))
            if len(found) >= limit:
                break
        return found

    async def delete_large_blobs(self, instance_id: str) -> None:
        prefix = escape_key(instance_id) + "/"
        self.calls.add("blob.list")
        names = [b.name async for b in self.large.list_blobs(name_starts_with=prefix)]
        for name in names:
            self.calls.add("blob.delete")
            with contextlib.suppress(ResourceNotFoundError):
                await self.large.delete_blob(name)
