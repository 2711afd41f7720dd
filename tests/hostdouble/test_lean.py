"""The double's lean single calls store, return and fail exactly as the SDK's public methods (real Azurite)."""

from __future__ import annotations

import asyncio
import os
import secrets
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from azure.core.exceptions import (
    HttpResponseError,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
    ServiceRequestError,
)
from azure.core.pipeline.transport import AioHttpTransport
from azure.data.tables import UpdateMode
from azure.data.tables.aio import TableClient, TableServiceClient
from azure.storage.blob.aio import BlobLeaseClient, BlobServiceClient
from azure.storage.queue.aio import QueueClient, QueueServiceClient

from tests.hostdouble.durable import lean
from tests.hostdouble.durable.transport import LeanLoopbackTransport

CONNECTION = os.environ.get("AzureWebJobsStorage", "UseDevelopmentStorage=true")


def row(key: str, **extra: Any) -> dict[str, Any]:
    """An instance-like row with every property type the double writes (and a key that needs escaping)."""
    return {"PartitionKey": key, "RowKey": "", "InstanceId": key, "Name": "orch <&> 'ü'", "Count": 2**31 - 1,
            "Small": 7, "Ratio": 0.25, "Flag": True, "When": datetime(2026, 12, 1, 8, 30, tzinfo=UTC),
            "Blob": b"\x00\x01", **extra}


def stored(entity: Any) -> dict[str, Any]:
    return {**dict(entity), "_etag": entity.metadata["etag"]}


async def with_table(scenario: Any, transport: Any = None) -> None:
    """Runs ``scenario`` with a table client of a trimmed service (as the double's), the SDK's beside it."""
    async with (TableServiceClient.from_connection_string(CONNECTION) as service,
                lean.trim_table_service(TableServiceClient.from_connection_string(
                    CONNECTION, **({"transport": transport} if transport else {}))) as trimmed):
        name = "lean" + secrets.token_hex(6)
        await service.create_table(name)
        try:
            await scenario(service.get_table_client(name), trimmed.get_table_client(name))
        finally:
            await service.delete_table(name)


async def with_queue(scenario: Any) -> None:
    """Runs ``scenario(sdk, queue, transport)``: a queue client of the SDK's own service, one of a trimmed
    service (as the double's) and the trimmed service's lean transport."""
    async with (QueueServiceClient.from_connection_string(CONNECTION) as service,
                lean.trim_queue_service(QueueServiceClient.from_connection_string(CONNECTION)) as trimmed):
        name = "lean-" + secrets.token_hex(6)
        await service.create_queue(name)
        try:
            await scenario(service.get_queue_client(name), trimmed.get_queue_client(name),
                           trimmed._pipeline._transport)
        finally:
            await service.delete_queue(name)


class FailsFirst(LeanLoopbackTransport):
    """The double's transport, whose first request fails before it reaches storage (a dropped connection)."""

    def __init__(self) -> None:
        super().__init__(AioHttpTransport())
        self.attempts = 0

    async def send(self, request: Any, **kwargs: Any) -> Any:
        self.attempts += 1
        if self.attempts == 1:
            raise ServiceRequestError("connection dropped (test)")
        return await super().send(request, **kwargs)


def test_trimmed_pipelines_keep_headers_signing_and_retries_and_drop_only_observers() -> None:
    tables = lean.trim_table_service(TableServiceClient.from_connection_string(CONNECTION))
    queues = lean.trim_queue_service(QueueServiceClient.from_connection_string(CONNECTION))
    table_policies = [type(getattr(p, "_policy", p)).__name__
                      for p in tables.get_table_client("t")._client._client._pipeline._impl_policies]
    queue_policies = [type(getattr(p, "_policy", p)).__name__
                      for p in queues.get_queue_client("q")._pipeline._impl_policies]
    for kept in (table_policies, queue_policies):
        assert not set(kept) & lean.OBSERVING_POLICIES
        assert "StorageHeadersPolicy" in kept and "SharedKeyCredentialPolicy" in kept and "StorageHosts" in kept
    assert "AsyncTablesRetryPolicy" in table_policies and "ExponentialRetry" in queue_policies
    assert queue_policies.index("ExponentialRetry") < queue_policies.index("SharedKeyCredentialPolicy")
    # ... over the double's lean transport (durable/transport.py), the SDK's aiohttp one kept as its fallback
    assert isinstance(tables._client._client._pipeline._transport, LeanLoopbackTransport)
    assert isinstance(queues._pipeline._transport, LeanLoopbackTransport)

    async def retried(sdk: TableClient, table: TableClient) -> None:
        etag = (await sdk.create_entity(row("@orch@retried")))["etag"]
        assert (await lean.get_entity(table, "@orch@retried", "")).metadata["etag"] == etag

    transport = FailsFirst()
    asyncio.run(with_table(retried, transport))
    assert transport.attempts == 2  # the dropped attempt and its retry


def test_lean_entity_writes_store_what_the_sdks_store() -> None:
    async def scenario(table: TableClient, trimmed: TableClient) -> None:
        for key_suffix, write in (("sdk", None), ("lean", lean.write_entity)):
            key = f"@orch@it's {key_suffix}"
            first = row(key)
            if write is None:
                created = (await table.create_entity(first))["etag"]
                merged = (await table.upsert_entity({"PartitionKey": key, "RowKey": "", "Small": 8}))["etag"]
                replaced = (await table.update_entity(row(key, Small=9), mode=UpdateMode.REPLACE, etag=merged,
                                                      match_condition=lean.MatchConditions.IfNotModified))["etag"]
            else:
                created = await write(trimmed, first, create=True)
                merged = await write(trimmed, {"PartitionKey": key, "RowKey": "", "Small": 8})
                replaced = await write(trimmed, row(key, Small=9), etag=merged, mode=UpdateMode.REPLACE)
            assert created and merged and replaced and len({created, merged, replaced}) == 3
            sdk_view = await table.get_entity(key, "")
            lean_view = await lean.get_entity(trimmed, key, "")
            assert stored(sdk_view) == stored(lean_view)
            assert lean_view.metadata["etag"] == replaced
            assert lean_view["Count"] == 2**31 - 1 and lean_view["Small"] == 9 and lean_view["Blob"] == b"\x00\x01"
            assert lean_view["Name"] == "orch <&> 'ü'" and lean_view["When"] == datetime(2026, 12, 1, 8, 30, tzinfo=UTC)
        rows = {r["InstanceId"].split()[-1]: {k: v for k, v in r.items() if k not in ("PartitionKey", "InstanceId")}
                async for r in table.list_entities()}
        assert rows.keys() == {"sdk", "lean"} and rows["sdk"] == rows["lean"]

    asyncio.run(with_table(scenario))


def test_lean_entity_calls_fail_with_the_sdks_exceptions() -> None:
    async def scenario(sdk: TableClient, table: TableClient) -> None:
        key = "@orch@conflicts"
        etag = await lean.write_entity(table, row(key), create=True)
        with pytest.raises(ResourceExistsError) as exists:
            await lean.write_entity(table, row(key), create=True)
        assert exists.value.status_code == 409
        await lean.write_entity(table, {"PartitionKey": key, "RowKey": "", "Small": 1})  # the ETag moves on
        with pytest.raises(ResourceModifiedError) as modified:
            await lean.write_entity(table, row(key), etag=etag, mode=UpdateMode.REPLACE)
        assert modified.value.status_code == 412
        with pytest.raises(ResourceNotFoundError):
            await lean.get_entity(table, "absent", "")
        with pytest.raises(ResourceNotFoundError):  # a conditional update of a missing row: 404, as the SDK
            await lean.write_entity(table, row("absent"), etag=etag)
        with pytest.raises(ResourceNotFoundError):
            await sdk.update_entity(row("absent"), etag=etag, match_condition=lean.MatchConditions.IfNotModified)

    asyncio.run(with_table(scenario))


def test_lean_queue_messages_are_the_sdks_messages() -> None:
    async def scenario(sdk: QueueClient, queue: QueueClient, _: LeanLoopbackTransport) -> None:
        text = '{"e":"<tag attr=\\"1\\"> & ü"}'
        message_id, receipt = await lean.send_message(queue, text)
        [received] = [m async for m in sdk.receive_messages(max_messages=32, visibility_timeout=30)]
        assert received.id == message_id and received.content == text and received.dequeue_count == 1
        with pytest.raises(HttpResponseError) as stale:  # the receive issued a new pop receipt
            await lean.delete_message(queue, message_id, receipt)
        assert stale.value.status_code in (400, 404)
        await lean.delete_message(queue, received.id, received.pop_receipt)
        with pytest.raises(ResourceNotFoundError):
            await lean.delete_message(queue, received.id, received.pop_receipt)

        hidden_id, hidden_receipt = await lean.send_message(queue, "later", visibility_timeout=30)
        assert [m async for m in sdk.receive_messages(max_messages=32)] == []  # invisible for 30 s
        updated = await sdk.update_message(hidden_id, hidden_receipt, visibility_timeout=0)
        [visible] = [m async for m in sdk.receive_messages(max_messages=32)]
        assert visible.id == hidden_id and visible.content == "later" and updated.pop_receipt
        await lean.delete_message(queue, visible.id, visible.pop_receipt)
        assert (await sdk.get_queue_properties()).approximate_message_count == 0

    asyncio.run(with_queue(scenario))


def test_lean_receive_answers_what_the_sdks_receive_answers() -> None:
    """Ids, pop receipts that delete, dequeue counts and texts (escaped characters, an empty text) as the
    SDK's ``receive_messages`` reads them; visibility as asked; an empty queue answers nothing."""

    async def scenario(sdk: QueueClient, queue: QueueClient, transport: LeanLoopbackTransport) -> None:
        assert await lean.receive_messages(queue, 32, 30) == []
        texts = ['{"e":"<tag attr=\\"1\\"> & ü"}', "", "  spaced  \n"]
        sent = [(await lean.send_message(queue, text))[0] for text in texts]
        before = transport.calls
        first = await lean.receive_messages(queue, 2, 30)
        rest = await lean.receive_messages(queue, 32, 30)
        assert transport.calls - before == 2
        assert [(m.id, m.content, m.dequeue_count) for m in first + rest] \
            == [(i, t, 1) for i, t in zip(sent, texts, strict=True)]
        assert [m async for m in sdk.receive_messages(max_messages=32)] == []  # invisible for 30 s
        for message in first + rest:  # visible again: the SDK reads the same messages
            await sdk.update_message(message.id, message.pop_receipt, visibility_timeout=0)
        again = [m async for m in sdk.receive_messages(max_messages=32, visibility_timeout=30)]
        assert sorted((m.id, m.content, m.dequeue_count) for m in again) \
            == sorted((i, t, 2) for i, t in zip(sent, texts, strict=True))
        for message in again:
            await sdk.update_message(message.id, message.pop_receipt, visibility_timeout=0)
        for message in await lean.receive_messages(queue, 32, 30):  # its receipts delete
            assert message.dequeue_count == 3
            await lean.delete_message(queue, message.id, message.pop_receipt)
        assert (await sdk.get_queue_properties()).approximate_message_count == 0

    asyncio.run(with_queue(scenario))


def test_lean_blob_leases_go_over_the_lean_transport_and_downloads_over_aiohttp() -> None:
    """The partition leases' calls (upload, acquire, renew, a conflicting acquire, release) behave as with
    the SDK's own transport and are sent by the lean one; a download streams through the aiohttp fallback."""

    async def scenario() -> None:
        async with (BlobServiceClient.from_connection_string(CONNECTION) as service,
                    lean.lean_blob_service(BlobServiceClient.from_connection_string(CONNECTION)) as leaned):
            transport = leaned._pipeline._transport
            assert isinstance(transport, LeanLoopbackTransport)
            policies = [type(getattr(p, "_policy", p)).__name__ for p in leaned.get_container_client("c")
                        .get_blob_client("b")._pipeline._impl_policies]
            assert "AsyncStorageResponseHook" in policies  # every policy kept: downloads need it
            name = "lean-" + secrets.token_hex(6)
            await service.create_container(name)
            try:
                blob = leaned.get_container_client(name).get_blob_client("default/control-00")
                before = transport.calls
                await blob.upload_blob(b'{"Owner": ""}', overwrite=False)
                lease = BlobLeaseClient(blob, lease_id=str(uuid.uuid4()))
                await lease.acquire(lease_duration=15)
                await lease.renew()
                rival = BlobLeaseClient(service.get_container_client(name).get_blob_client("default/control-00"))
                with pytest.raises(HttpResponseError) as taken:
                    await rival.acquire(lease_duration=15)
                assert taken.value.status_code == 409
                assert transport.calls - before == 3  # upload, acquire, renew
                assert await (await blob.download_blob()).readall() == b'{"Owner": ""}'
                assert transport.calls - before == 3  # the download streamed through aiohttp
                await lease.release()
                await rival.acquire(lease_duration=15)  # free again
                await rival.release()
            finally:
                await service.delete_container(name)

    asyncio.run(scenario())
