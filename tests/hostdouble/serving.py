"""The one way the host and the worker listen: a loopback socket and a uvicorn server on it."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Iterator
from email.utils import formatdate
from typing import Any

import uvicorn
from uvicorn.server import ServerState


def loopback_socket(port: int) -> socket.socket:
    """A bound 127.0.0.1 socket (``port`` 0 picks a free one).

    proto=IPPROTO_TCP so asyncio sets TCP_NODELAY on accepted connections (it checks ``sock.proto``):
    without it every keep-alive response waits ~40 ms for a delayed ACK (Nagle).
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", port))
    except OSError:
        sock.close()
        raise
    return sock


class _DateOnDemand(ServerState):
    """Server state whose ``default_headers`` (uvicorn reads them for every response) carry a ``Date`` made
    when a response asks for it, at most once a second, instead of by a timer."""

    def __init__(self) -> None:
        self._others: list[tuple[bytes, bytes]] = []
        self._second = -1
        self._headers: list[tuple[bytes, bytes]] = []
        super().__init__()

    @property  # type: ignore[override]
    def default_headers(self) -> list[tuple[bytes, bytes]]:
        now = int(time.time())
        if now != self._second:
            self._second = now
            self._headers = [(b"date", formatdate(now, usegmt=True).encode()), *self._others]
        return self._headers

    @default_headers.setter
    def default_headers(self, headers: list[tuple[bytes, bytes]]) -> None:
        self._others = [header for header in headers if header[0].lower() != b"date"]
        self._second = -1


class _CalmServer(uvicorn.Server):
    """uvicorn without its housekeeping timer.

    Why: the stock loop wakes ten times a second (to refresh the Date header once a second and to look at
    ``should_exit``); on a small VM every wake-up of an idle process costs ~0.1–0.3 ms of CPU, which
    counted in the idle figure of both the host and the worker. Here the Date header is made when a
    response needs it (:class:`_DateOnDemand`) and setting ``should_exit`` (a signal handler, or the host's
    own shutdown) wakes the loop at once, so an idle server never wakes.
    """

    def __init__(self, config: uvicorn.Config) -> None:
        self._loop = asyncio.get_running_loop()
        self._exit_wanted = asyncio.Event()
        self._should_exit = False
        super().__init__(config)
        self.server_state = _DateOnDemand()

    @property  # type: ignore[override]
    def should_exit(self) -> bool:
        return self._should_exit

    @should_exit.setter
    def should_exit(self, value: bool) -> None:
        self._should_exit = value
        if value:  # may run in a signal handler: wake the loop through its self-pipe
            self._loop.call_soon_threadsafe(self._exit_wanted.set)

    async def main_loop(self) -> None:
        await self.on_tick(0)  # the headers other than Date (the server name, configured headers), once
        if not self.should_exit:
            await self._exit_wanted.wait()


class _OwnSignals(_CalmServer):
    """A server that leaves SIGTERM/SIGINT to its process (the host shuts down on its own terms)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def start_server(app: Any, sock: socket.socket, *, keep_alive_s: int, graceful_s: int,
                       own_signals: bool = False) -> tuple[uvicorn.Server, asyncio.Task[None]]:
    """Serve ``app`` on ``sock``; return once it accepts connections (RuntimeError if it stopped first).

    ``own_signals``: do not let uvicorn handle SIGTERM/SIGINT (stop it with ``server.should_exit``).
    """
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                            timeout_keep_alive=keep_alive_s, timeout_graceful_shutdown=graceful_s)
    server = _OwnSignals(config) if own_signals else _CalmServer(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            task.result()
            raise RuntimeError(f"HTTP server on {sock.getsockname()} stopped during startup")
        await asyncio.sleep(0.01)
    return server, task
