"""A small loopback TCP proxy that tests control: forward, add latency, drop every connection, refuse new
ones for a while, resume.

One listening port per upstream (e.g. Azurite's blob, queue and table ports), all served by one asyncio
loop in a daemon thread so a synchronous test can steer it while the app under test talks through it::

    with TcpProxy({"blob": 10000, "queue": 10001, "table": 10002}) as proxy:
        env["AzureWebJobsStorage"] = proxy.azurite_connection_string()
        proxy.outage(4.0)          # drop all connections, refuse new ones for 4 s, then resume
        proxy.latency = 0.1        # delay every client→upstream chunk by 100 ms

Refusing is real refusal: the listening sockets are closed (a connect gets ECONNREFUSED) and reopened on
the same ports on resume. Dropping aborts both sides of every open connection (the client sees a reset or
a closed connection mid-request, like a storage front end that went away). Binds 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Coroutine
from typing import Any

AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
HOST = "127.0.0.1"
CHUNK = 65536


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


class TcpProxy:
    """Forwarding proxy ``127.0.0.1:<listen port>`` → ``127.0.0.1:<upstream port>`` per named upstream."""

    def __init__(self, upstreams: dict[str, int]) -> None:
        self.upstreams = dict(upstreams)
        self.ports = {name: _free_port() for name in upstreams}
        self.latency = 0.0  # seconds added before each client→upstream chunk is forwarded
        self.accepted = 0
        self.drops = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tcpproxy", daemon=True)
        self._servers: dict[str, asyncio.Server] = {}
        self._conns: set[asyncio.StreamWriter] = set()
        self._resume_at: asyncio.TimerHandle | None = None
        self.refusing = False
        self.log: list[tuple[float, str]] = []  # (monotonic time, what the proxy did), for reports

    # ---------------------------------------------------------------------------------------- lifecycle
    def start(self) -> TcpProxy:
        self._thread.start()
        self._call(self._listen())
        return self

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        with contextlib.suppress(Exception):
            self._call(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self._loop.close()

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def azurite_connection_string(self) -> str:
        """An explicit Azurite connection string whose three endpoints go through this proxy."""
        p = self.ports
        return (
            f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
            f"BlobEndpoint=http://{HOST}:{p['blob']}/{AZURITE_ACCOUNT};"
            f"QueueEndpoint=http://{HOST}:{p['queue']}/{AZURITE_ACCOUNT};"
            f"TableEndpoint=http://{HOST}:{p['table']}/{AZURITE_ACCOUNT};"
        )

    # -------------------------------------------------------------------------------------------- controls
    def drop_all(self) -> int:
        """Abort every open connection (both sides); returns how many client connections were cut."""
        return self._call(self._drop_all())

    def refuse(self, seconds: float | None = None) -> None:
        """Stop listening (new connects are refused); with ``seconds``, resume automatically after that."""
        self._call(self._refuse(seconds))

    def resume(self) -> None:
        """Listen again on the same ports and forward normally."""
        self._call(self._resume())

    def outage(self, seconds: float) -> float:
        """Drop everything and refuse new connections for ``seconds`` (resumes by itself); returns the
        monotonic time at which it resumes."""
        self.refuse(seconds)
        self.drop_all()
        return time.monotonic() + seconds

    # ------------------------------------------------------------------------------------------- internals
    def _call(self, coro: Coroutine[Any, Any, Any], timeout: float = 10.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    async def _listen(self) -> None:
        for name, port in self.ports.items():
            if name not in self._servers:
                self._servers[name] = await asyncio.start_server(
                    lambda r, w, n=name: self._serve(n, r, w), HOST, port, reuse_address=True)
        self.refusing = False

    async def _shutdown(self) -> None:
        if self._resume_at is not None:
            self._resume_at.cancel()
        await self._close_listeners()
        await self._drop_all()
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    async def _close_listeners(self) -> None:
        """Close the listening sockets now. Not ``wait_closed()``: since Python 3.12.1 it also waits for
        every open connection to end, and connections are dropped (or kept) separately."""
        servers, self._servers = list(self._servers.values()), {}
        for server in servers:
            server.close()

    async def _refuse(self, seconds: float | None) -> None:
        if self._resume_at is not None:
            self._resume_at.cancel()
            self._resume_at = None
        self.refusing = True
        self.log.append((time.monotonic(), "refuse"))
        await self._close_listeners()
        if seconds is not None:
            self._resume_at = self._loop.call_later(seconds, lambda: self._loop.create_task(self._resume()))

    async def _resume(self) -> None:
        if self._resume_at is not None:
            self._resume_at.cancel()
            self._resume_at = None
        await self._listen()
        self.log.append((time.monotonic(), "resume"))

    async def _drop_all(self) -> int:
        conns, self._conns = list(self._conns), set()
        for writer in conns:
            transport = writer.transport
            if not transport.is_closing():
                transport.abort()
        self.drops += 1
        self.log.append((time.monotonic(), f"drop {len(conns) // 2}"))
        return len(conns) // 2

    async def _serve(self, name: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.refusing:  # accepted in the instant before the listener closed
            writer.transport.abort()
            return
        self.accepted += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(HOST, self.upstreams[name])
        except OSError:
            writer.transport.abort()
            return
        self._conns.update((writer, up_writer))
        upstream = asyncio.ensure_future(self._pipe(reader, up_writer, delayed=True))
        downstream = asyncio.ensure_future(self._pipe(up_reader, writer, delayed=False))
        try:
            await asyncio.wait({upstream, downstream}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (upstream, downstream):
                task.cancel()
            for side in (writer, up_writer):
                self._conns.discard(side)
                side.transport.abort()

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, *, delayed: bool) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await src.read(CHUNK):
                if delayed and self.latency > 0:
                    await asyncio.sleep(self.latency)
                dst.write(data)
                await dst.drain()
