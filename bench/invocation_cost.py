"""CPU per invocation between the host double's host and its worker: the event stream against an HTTP POST.

The double's host sends orchestrator episodes, activities, entity batches and timer runs to its worker on
one event stream (``tests/hostdouble/eventstream.py``: pipes, length-prefixed JSON, answers matched by id),
as the real host does on its gRPC ``EventStream``. HTTP-triggered functions are forwarded as HTTP requests.
This measures one invocation round trip both ways, between this process (the host's side: aiohttp client,
or the stream's host end) and a child process (the worker's side: a uvicorn ASGI app answering JSON, or the
stream's worker end): CPU of each side per call (``time.process_time`` here, ``/proc/<pid>/stat`` for the
child) and wall time, the two ways interleaved round by round.

    .venv/bin/python bench/invocation_cost.py --calls 2000 --rounds 3 --size 4000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.hostdouble.eventstream import HostStream, open_pipes, serve_worker_stream
from tests.hostdouble.serving import loopback_socket, start_server


async def _worker_side(read_fd: int, write_fd: int) -> None:
    """The child: the same answer over HTTP (an ASGI app, no framework routing) and over the stream."""
    from starlette.responses import JSONResponse

    async def http_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = json.loads(b"".join(chunks))
        await JSONResponse({"ok": True, "result": len(body["context"])})(scope, receive, send)

    async def handle(kind: str, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        return {"ok": True, "result": len(body["context"])}

    sock = loopback_socket(0)
    await start_server(http_app, sock, keep_alive_s=120, graceful_s=1)
    reader, writer = await open_pipes(read_fd, write_fd)
    print(sock.getsockname()[1], flush=True)
    await serve_worker_stream(reader, writer, handle)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _host_side(args: argparse.Namespace) -> None:
    import aiohttp

    to_worker_read, to_worker_write = os.pipe()
    from_worker_read, from_worker_write = os.pipe()
    child = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--worker", f"{to_worker_read},{from_worker_write}",
        pass_fds=(to_worker_read, from_worker_write), stdout=asyncio.subprocess.PIPE)
    os.close(to_worker_read)
    os.close(from_worker_write)
    assert child.stdout is not None
    port = int((await child.stdout.readline()).decode())
    stream = HostStream(*await open_pipes(from_worker_read, to_worker_write))
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=100, keepalive_timeout=20.0))
    payload = {"function": "f", "context": "x" * args.size}

    async def over_http(n: int) -> Any:
        async with session.post(f"http://127.0.0.1:{port}/invoke", data=json.dumps(payload).encode(),
                                headers={"Content-Type": "application/json"}) as answer:
            return json.loads(await answer.read())

    async def over_stream(n: int) -> Any:
        return await stream.call(str(n), "activity", payload, {})

    ways: dict[str, Callable[[int], Awaitable[Any]]] = {"HTTP POST": over_http, "event stream": over_stream}
    figures: dict[str, list[tuple[float, float, float]]] = {name: [] for name in ways}
    try:
        for _ in range(args.rounds):
            for name, call in ways.items():
                for n in range(50):  # warm the connection, the caches
                    await call(n)
                host0, worker0, wall0 = time.process_time(), _cpu_seconds(child.pid), time.perf_counter()
                for n in range(args.calls):
                    await call(n)
                host1, worker1, wall1 = time.process_time(), _cpu_seconds(child.pid), time.perf_counter()
                scale = 1000 / args.calls
                figures[name].append(((host1 - host0) * scale, (worker1 - worker0) * scale, (wall1 - wall0) * scale))
    finally:
        await session.close()
        stream.close()
        child.kill()
        await child.wait()
    print(f"{args.calls} sequential invocations x {args.rounds} rounds, {args.size}-byte payload; "
          "median ms per invocation")
    print(f"{'way':14s} {'host CPU':>9s} {'worker CPU':>11s} {'both':>7s} {'wall':>7s}")
    for name, rows in figures.items():
        host, worker, wall = (statistics.median(column) for column in zip(*rows, strict=True))
        print(f"{name:14s} {host:9.3f} {worker:11.3f} {host + worker:7.3f} {wall:7.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--size", type=int, default=4000, help="bytes of payload per invocation")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        read_fd, write_fd = (int(fd) for fd in args.worker.split(","))
        asyncio.run(_worker_side(read_fd, write_fd))
    else:
        asyncio.run(_host_side(args))


if __name__ == "__main__":
    main()
