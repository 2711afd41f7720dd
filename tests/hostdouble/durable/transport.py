"""A lean HTTP/1.1 transport under the double's table and queue pipelines, for its calls to local storage.

Why: after :mod:`lean` took the SDKs' per-call wrappers out of the double's hottest storage calls, the
largest share left of each call's CPU in the double's host was aiohttp's client (its request and response
objects, connector, timeouts and tracing hooks: about half of a call, ``bench/call_cost.py``). That cost is
the Python model's, not the .NET host's it stands in for, and it counted in every figure of the double's
host.

What it does: keep-alive connections to plain-``http`` endpoints (Azurite), the request written as the
pipeline built it (method, URL, headers, body), the answer parsed with ``httptools`` (the parser the
worker's uvicorn uses), returned as the SDK's own ``azure.core.rest`` response type with its body read.
Every pipeline policy still runs above it (signing, retries, content decoding). Anything else (``https``, a
streamed download, a legacy request object, a file upload) goes to the SDK's aiohttp transport it wraps; a
streamed call whose caller reads the answer whole anyway says so (:data:`WHOLE_ANSWER`: the table
transactions) and is sent here.

Failures map as aiohttp's do in the SDK's transport (``AioHttpTransport.send``), so the retry policy
sees the same errors: no connection, or the connection lost before the whole answer →
``ServiceRequestError`` (``ServiceRequestTimeoutError`` past the connect timeout); no answer within the
read timeout → ``ServiceResponseTimeoutError``; an answer that is not HTTP → ``ServiceResponseError``.

An idle connection is kept while the server says it keeps it (``Keep-Alive: timeout=N``, which Azurite's
Node server sends: 5 s by default, ``scripts/azurite.sh`` starts it with 120 s as Azure Storage keeps idle
connections for minutes) less :data:`KEEP_ALIVE_MARGIN_SECONDS`, and at most :data:`MAX_IDLE_SECONDS` (the
idle timeout of .NET's connection pool, ``SocketsHttpHandler.PooledConnectionIdleTimeout``, which the real
host's storage clients use); :data:`IDLE_SECONDS` when the server says nothing. So a pooled connection is
rarely one the server has just closed; when it is, the call fails like aiohttp's and the retry policy sends
it again. Why it matters: the double's pollers and lease renewals call storage every few seconds while the
host idles, and a new connection per call (the server closed the last one) cost about a fifth of the idle
host's CPU.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httptools
from azure.core.exceptions import (
    ServiceRequestError,
    ServiceRequestTimeoutError,
    ServiceResponseError,
    ServiceResponseTimeoutError,
)
from azure.core.pipeline.transport import AsyncHttpTransport
from azure.core.rest import HttpRequest
from azure.core.rest._http_response_impl_async import AsyncHttpResponseImpl
from azure.core.utils import CaseInsensitiveDict
from yarl import URL

IDLE_SECONDS = 2.0  # when the server does not say how long it keeps an idle connection
KEEP_ALIVE_MARGIN_SECONDS = 3.0
MAX_IDLE_SECONDS = 60.0
DEFAULT_CONNECT_TIMEOUT = 20.0
DEFAULT_READ_TIMEOUT = 60.0

# A call option (``send_request(request, stream=True, whole_answer=True)``): the caller asks for the answer
# unparsed (``stream=True`` keeps the pipeline's content decoding off it, e.g. a table transaction's
# ``multipart/mixed`` answer) but reads it whole at once, so this transport may send it and return the body
# read. Without it a streamed call goes to the wrapped transport; the option never reaches that one.
WHOLE_ANSWER = "whole_answer"

_Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class _Answer:
    """httptools callbacks: collects one response."""

    def __init__(self) -> None:
        self.reason = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []
        self.complete = False
        self.keep_alive = False
        self.status = 0
        self.parser: Any = None

    def on_headers_complete(self) -> None:
        # Read here: once the message is complete the parser has reset for the next one.
        self.keep_alive = bool(self.parser.should_keep_alive())
        self.status = int(self.parser.get_status_code())

    def on_status(self, status: bytes) -> None:
        self.reason += status

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.complete = True


def _not_streamed(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("the lean transport reads every body whole; streamed calls use the SDK's transport")


class LeanLoopbackTransport(AsyncHttpTransport):  # type: ignore[misc]
    """``azure.core.rest`` requests to ``http`` endpoints over pooled keep-alive connections; the rest to
    ``fallback`` (the SDK's own transport, which this one owns and closes)."""

    def __init__(self, fallback: Any, *, idle_seconds: float = IDLE_SECONDS) -> None:
        self._fallback = fallback
        self._idle_seconds = idle_seconds
        self._idle: dict[tuple[str, int], list[tuple[float, _Connection]]] = {}  # (reusable until, connection)
        self.calls = 0  # sent here (not through the fallback)
        self.connections_opened = 0

    async def __aenter__(self) -> LeanLoopbackTransport:
        await self.open()
        return self

    async def __aexit__(self, *args: Any) -> None:
        await self.close()

    async def open(self) -> None:
        await self._fallback.open()

    async def close(self) -> None:
        for connections in self._idle.values():
            for _, (_, writer) in connections:
                writer.close()
        self._idle.clear()
        await self._fallback.close()

    async def sleep(self, duration: float) -> None:
        await asyncio.sleep(duration)

    async def send(self, request: Any, *, stream: bool = False, **config: Any) -> Any:
        url = URL(request.url)  # as aiohttp reads it: requoted the way yarl does (Azurite signs what it gets)
        read_whole = config.pop(WHOLE_ANSWER, False)  # a streamed call whose caller reads the answer at once
        if (stream and not read_whole) or not isinstance(request, HttpRequest) or url.scheme != "http" \
                or request.files or request.method == "HEAD" \
                or not isinstance(request.content, (bytes, str, type(None))):
            return await self._fallback.send(request, stream=stream, **config)
        # the same timeouts the wrapped transport would use: the call's, else its client's configuration
        defaults = getattr(self._fallback, "connection_config", None)
        connect_timeout = config.get("connection_timeout") or getattr(defaults, "timeout", None) \
            or DEFAULT_CONNECT_TIMEOUT
        read_timeout = config.get("read_timeout") or getattr(defaults, "read_timeout", None) or DEFAULT_READ_TIMEOUT
        key = (url.raw_host or "127.0.0.1", url.port or 80)
        body = request.content if isinstance(request.content, bytes) else (request.content or "").encode()
        head = [f"{request.method} {url.raw_path_qs} HTTP/1.1", f"Host: {url.raw_host}:{key[1]}"]
        head += [f"{name}: {value}" for name, value in request.headers.items()
                 if name.lower() not in ("host", "content-length")]
        head.append(f"Content-Length: {len(body)}")
        data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
        reader, writer = await self._connection(key, connect_timeout)
        self.calls += 1
        answer = _Answer()
        parser = answer.parser = httptools.HttpResponseParser(answer)
        try:
            writer.write(data)
            while not answer.complete:
                chunk = await asyncio.wait_for(reader.read(65536), read_timeout)
                if not chunk:
                    raise ConnectionResetError("the server closed the connection before the whole answer")
                parser.feed_data(chunk)
        except TimeoutError as error:
            writer.close()
            raise ServiceResponseTimeoutError(f"no answer within {read_timeout} s", error=error) from error
        except httptools.HttpParserError as error:
            writer.close()
            raise ServiceResponseError(f"unreadable answer: {error}", error=error) from error
        except OSError as error:  # aiohttp's disconnects and resets surface as ServiceRequestError too
            writer.close()
            raise ServiceRequestError(str(error) or type(error).__name__, error=error) from error
        except BaseException:  # cancelled mid-exchange: the connection is in an unknown state
            writer.close()
            raise
        if answer.keep_alive and not reader.at_eof():
            until = time.monotonic() + self._kept_for(answer.headers)
            self._idle.setdefault(key, []).append((until, (reader, writer)))
        else:
            writer.close()
        headers = CaseInsensitiveDict((name.decode("latin-1"), value.decode("latin-1"))
                                      for name, value in answer.headers)
        response = AsyncHttpResponseImpl(
            request=request, internal_response=None, status_code=answer.status,
            reason=answer.reason.decode("latin-1"), content_type=headers.get("content-type"), headers=headers,
            stream_download_generator=_not_streamed)
        response._content = b"".join(answer.body)
        response._is_closed = True
        return response

    def _kept_for(self, headers: list[tuple[bytes, bytes]]) -> float:
        """How long a connection may idle in the pool after this answer (see the module docstring)."""
        for name, value in headers:
            if name.lower() == b"keep-alive":
                for part in value.split(b","):
                    setting, _, number = part.strip().partition(b"=")
                    if setting.lower() == b"timeout" and number.strip().isdigit():
                        return max(0.0, min(MAX_IDLE_SECONDS, int(number) - KEEP_ALIVE_MARGIN_SECONDS))
        return self._idle_seconds

    async def _connection(self, key: tuple[str, int], connect_timeout: float) -> _Connection:
        """The freshest idle connection to ``key`` (expired ones are closed), else a new one."""
        pool = self._idle.get(key)
        now = time.monotonic()
        if pool:
            for _, (_, writer) in [entry for entry in pool if entry[0] <= now]:
                writer.close()
            pool[:] = [entry for entry in pool if entry[0] > now]
        while pool:
            _, (reader, writer) = pool.pop()
            if not reader.at_eof() and not writer.is_closing():
                return reader, writer
            writer.close()
        self.connections_opened += 1
        try:
            return await asyncio.wait_for(asyncio.open_connection(*key), connect_timeout)
        except TimeoutError as error:
            raise ServiceRequestTimeoutError(f"no connection to {key} within {connect_timeout} s",
                                             error=error) from error
        except OSError as error:
            raise ServiceRequestError(str(error), error=error) from error


def lean_transport_of(transport: Any) -> LeanLoopbackTransport:
    """Wrap a client's transport (once)."""
    if isinstance(transport, LeanLoopbackTransport):
        return transport
    return LeanLoopbackTransport(transport)
