"""The one way the host and the worker listen: a loopback socket and a uvicorn server on it."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator
from typing import Any

import uvicorn


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


class _CalmServer(uvicorn.Server):
    """uvicorn with a 1 s housekeeping tick instead of 0.1 s.

    Why: the stock loop wakes ten times a second (to refresh the Date header once a second and to look
    at ``should_exit``), which alone costs ~2 ms of CPU per second while idle. Once a second does both
    jobs; stopping takes up to a second longer.
    """

    async def main_loop(self) -> None:
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + 10) % 864000  # on_tick refreshes the Date header when counter % 10 == 0
            await asyncio.sleep(1.0)
            should_exit = await self.on_tick(counter)


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
