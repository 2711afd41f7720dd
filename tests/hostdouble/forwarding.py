"""How the host's proxy sends a request on to the worker and streams the worker's answer back.

The real host forwards HTTP functions' requests with YARP (.NET, cheap next to a Python worker). The double's
forwarding is its own overhead, not modelled behaviour, so it should cost little: it goes through aiohttp
(~0.3 ms of CPU per small request on loopback, against ~1 ms for httpx, whose connection pool also does
work per pooled connection on every request: under 50 concurrent runs with 2 SSE readers each, the pool's
bookkeeping was ~9 % of the host's CPU and a proxied request waited seconds behind it).

One exception keeps httpx: aiohttp writes header values as UTF-8 text, so a request with a header value
that is not valid UTF-8 (any byte but controls is allowed, RFC 9110 5.5) goes through httpx, which sends the
bytes as they came. What a client sends reaches the app byte for byte either way.

Both paths map their failures onto the same three outcomes, which the proxy turns into what the real host
answers: no response headers within the idle timeout (YARP's ``ActivityTimeout``: 504), a transport
failure before the response started (the worker died or a pooled connection was stale), and a transport
failure or idle timeout while the body streams (the client connection is aborted).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import aiohttp
import httpx
import yarl

# aiohttp adds these when absent; YARP forwards the client's headers and adds none of them.
_NO_AUTO_HEADERS = frozenset({"User-Agent", "Accept", "Accept-Encoding", "Content-Type"})


class NoHeadersInTime(Exception):
    """The worker sent no response headers within the idle timeout."""


class FailedBeforeHeaders(Exception):
    """The connection failed before the response started (refused, reset, closed)."""


class BrokenStream(Exception):
    """The connection failed, or stayed idle past the timeout, while the response body streamed."""


@dataclass
class Upstream:
    """The worker's answer: status, headers byte for byte, the body's chunks as they arrive, and
    ``close(completed)``: return the connection to the pool after a whole body, else drop it (the worker
    then sees its client leave)."""

    status: int
    raw_headers: list[tuple[bytes, bytes]]
    chunks: AsyncIterator[bytes]
    close: Callable[[bool], Awaitable[None]]


def _utf8_headers(headers: list[tuple[bytes, bytes]]) -> list[tuple[str, str]] | None:
    try:
        return [(name.decode("latin-1"), value.decode("utf-8")) for name, value in headers]
    except UnicodeDecodeError:
        return None


class Forwarder:
    """Connection pools to the worker. Create it in the event loop that uses it."""

    def __init__(self, idle_timeout_s: float, *, connect_timeout_s: float = 10.0) -> None:
        self._idle = idle_timeout_s
        self._connect = connect_timeout_s
        self._session: aiohttp.ClientSession | None = None
        self._httpx: httpx.AsyncClient | None = None

    async def send(self, method: str, url: str, headers: list[tuple[bytes, bytes]], body: bytes) -> Upstream:
        """Send the request; return once the response headers arrived (raises one of the three outcomes)."""
        text_headers = _utf8_headers(headers)
        if text_headers is None:
            return await self._send_httpx(method, url, headers, body)
        return await self._send_aiohttp(method, url, text_headers, body)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
        if self._httpx is not None:
            await self._httpx.aclose()

    # ------------------------------------------------------------------------------------------ aiohttp
    async def _send_aiohttp(self, method: str, url: str, headers: list[tuple[str, str]], body: bytes) -> Upstream:
        if self._session is None:
            # Pooled connections expire well before the worker's keep-alive timeout (see worker.serve); bodies
            # pass through as they came (no decompression).
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=1000, keepalive_timeout=20.0), auto_decompress=False)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self._connect, sock_read=self._idle)
        try:
            answer = await self._session.request(
                method, yarl.URL(url, encoded=True), headers=headers, data=body, timeout=timeout,
                allow_redirects=False, skip_auto_headers=_NO_AUTO_HEADERS)
        except TimeoutError as exc:  # aiohttp's ServerTimeoutError is a TimeoutError too
            raise NoHeadersInTime(repr(exc)) from exc
        except aiohttp.ClientError as exc:
            raise FailedBeforeHeaders(repr(exc)) from exc

        async def chunks() -> AsyncIterator[bytes]:
            try:
                async for chunk in answer.content.iter_any():
                    yield chunk
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise BrokenStream(repr(exc)) from exc

        async def close(completed: bool) -> None:
            if completed:
                answer.release()
            else:
                answer.close()

        return Upstream(answer.status, list(answer.raw_headers), chunks(), close)

    # -------------------------------------------------------------------------------------------- httpx
    async def _send_httpx(self, method: str, url: str, headers: list[tuple[bytes, bytes]], body: bytes) -> Upstream:
        if self._httpx is None:
            self._httpx = httpx.AsyncClient(limits=httpx.Limits(max_connections=1000, max_keepalive_connections=100,
                                                                keepalive_expiry=20.0))
        timeout = httpx.Timeout(None, connect=self._connect, read=self._idle)
        request = self._httpx.build_request(method, url, headers=headers, content=body, timeout=timeout)
        try:
            answer = await self._httpx.send(request, stream=True)
        except httpx.TimeoutException as exc:
            raise NoHeadersInTime(repr(exc)) from exc
        except httpx.TransportError as exc:
            raise FailedBeforeHeaders(repr(exc)) from exc

        async def chunks() -> AsyncIterator[bytes]:
            try:
                async for chunk in answer.aiter_raw():
                    yield chunk
            except httpx.TransportError as exc:
                raise BrokenStream(repr(exc)) from exc

        async def close(completed: bool) -> None:
            await answer.aclose()

        return Upstream(answer.status_code, list(answer.headers.raw), chunks(), close)
