"""The double's lean HTTP transport (durable/transport.py) against a scripted local HTTP server: keep-alive
reuse, a pooled connection the server dropped (retried by the SDK's retry policy, as with aiohttp), a read
timeout, chunked answers, and what it leaves to the SDK's own transport. Azurite round trips through it
are in test_lean.py and every other test of the double."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from azure.core.exceptions import ServiceResponseTimeoutError
from azure.core.pipeline import AsyncPipeline
from azure.core.rest import HttpRequest
from azure.storage.queue._shared.policies_async import ExponentialRetry

from tests.hostdouble.durable.transport import WHOLE_ANSWER, LeanLoopbackTransport

NO_CONTENT = b"HTTP/1.1 204 No Content\r\nConnection: keep-alive\r\nx-seen: %d\r\n\r\n"

Script = Callable[[int, int, asyncio.StreamWriter], Awaitable[bool]]


class _Server:
    """Answers each request as ``script(connection_number, request_number_on_it, writer)`` says; the script
    returns False to close the connection instead of reading more."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.connections = 0
        self.requests: list[bytes] = []

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        connection, number = self.connections, 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                self.requests.append(head + await reader.readexactly(length))
                number += 1
                if not await self.script(connection, number, writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    async def stop(self) -> None:
        self.server.close()
        await self.server.wait_closed()


class _Fallback:
    """Stands in for the SDK's aiohttp transport: records what it was given."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bool]] = []

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def send(self, request: Any, *, stream: bool = False, **config: Any) -> str:
        assert WHOLE_ANSWER not in config  # the lean transport's own option: aiohttp would refuse it
        self.sent.append((request.url, stream))
        return "fallback"


Use = Callable[[_Server, int, LeanLoopbackTransport], Awaitable[None]]


def _against(script: Script, use: Use) -> None:
    """Run ``use(server, port, transport)`` against a scripted server, closing both afterwards."""

    async def scenario() -> None:
        server = _Server(script)
        port = await server.start()
        transport = LeanLoopbackTransport(_Fallback())
        try:
            await use(server, port, transport)
        finally:
            await transport.close()
            await server.stop()

    asyncio.run(scenario())


async def _no_content(connection: int, number: int, writer: asyncio.StreamWriter) -> bool:
    writer.write(NO_CONTENT % number)
    return True


def test_sequential_calls_share_one_kept_alive_connection() -> None:
    async def use(server: _Server, port: int, transport: LeanLoopbackTransport) -> None:
        for n in range(20):
            response = await transport.send(HttpRequest("PUT", f"http://127.0.0.1:{port}/t/r{n}?x=1",
                                                         headers={"x-ms-version": "v"}, content=b"{}"))
            assert response.status_code == 204 and response.headers["X-SEEN"] == str(n + 1)
        assert server.connections == 1 and len(server.requests) == 20
        assert server.requests[0].startswith(b"PUT /t/r0?x=1 HTTP/1.1\r\n")
        assert b"x-ms-version: v\r\n" in server.requests[0] and server.requests[0].endswith(b"\r\n\r\n{}")

    _against(_no_content, use)


def test_the_request_target_is_requoted_as_aiohttp_sends_it() -> None:
    """Azurite checks the signature against the path it receives; aiohttp (yarl) sends ``%40`` as ``@`` and
    ``%27`` as ``'``, so an entity key like ``@counter@k`` must go out the same way or Azurite answers 403."""

    async def use(server: _Server, port: int, transport: LeanLoopbackTransport) -> None:
        target = "/t(PartitionKey='%40a',RowKey='b%20c%27%27')?$filter=a%20eq%201"
        await transport.send(HttpRequest("GET", f"http://127.0.0.1:{port}{target}"))
        sent = b"GET /t(PartitionKey='@a',RowKey='b%20c'\x27\x27)?$filter=a%20eq%201 HTTP/1.1\r\n"
        assert server.requests[0].startswith(sent + f"Host: 127.0.0.1:{port}\r\n".encode())

    _against(_no_content, use)


def test_a_pooled_connection_the_server_dropped_is_sent_again_on_a_new_one() -> None:
    async def answer_once(connection: int, number: int, writer: asyncio.StreamWriter) -> bool:
        if connection == 1 and number == 2:
            return False  # the keep-alive race: closed as the next request arrived, never answered
        writer.write(NO_CONTENT % number)
        return True

    async def use(server: _Server, port: int, transport: LeanLoopbackTransport) -> None:
        # The storage SDKs' retry policy (the double's queue clients run it), without its 15 s first back-off.
        retry = ExponentialRetry(initial_backoff=0, increment_base=1, retry_total=3, random_jitter_range=0)
        pipeline = AsyncPipeline(transport, policies=[retry])
        for _ in range(2):  # POST: sent again, as after aiohttp's ServerDisconnectedError
            response = await pipeline.run(HttpRequest("POST", f"http://127.0.0.1:{port}/q/messages",
                                                      content=b"<m/>"))
            assert response.http_response.status_code == 204
        assert server.connections == 2 and len(server.requests) == 3

    _against(answer_once, use)


def test_no_answer_within_the_read_timeout_is_a_response_timeout() -> None:
    async def silent(connection: int, number: int, writer: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(1)
        return False

    async def use(server: _Server, port: int, transport: LeanLoopbackTransport) -> None:
        with pytest.raises(ServiceResponseTimeoutError):
            await transport.send(HttpRequest("GET", f"http://127.0.0.1:{port}/t"), read_timeout=0.2)

    _against(silent, use)


def test_a_chunked_answer_in_pieces_is_read_whole() -> None:
    async def chunked(connection: int, number: int, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"5\r\n{\"a\":")
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(b"\r\n2\r\n1}\r\n0\r\n\r\n")
        return True

    async def use(server: _Server, port: int, transport: LeanLoopbackTransport) -> None:
        response = await transport.send(HttpRequest("GET", f"http://127.0.0.1:{port}/t"))
        assert (response.status_code, response.reason, response.content) == (200, "OK", b'{"a":1}')
        assert response.json() == {"a": 1} and response.content_type == "application/json"
        again = await transport.send(HttpRequest("GET", f"http://127.0.0.1:{port}/t"))
        assert again.content == b'{"a":1}' and server.connections == 1

    _against(chunked, use)


def test_streamed_and_https_calls_go_to_the_sdks_transport() -> None:
    async def scenario() -> None:
        fallback = _Fallback()
        transport = LeanLoopbackTransport(fallback)
        assert await transport.send(HttpRequest("GET", "https://account.blob.core.windows.net/c/b")) == "fallback"
        assert await transport.send(HttpRequest("GET", "http://127.0.0.1:1/c/b"), stream=True) == "fallback"
        assert fallback.sent == [("https://account.blob.core.windows.net/c/b", False),
                                 ("http://127.0.0.1:1/c/b", True)]
        assert transport.calls == 0

    asyncio.run(scenario())


def test_a_streamed_call_read_whole_anyway_is_sent_here_and_its_answer_read() -> None:
    """``whole_answer`` (a table transaction: ``stream=True`` only to keep the content decoding off its
    multipart answer) is sent over the kept-alive connection; over ``https`` it still goes to the SDK's
    transport, without the option."""

    async def use(server: _Server, port: int, transport: LeanLoopbackTransport) -> None:
        for _ in range(2):
            response = await transport.send(HttpRequest("POST", f"http://127.0.0.1:{port}/$batch", content=b"x"),
                                            stream=True, **{WHOLE_ANSWER: True})
            assert response.status_code == 204 and await response.read() == b""
        assert server.connections == 1 and len(server.requests) == 2 and transport.calls == 2
        https = HttpRequest("POST", "https://account.table.core.windows.net/$batch", content=b"x")
        fallback = transport._fallback
        assert await transport.send(https, stream=True, **{WHOLE_ANSWER: True}) == "fallback"
        assert fallback.sent == [("https://account.table.core.windows.net/$batch", True)]

    _against(_no_content, use)


def test_an_idle_connection_is_kept_as_long_as_the_server_says_it_keeps_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """``Keep-Alive: timeout=120`` (Azurite started by scripts/azurite.sh): a call 30 s after the last one
    reuses the connection; 61 s after that (past 120 s less the margin, capped at .NET's pool idle timeout
    of 60 s) a new one is opened. Without the hint the connection idles at most IDLE_SECONDS (Azurite's stock 5 s)."""
    from tests.hostdouble.durable import transport as module

    clock = [1000.0]
    monkeypatch.setattr(module.time, "monotonic", lambda: clock[0])
    hinted = b"HTTP/1.1 204 No Content\r\nConnection: keep-alive\r\nKeep-Alive: timeout=120\r\nx-seen: %d\r\n\r\n"

    async def keep_for_120(connection: int, number: int, writer: asyncio.StreamWriter) -> bool:
        writer.write((hinted if connection == 1 else NO_CONTENT) % number)
        return True

    async def use(server: _Server, port: int, transport: LeanLoopbackTransport) -> None:
        async def call() -> None:
            assert (await transport.send(HttpRequest("GET", f"http://127.0.0.1:{port}/q"))).status_code == 204

        await call()
        for idle, connections in ((30.0, 1), (61.0, 2), (module.IDLE_SECONDS - 0.5, 2), (module.IDLE_SECONDS, 3)):
            clock[0] += idle
            await call()
            assert (server.connections, transport.connections_opened) == (connections, connections), idle

    _against(keep_for_120, use)
