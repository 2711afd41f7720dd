"""The double's table transactions (entity group transactions), without the SDK's ``email`` multipart code.

Why: the Durable backend commits every orchestrator episode with one table transaction
(``AzureTableTrackingStore.UpdateStateAsync``: the new history rows and the sentinel row in one batch), and
``azure-data-tables`` builds and parses that batch's ``multipart/mixed`` body with the standard library's
``email`` package. That costs the double's host ~5 ms of CPU per transaction against ~1.3 ms for a single
entity write (``bench/call_cost.py``), the largest single share of the double's own CPU per run: a cost of
the Python model, not of the .NET host it stands in for.

What stays the SDK's: the operations themselves (``TableBatchOperations`` serializes each entity with its
OData types and sets ``If-Match``), the request's pipeline (SharedKey signing, the retry policy, the
transport) and the error type the callers catch (:class:`~azure.core.exceptions.HttpResponseError` with the
failed operation's status). Only the envelope is written here: the ``$batch`` body the SDK sends, the same
bytes but for its random boundaries and its clock (one changeset, CRLF lines, ``Content-ID`` per
operation), and the answer is read for each operation's status line and ``ETag``.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Mapping
from typing import Any
from wsgiref.handlers import format_date_time

from azure.core.exceptions import HttpResponseError
from azure.core.rest import HttpRequest
from azure.data.tables.aio import TableClient

from .transport import WHOLE_ANSWER, LeanLoopbackTransport

_STATUS_LINE = re.compile(rb"^HTTP/1\.1 (\d{3})[^\r\n]*\r\n((?:[^\r\n]+\r\n)*)", re.MULTILINE)
_ETAG_HEADER = re.compile(rb"^etag:\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)
_ERROR_CODE = re.compile(rb'"code"\s*:\s*"([^"]+)"')


def use_lean_transactions(table: TableClient) -> TableClient:
    """Make ``table.submit_transaction`` send its batch through :func:`_send_batch` (this instance only).

    Over the double's lean transport the batch is marked as read whole at once (:data:`WHOLE_ANSWER`), so
    that transport sends it; decided here, once per client, not per transaction."""
    options = {WHOLE_ANSWER: True} if _over_lean_transport(table) else {}

    async def send_batch(table_name: str, *requests: HttpRequest, **kwargs: Any) -> list[Mapping[str, Any]]:
        return await _send_batch(table, table_name, *requests, **options, **kwargs)

    table._batch_send = send_batch  # type: ignore[method-assign]
    return table


def batch_body(requests: tuple[HttpRequest, ...], batch: str, changeset: str, date: str) -> bytes:
    """The ``$batch`` body: one changeset holding every operation, as the SDK writes it."""
    out = bytearray(f"--{batch}\r\nContent-Type: multipart/mixed; boundary={changeset}\r\n\r\n".encode())
    for index, request in enumerate(requests):
        content = request.content
        body = content.encode() if isinstance(content, str) else bytes(content or b"")
        headers = dict(request.headers)
        headers["x-ms-date"] = date  # what the SDK's StorageHeadersPolicy adds to each operation
        headers["Date"] = date
        out += (f"--{changeset}\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n"
                f"Content-ID: {index}\r\n\r\n{request.method} {request.url} HTTP/1.1\r\n").encode()
        out += "".join(f"{name}: {value}\r\n" for name, value in headers.items()).encode()
        out += b"\r\n" + body + b"\r\n"
    out += f"--{changeset}--\r\n\r\n--{batch}--\r\n".encode()
    return bytes(out)


def parse_batch_answer(body: bytes) -> list[tuple[int, Mapping[str, Any]]]:
    """Each operation's status and metadata (``etag`` when the answer has one), in order."""
    parts: list[tuple[int, Mapping[str, Any]]] = []
    for match in _STATUS_LINE.finditer(body):
        etag = _ETAG_HEADER.search(match.group(2))
        parts.append((int(match.group(1)), {"etag": etag.group(1).decode()} if etag else {}))
    return parts


def _over_lean_transport(table: TableClient) -> bool:
    """Whether the table's pipeline ends in the double's lean transport (a table client wraps its service's
    transport in the SDK's ``AsyncTransportWrapper``)."""
    transport = table._client._client._pipeline._transport
    while not isinstance(transport, LeanLoopbackTransport) and hasattr(transport, "_transport"):
        transport = transport._transport
    return isinstance(transport, LeanLoopbackTransport)


async def _send_batch(self: TableClient, table_name: str, *requests: HttpRequest,
                      **kwargs: Any) -> list[Mapping[str, Any]]:
    """Stands in for ``TableClient._batch_send`` (same arguments, same result, same errors' status)."""
    batch, changeset = f"batch_{uuid.uuid4()}", f"changeset_{uuid.uuid4()}"
    request = HttpRequest(
        "POST", f"{self.scheme}://{self._primary_hostname}/$batch",
        headers={"x-ms-version": self.api_version, "DataServiceVersion": "3.0",
                 "MaxDataServiceVersion": "3.0;NetFx", "Accept": "application/json",
                 "Content-Type": f"multipart/mixed; boundary={batch}"},
        content=batch_body(requests, batch, changeset, format_date_time(time.time())),
    )
    # stream=True: no content decoding of the multipart answer (read whole below)
    response = await self._client.send_request(request, stream=True, **kwargs)
    body = await response.read()
    if response.status_code != 202:
        raise HttpResponseError(message=f"table transaction on {table_name} failed", response=response)
    parts = parse_batch_answer(body)
    failed = next((status for status, _ in parts if not 200 <= status < 300), None)
    if failed is not None or len(parts) != len(requests):
        status = failed or 500
        code = _ERROR_CODE.search(body)
        error = HttpResponseError(
            message=f"table transaction on {table_name}: operation answered {status}"
                    f" ({code.group(1).decode() if code else 'no error code'})")
        error.status_code = status
        raise error
    return [metadata for _, metadata in parts]


__all__ = ["batch_body", "parse_batch_answer", "use_lean_transactions"]
