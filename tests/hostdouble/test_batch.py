"""The double's lean table transactions send what the SDK sends and answer as the SDK answers (real Azurite)."""

from __future__ import annotations

import asyncio
import os
import re
import secrets
from typing import Any

import pytest
from azure.core import MatchConditions
from azure.core.exceptions import HttpResponseError
from azure.core.pipeline.transport import AioHttpTransport
from azure.data.tables import UpdateMode
from azure.data.tables.aio import TableServiceClient

from tests.hostdouble.durable import lean
from tests.hostdouble.durable.batch import parse_batch_answer, use_lean_transactions
from tests.hostdouble.durable.transport import LeanLoopbackTransport

CONNECTION = os.environ.get("AzureWebJobsStorage", "UseDevelopmentStorage=true")


class Recording(AioHttpTransport):
    """Keeps the body of every ``$batch`` request it sends."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[bytes] = []

    async def send(self, request: Any, **kwargs: Any) -> Any:
        if request.url.endswith("/$batch"):
            self.batches.append(bytes(request.body if request.body is not None else request.data))
        return await super().send(request, **kwargs)


def normalized(body: bytes) -> bytes:
    """A batch body with its random boundaries, its clock and the ETags it names removed."""
    body = re.sub(rb"(batch|changeset)_[0-9a-f-]{36}", rb"\1_B", body)
    return re.sub(rb"^(x-ms-date|Date|If-Match): [^\r\n]+", rb"\1: D", body, flags=re.MULTILINE)


def operations(key: str, sentinel_etag: str | None) -> list[Any]:
    rows: list[Any] = [("upsert", {"PartitionKey": key, "RowKey": f"{i:016X}", "Event": '{"a": "ü"}' * 20,
                                   "EventId": i, "At": 1.5}, {"mode": UpdateMode.REPLACE}) for i in range(3)]
    sentinel = {"PartitionKey": key, "RowKey": "sentinel", "EventCount": 3}
    if sentinel_etag is None:
        return [*rows, ("create", sentinel)]
    return [*rows, ("update", sentinel, {"mode": UpdateMode.REPLACE, "etag": sentinel_etag,
                                         "match_condition": MatchConditions.IfNotModified})]


def test_a_lean_transaction_sends_the_sdks_body_and_answers_like_it() -> None:
    async def scenario() -> None:
        transport = Recording()
        async with TableServiceClient.from_connection_string(CONNECTION, transport=transport) as service:
            name = "batch" + secrets.token_hex(6)
            await service.create_table(name)
            try:
                sdk = service.get_table_client(name)
                lean = use_lean_transactions(service.get_table_client(name))
                answers = {}
                for label, client in (("sdk1", sdk), ("lean", lean)):  # keys of one length: one Content-Length
                    created = await client.submit_transaction(operations(label, None))
                    stored = await client.get_entity(label, "sentinel")
                    assert created[-1]["etag"] == stored.metadata["etag"]
                    updated = await client.submit_transaction(operations(label, created[-1]["etag"]))
                    statuses = []
                    for stale in (operations(label, created[-1]["etag"]), operations(label, None)):
                        with pytest.raises(HttpResponseError) as failure:
                            await client.submit_transaction(stale)
                        statuses.append(failure.value.status_code)
                    answers[label] = ([sorted(part) for part in created], [sorted(part) for part in updated],
                                      statuses)
                    rows = [dict(row) async for row in client.query_entities(
                        "PartitionKey eq @pk", parameters={"pk": label})]
                    assert [row["RowKey"] for row in rows] == [f"{i:016X}" for i in range(3)] + ["sentinel"]
                    assert rows[0]["Event"] == '{"a": "ü"}' * 20 and rows[0]["At"] == 1.5
                assert answers["sdk1"] == answers["lean"]
                assert answers["lean"][2] == [412, 409]  # a stale ETag, then a sentinel that already exists
                # the same request bodies, operation for operation (the SDK's first four, then the lean four)
                sdk_bodies = [normalized(b).replace(b"sdk1", b"KKKK") for b in transport.batches[:4]]
                lean_bodies = [normalized(b).replace(b"lean", b"KKKK") for b in transport.batches[4:]]
                assert len(sdk_bodies) == len(lean_bodies) == 4
                assert sdk_bodies == lean_bodies
            finally:
                await service.delete_table(name)

    asyncio.run(scenario())


def test_parse_batch_answer_reads_every_status_and_etag() -> None:
    answer = (b"--batchresponse_1\r\nContent-Type: multipart/mixed; boundary=changesetresponse_2\r\n\r\n"
              b"--changesetresponse_2\r\nContent-Type: application/http\r\n\r\n"
              b"HTTP/1.1 204 No Content\r\nETag: W/\"datetime'1'\"\r\n\r\n\r\n"
              b"--changesetresponse_2\r\nContent-Type: application/http\r\n\r\n"
              b"HTTP/1.1 201 Created\r\nLocation: x\r\netag: W/\"datetime'2'\"\r\n\r\n\r\n"
              b"--changesetresponse_2\r\nContent-Type: application/http\r\n\r\n"
              b"HTTP/1.1 412 Precondition Failed\r\nContent-ID: 1\r\n\r\n{\"odata.error\":{}}\r\n"
              b"--changesetresponse_2--\r\n--batchresponse_1--\r\n")
    assert parse_batch_answer(answer) == [(204, {"etag": "W/\"datetime'1'\""}),
                                          (201, {"etag": "W/\"datetime'2'\""}), (412, {})]


def test_over_the_doubles_trimmed_clients_a_transaction_is_one_call_of_the_lean_transport() -> None:
    """The transaction's answer is read whole, so it goes over the lean transport (not the SDK's aiohttp
    one, which costs the double's host more CPU per call), and answers the same: ETags, then a failure."""

    async def scenario() -> None:
        service = lean.trim_table_service(TableServiceClient.from_connection_string(CONNECTION))
        transport = service._client._client._pipeline._transport
        assert isinstance(transport, LeanLoopbackTransport)
        name = "batch" + secrets.token_hex(6)
        await service.create_table(name)
        try:
            table = use_lean_transactions(service.get_table_client(name))
            before = transport.calls
            created = await table.submit_transaction(operations("lean", None))
            assert transport.calls - before == 1
            assert created[-1]["etag"] == (await table.get_entity("lean", "sentinel")).metadata["etag"]
            with pytest.raises(HttpResponseError) as stale:
                await table.submit_transaction(operations("lean", None))  # the sentinel exists: 409
            assert stale.value.status_code == 409
            assert transport.calls - before == 3  # the transaction, the read, the failed transaction
        finally:
            await service.delete_table(name)
            await service.close()
            await transport.close()  # shared by the clients the service hands out: closed on its own

    asyncio.run(scenario())
