"""A loopback HTTP/1.1 proxy in front of Azurite that counts storage requests by operation.

Used by ``compare.py --count-storage`` and ``load.py --count-storage``: the service under test gets a
connection string pointing at the proxy, so every request it makes to blob/queue/table storage is seen
here, named by what it is billed as (``blob append``, ``table read (control columns)``, ...).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import re
import socket
import threading
from urllib.parse import urlsplit

# Azurite's well-known development account (public, documented; what UseDevelopmentStorage=true means).
DEV_ACCOUNT = "devstoreaccount1"
DEV_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class CountingProxy:
    """Loopback HTTP/1.1 proxy in front of Azurite that counts requests per service/method/operation.

    One listening port per upstream port (blob, queue, table). Requests are framed by Content-Length or
    chunked encoding (what the Azure SDKs send); responses are piped through untouched.
    """

    def __init__(self, upstream_ports: dict[str, int]) -> None:
        self.upstream = upstream_ports
        self.ports = {service: free_port() for service in upstream_ports}
        self.counts: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._servers: list[asyncio.Server] = []

    def connection_string(self) -> str:
        p = self.ports
        return (
            f"DefaultEndpointsProtocol=http;AccountName={DEV_ACCOUNT};AccountKey={DEV_KEY};"
            f"BlobEndpoint=http://127.0.0.1:{p['blob']}/{DEV_ACCOUNT};"
            f"QueueEndpoint=http://127.0.0.1:{p['queue']}/{DEV_ACCOUNT};"
            f"TableEndpoint=http://127.0.0.1:{p['table']}/{DEV_ACCOUNT}"
        )

    def snapshot(self) -> collections.Counter[str]:
        with self._lock:
            return collections.Counter(self.counts)

    def start(self) -> None:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("counting proxy did not start")

    def stop(self) -> None:
        """Close the listeners and every proxied connection, then the loop (no task left pending)."""
        done = asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop)
        with contextlib.suppress(Exception):
            done.result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    async def _shutdown(self) -> None:
        for server in self._servers:
            server.close()
        tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        for service, port in self.ports.items():
            self._servers.append(self._loop.run_until_complete(
                asyncio.start_server(lambda r, w, s=service: self._serve(s, r, w), "127.0.0.1", port)
            ))
        self._ready.set()
        self._loop.run_forever()

    async def _serve(self, service: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream[service])
        except OSError:
            writer.close()
            return
        pipe = asyncio.ensure_future(self._pipe(up_reader, writer))
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                up_writer.write(head)
                lines = head.decode("latin-1").split("\r\n")
                method, target = [*lines[0].split(" "), "", ""][:2]
                headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:] if x)}
                self._count(service, method, target, headers)
                if headers.get("transfer-encoding", "").lower() == "chunked":
                    while True:
                        size_line = await reader.readuntil(b"\r\n")
                        up_writer.write(size_line)
                        size = int(size_line.split(b";")[0].strip() or b"0", 16)
                        up_writer.write(await reader.readexactly(size + 2))
                        if size == 0:
                            break
                else:
                    length = int(headers.get("content-length", "0") or 0)
                    if length:
                        up_writer.write(await reader.readexactly(length))
                await up_writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError, ValueError):
            pass
        finally:
            up_writer.close()
            pipe.cancel()
            writer.close()

    @staticmethod
    async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.CancelledError):
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()

    def _count(self, service: str, method: str, target: str, headers: dict[str, str] | None = None) -> None:
        with self._lock:
            self.counts[storage_operation(service, method, target, headers or {})] += 1


def storage_operation(service: str, method: str, target: str, headers: dict[str, str]) -> str:
    """A readable name for one storage request (what it is billed as), e.g. ``blob append``."""
    parts = urlsplit(target)
    comp = re.search(r"(?:^|&)comp=([^&]+)", parts.query)
    if service == "blob":
        if comp and comp.group(1) == "appendblock":
            return "blob append"
        if comp and comp.group(1) == "list":
            return "blob list"
        if method == "GET":
            return "blob read"
        if method == "HEAD":
            return "blob properties"
        if method == "PUT" and not comp:
            return "blob create" if headers.get("x-ms-blob-type") else "blob put"
        return f"blob {method} {comp.group(1) if comp else '-'}"
    if service == "table":
        if "$batch" in parts.path:
            return "table batch"
        entity = "(" in parts.path and "()" not in parts.path
        if method == "GET":
            if not entity:
                return "table query"
            return "table read (control columns)" if "select=" in parts.query else "table read"
        if method == "POST":
            return "table insert" if not parts.path.rstrip("/").endswith("/Tables") else "table create-table"
        return {"PUT": "table upsert", "PATCH": "table merge", "DELETE": "table delete"}.get(method, f"table {method}")
    return f"{service} {method} {comp.group(1) if comp else '-'}"
