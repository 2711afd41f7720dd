"""The double's hottest single storage calls, sent through the SDK clients' pipelines without their wrappers.

Why: the double's host makes ~42 storage calls per response for the Durable backend it models (queue sends
and deletes, instance rows, history batches). Through the SDKs' public methods each costs its Python process
~2.5 ms of CPU on this machine; about half of that is the per-call wrapping around the HTTP exchange (the
tracing decorator, the generated operation's request and response (de)serialization, the error
translation), the other half is the pipeline and the transport (``bench/call_cost.py``). That overhead is the
Python model's, not the .NET host's it stands in for, and it counted in every figure of the double's host.

What stays the SDK's: the request (the SDK's own builders make the table requests: ``TableBatchOperations``
each write, as its single-entity and transaction paths do (OData types, keys, ``If-Match``), the generated
``build_table_query_entity_with_partition_and_row_key_request`` the point read; queue requests mirror the
SDK's URL, query and XML body), the client's whole pipeline (SharedKey signing, the retry policy, the
transport), the deserialized entity (``_convert_to_entity``) and the exception types callers catch
(``ResourceNotFoundError`` for 404, ``ResourceExistsError`` for 409, ``ResourceModifiedError`` for 412,
``HttpResponseError`` with ``status_code`` otherwise). ``tests/hostdouble/test_lean.py`` compares both
paths on Azurite: what is stored, what comes back, and the failures.

The double's clients also leave out the pipeline policies that only observe or decorate a request
(:data:`OBSERVING_POLICIES`: tracing, logging, user agent, request ids, proxy and redirect handling,
response hooks): each costs every call CPU and none changes what storage sees, except headers it never
reads. What every call keeps: the storage headers (``x-ms-date``, ``x-ms-version``), the signing, the
hosts policy, the retry policy and the content decoding, in the SDK's order.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from html import unescape
from typing import Any
from urllib.parse import quote
from xml.etree import ElementTree
from xml.sax.saxutils import escape

from azure.core import MatchConditions
from azure.core.exceptions import (
    HttpResponseError,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
    map_error,
)
from azure.core.pipeline import AsyncPipeline
from azure.core.rest import AsyncHttpResponse, HttpRequest
from azure.data.tables import TableEntity, UpdateMode
from azure.data.tables._deserialize import _convert_to_entity
from azure.data.tables._generated.operations._operations import (
    build_table_query_entity_with_partition_and_row_key_request,
)
from azure.data.tables._serialize import _prepare_key
from azure.data.tables._table_batch import TableBatchOperations
from azure.data.tables.aio import TableClient, TableServiceClient
from azure.storage.blob.aio import BlobServiceClient
from azure.storage.queue.aio import QueueClient, QueueServiceClient

from .transport import LeanLoopbackTransport, lean_transport_of

OBSERVING_POLICIES = frozenset({
    "RequestIdPolicy", "UserAgentPolicy", "ProxyPolicy", "AsyncRedirectPolicy", "CustomHookPolicy",
    "NetworkTraceLoggingPolicy", "DistributedTracingPolicy", "HttpLoggingPolicy", "RangeHeaderPolicy",
    "AsyncContentValidationPolicy", "StorageRequestHook", "StorageLoggingPolicy", "AsyncStorageResponseHook",
    "StorageSensitiveHeaderCleanupPolicy",
})
_ERRORS: Mapping[int, type[HttpResponseError]] = {
    404: ResourceNotFoundError, 409: ResourceExistsError, 412: ResourceModifiedError}
_MESSAGE_ID = re.compile(r"<MessageId>([^<]*)</MessageId>")
_POP_RECEIPT = re.compile(r"<PopReceipt>([^<]*)</PopReceipt>")


async def _send(pipeline_client: Any, request: HttpRequest, expected: int) -> AsyncHttpResponse:
    response: AsyncHttpResponse = await pipeline_client.send_request(request)
    if response.status_code != expected:
        map_error(status_code=response.status_code, response=response, error_map=_ERRORS)
        raise HttpResponseError(response=response)
    return response


# ------------------------------------------------------------------------------------------------ pipelines
def _essential(policies: list[Any]) -> list[Any]:
    return [p for p in policies if p is not None and type(p).__name__ not in OBSERVING_POLICIES]


def trim_table_service(service: TableServiceClient) -> TableServiceClient:
    """Table clients this service hands out (``get_table_client``) run only the essential policies, over
    the lean transport (:mod:`.transport`)."""
    service._policies = _essential(service._policies)
    pipeline = service._client._client._pipeline
    pipeline._transport = lean_transport_of(pipeline._transport)
    return service


def trim_queue_service(service: QueueServiceClient) -> QueueServiceClient:
    """Queue clients this service hands out (``get_queue_client``) run only the essential policies, over the
    lean transport (:mod:`.transport`)."""
    _over_lean_transport(service, _essential(_policies_of(service)))
    return service


def lean_blob_service(service: BlobServiceClient) -> BlobServiceClient:
    """Blob clients this service hands out send their whole-body calls (the partition leases' acquire, renew
    and release, small uploads) over the lean transport. Unlike tables and queues, every pipeline policy
    stays: a blob download hands options to the response hook policy that no transport accepts. Streamed
    downloads still go through aiohttp (the lean transport hands them to the transport it wraps)."""
    _over_lean_transport(service, _policies_of(service))
    return service


def _policies_of(service: QueueServiceClient | BlobServiceClient) -> list[Any]:
    """A storage service's pipeline policies, unwrapped from their SansIO runners."""
    return [getattr(p, "_policy", p) for p in service._pipeline._impl_policies]


def _over_lean_transport(service: QueueServiceClient | BlobServiceClient, policies: list[Any]) -> None:
    """The clients the service hands out (they copy its pipeline) run ``policies`` over the lean transport."""
    service._pipeline = AsyncPipeline(lean_transport_of(service._pipeline._transport), policies=policies)


def close_lean_transports(tables: TableServiceClient, queues: QueueServiceClient,
                          blobs: BlobServiceClient | None = None) -> list[Awaitable[None]]:
    """Closing the services does not reach the transports their clients share: close those too."""
    shared = [tables._client._client._pipeline._transport, queues._pipeline._transport]
    if blobs is not None:
        shared.append(blobs._pipeline._transport)
    return [transport.close() for transport in shared if isinstance(transport, LeanLoopbackTransport)]


# ------------------------------------------------------------------------------------------------ tables
def _operation(table: TableClient, kind: str, entity: Mapping[str, Any], **kwargs: Any) -> HttpRequest:
    operations = TableBatchOperations(config=table._client._config,  # the SDK's own request builders
                                      endpoint=f"{table.scheme}://{table._primary_hostname}",
                                      table_name=table.table_name)
    operations.add_operation((kind, entity, kwargs))
    return operations.requests[0]


async def write_entity(table: TableClient, entity: Mapping[str, Any], *, create: bool = False,
                       etag: str | None = None, mode: UpdateMode = UpdateMode.MERGE) -> str:
    """Insert (``create``), conditional update (``etag``) or upsert (else) of one entity; its new ETag."""
    if create:
        request, expected = _operation(table, "create", entity), 201
    elif etag is not None:
        request, expected = _operation(table, "update", entity, mode=mode, etag=etag,
                                       match_condition=MatchConditions.IfNotModified), 204
    else:
        request, expected = _operation(table, "upsert", entity, mode=mode), 204
    response = await _send(table._client._client, request, expected)
    return str(response.headers.get("ETag", ""))


async def get_entity(table: TableClient, partition_key: str, row_key: str) -> TableEntity:
    """One entity by its keys, as ``TableClient.get_entity`` returns it (``metadata['etag']`` included)."""
    request = build_table_query_entity_with_partition_and_row_key_request(  # the SDK's own builder
        table=table.table_name, partition_key=_prepare_key(partition_key), row_key=_prepare_key(row_key),
        version=table._client._config.version)
    request.url = f"{table.scheme}://{table._primary_hostname}{request.url}"
    response = await _send(table._client._client, request, 200)
    entity: TableEntity = _convert_to_entity(json.loads(response.content))  # type: ignore[no-untyped-call]
    return entity


# ------------------------------------------------------------------------------------------------ queues
def _queue_request(queue: QueueClient, method: str, path: str, **kwargs: Any) -> HttpRequest:
    headers = {"x-ms-version": queue.api_version, **kwargs.pop("headers", {})}
    return HttpRequest(method, f"{queue.url}/{path}", headers=headers, **kwargs)


async def send_message(queue: QueueClient, content: str, visibility_timeout: int | None = None) -> tuple[str, str]:
    """``QueueClient.send_message`` (no encode policy): the new message's id and pop receipt."""
    params = {"visibilitytimeout": str(visibility_timeout)} if visibility_timeout else {}
    body = ("<?xml version='1.0' encoding='utf-8'?>\n"
            f"<QueueMessage><MessageText>{escape(content)}</MessageText></QueueMessage>").encode()
    request = _queue_request(queue, "POST", "messages", params=params, content=body, headers={
        "Content-Type": "application/xml", "Accept": "application/xml"})
    answer = (await _send(queue._client._client, request, 201)).text()
    message_id, receipt = _MESSAGE_ID.search(answer), _POP_RECEIPT.search(answer)
    if message_id is None or receipt is None:
        raise HttpResponseError(message=f"queue answered without a message id or pop receipt: {answer[:200]!r}")
    return unescape(message_id.group(1)), unescape(receipt.group(1))


@dataclass(frozen=True)
class ReceivedMessage:
    """The fields of a ``QueueMessage`` the double reads (``QueueClient.receive_messages`` without a decode
    policy: ``content`` is the message text as sent)."""

    id: str
    pop_receipt: str
    dequeue_count: int
    content: str


async def receive_messages(queue: QueueClient, max_messages: int, visibility_timeout: int) -> list[ReceivedMessage]:
    """``QueueClient.receive_messages(max_messages=…, visibility_timeout=…)``: one ``GET …/messages``."""
    request = _queue_request(queue, "GET", "messages", headers={"Accept": "application/xml"}, params={
        "numofmessages": str(max_messages), "visibilitytimeout": str(visibility_timeout)})
    answer = (await _send(queue._client._client, request, 200)).content
    received = []
    for message in ElementTree.fromstring(answer).iter("QueueMessage"):  # the XML answer, unescaped
        received.append(ReceivedMessage(
            id=message.findtext("MessageId") or "", pop_receipt=message.findtext("PopReceipt") or "",
            dequeue_count=int(message.findtext("DequeueCount") or 1), content=message.findtext("MessageText") or ""))
    return received


async def delete_message(queue: QueueClient, message_id: str, pop_receipt: str) -> None:
    """``QueueClient.delete_message``."""
    request = _queue_request(queue, "DELETE", f"messages/{quote(message_id)}", params={"popreceipt": pop_receipt})
    await _send(queue._client._client, request, 204)


__all__ = ["OBSERVING_POLICIES", "ReceivedMessage", "delete_message", "get_entity", "receive_messages",
           "send_message", "trim_queue_service", "trim_table_service", "write_entity"]
