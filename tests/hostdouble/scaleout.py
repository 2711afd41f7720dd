"""The platform with several instances: ``python -m tests.hostdouble --instances N``.

Plays what Azure runs in front of and around a scaled-out Function App:

* **N instances**, each a Functions host (``tests.hostdouble.hostmain``) with its own worker process, its
  own private port and its own worker id (``WEBSITE_CURRENT_STAMPNAME`` = ``hostdouble``,
  ``RoleInstanceId`` = the instance's name: ``i1``, ``i2``, …), all on the same storage and task hub;
* **one front end** on the public port that spreads requests across the instances that are ready and not
  draining, round robin per request (a request that names an instance in ``x-hostdouble-instance`` goes
  there: a test hook, not a platform feature). Failures as a front end shows them: 502 when the instance
  fails before its response starts, the client connection aborted when it dies while the body streams;
* **scale-in** (drain): the instance leaves the front end's rotation, then gets SIGTERM: its host stops
  taking invocations, gives running HTTP requests ``--shutdown-timeout`` seconds, stops its Durable work
  as the extension does by default (``UseGracefulShutdown`` false: ``TaskHubWorker.StopAsync(isForced:
  true)``: work in flight is not waited for; the messages it held reappear after their visibility timeout),
  and releases its partition leases and timer locks;
* **kill**: SIGKILL of the instance's host (its worker dies with it): a crashed container; its leases
  expire, its messages reappear after their visibility timeout;
* **scale-out** (add): a new instance with a new name and worker id; it takes partitions by stealing, as
  ``LeaseCollectionBalancer`` does.

An instance whose host stops itself (the worker restart limit) is restarted under the same name and
worker id, as the single-host platform does. Control API on the front end (``/_platform/...``, not a
platform feature): ``GET instances``, ``POST instances`` (add), ``POST instances/<name>/drain``,
``POST instances/<name>/kill``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import signal
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from .forwarding import BrokenStream, FailedBeforeHeaders, Forwarder, NoHeadersInTime
from .protocol import INSTANCE_HEADER, INSTANCE_SETTING, READY_LINE, RECYCLE_EXIT_CODE, STARTUP_FAILED_EXIT_CODE
from .serving import loopback_socket, start_server

REPO_ROOT = Path(__file__).resolve().parents[2]
STAMP = "hostdouble"
_HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade",
               "content-length"}
FRONT_END_IDLE_TIMEOUT = 240.0  # what the front end waits for an instance's next byte (see the host's proxy)

STARTING, READY, DRAINING, STOPPED, KILLED = "starting", "ready", "draining", "stopped", "killed"


class InstanceLost(Exception):
    """The instance died (or went idle too long) while its response streamed: the client connection is aborted."""


class _QuietInstanceLost(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], InstanceLost))


def platform_log(message: str) -> None:
    print(f"[platform] {message}", file=sys.stderr, flush=True)


def _die_with_parent() -> None:  # runs in the host child between fork and exec
    import ctypes

    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)


@dataclass
class Instance:
    name: str
    sock: socket.socket
    state: str = STARTING
    generation: int = 0
    proc: asyncio.subprocess.Process | None = None
    started: float = field(default_factory=time.monotonic)
    requests: int = 0
    exit_codes: list[int] = field(default_factory=list)

    @property
    def port(self) -> int:
        port: int = self.sock.getsockname()[1]
        return port

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "state": self.state, "port": self.port, "worker_id": f"{STAMP}:{self.name}",
                "host_pid": self.proc.pid if self.proc is not None else None, "generation": self.generation,
                "requests": self.requests, "exit_codes": self.exit_codes}


class ScaleOutPlatform:
    def __init__(self, app_dir: str, port: int, script: str, kind_redelivery: bool, instances: int,
                 shutdown_timeout: int) -> None:
        self.app_dir = app_dir
        self.port = port
        self.script = script
        self.kind_redelivery = kind_redelivery
        self.initial = instances
        self.shutdown_timeout = shutdown_timeout
        self.instances: dict[str, Instance] = {}
        self._names = (f"i{n}" for n in itertools.count(1))
        self._rotation = itertools.count()
        self._stopping = False
        self._stop = asyncio.Event()
        self._watchers: set[asyncio.Task[None]] = set()
        self.forwarder = Forwarder(FRONT_END_IDLE_TIMEOUT)
        self.scratch = tempfile.TemporaryDirectory(prefix="hostdouble-platform-")
        self.env = dict(os.environ)
        self.env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), self.env.get("PYTHONPATH", "")) if p)
        self.env["PYTHONUNBUFFERED"] = "1"

    # ---------------------------------------------------------------------------------------- instances
    async def _spawn(self, instance: Instance) -> None:
        instance.generation += 1
        instance.state = STARTING
        env = {**self.env, "WEBSITE_CURRENT_STAMPNAME": STAMP, "RoleInstanceId": instance.name,
               INSTANCE_SETTING: instance.name}
        cmd = [sys.executable, "-m", "tests.hostdouble.hostmain", "--fd", str(instance.sock.fileno()),
               "--port", str(self.port), "--app-dir", self.app_dir, "--script", self.script,
               "--state-file", str(Path(self.scratch.name) / f"{instance.name}.json"),
               "--host-generation", str(instance.generation), "--instance", instance.name,
               "--shutdown-timeout", str(self.shutdown_timeout)]
        if self.kind_redelivery:
            cmd.append("--kind-redelivery")
        instance.proc = await asyncio.create_subprocess_exec(
            *cmd, cwd=REPO_ROOT, env=env, pass_fds=[instance.sock.fileno()], preexec_fn=_die_with_parent)
        task = asyncio.create_task(self._watch(instance, instance.proc))
        self._watchers.add(task)
        task.add_done_callback(self._watchers.discard)

    async def _watch(self, instance: Instance, proc: asyncio.subprocess.Process) -> None:
        code = await proc.wait()
        instance.exit_codes.append(code)
        if instance.state in (DRAINING, KILLED) or self._stopping:
            if instance.state != KILLED:
                instance.state = STOPPED
            platform_log(f"instance {instance.name} ended (exit code {code})")
            return
        if code == STARTUP_FAILED_EXIT_CODE and instance.generation == 1:
            instance.state = STOPPED
            platform_log(f"instance {instance.name}: the Functions host failed to start (exit code {code})")
            return
        why = "stopped itself (worker restart limit)" if code == RECYCLE_EXIT_CODE else f"exited with code {code}"
        platform_log(f"instance {instance.name}: the Functions host {why}; starting a fresh host with the same "
                     f"worker id (host generation {instance.generation + 1})")
        instance.state = STARTING
        await asyncio.sleep(0.2 if code != STARTUP_FAILED_EXIT_CODE else 5.0)
        if not self._stopping:
            await self._spawn(instance)
            await self._wait_ready(instance)

    async def _wait_ready(self, instance: Instance, timeout: float = 120.0) -> bool:
        """Until the instance's host answers (it accepts connections only once it is ready)."""
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient(timeout=2.0) as client:
            while time.monotonic() < deadline and instance.state == STARTING:
                if instance.proc is not None and instance.proc.returncode is not None:
                    return False
                with contextlib.suppress(httpx.HTTPError):
                    answer = await client.get(f"http://127.0.0.1:{instance.port}/admin/host/status")
                    if answer.status_code == 200:
                        instance.state = READY
                        platform_log(f"instance {instance.name} ready (worker id {STAMP}:{instance.name}, "
                                     f"port {instance.port})")
                        return True
                await asyncio.sleep(0.1)
        return instance.state == READY

    async def add(self) -> Instance:
        sock = loopback_socket(0)
        sock.listen(1024)
        instance = Instance(next(self._names), sock)
        self.instances[instance.name] = instance
        platform_log(f"scale-out: starting instance {instance.name}")
        await self._spawn(instance)
        await self._wait_ready(instance)
        return instance

    async def drain(self, instance: Instance) -> None:
        """Scale-in: out of the front end's rotation, then SIGTERM (the host drains and stops)."""
        if instance.state not in (READY, STARTING):
            return
        instance.state = DRAINING
        platform_log(f"scale-in: draining instance {instance.name} (SIGTERM)")
        if instance.proc is not None and instance.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                instance.proc.send_signal(signal.SIGTERM)

    def kill(self, instance: Instance) -> int | None:
        """SIGKILL the instance's host (its worker dies with it): a crashed container."""
        instance.state = KILLED
        proc = instance.proc
        if proc is None or proc.returncode is not None:
            return None
        platform_log(f"instance {instance.name} killed (SIGKILL of its host, pid {proc.pid})")
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        return proc.pid

    # ---------------------------------------------------------------------------------------- front end
    def _pick(self, request: Request) -> Instance | None:
        wanted = request.headers.get(INSTANCE_HEADER)
        if wanted:
            instance = self.instances.get(wanted)
            return instance if instance is not None and instance.state == READY else None
        ready = [i for i in self.instances.values() if i.state == READY]
        if not ready:
            return None
        return ready[next(self._rotation) % len(ready)]

    async def front(self, request: Request) -> Response:
        path = str(request.scope["path"])
        if path.startswith("/_platform/"):
            return await self.control(request, path[len("/_platform/"):].strip("/").split("/"))
        instance = self._pick(request)
        if instance is None:
            return Response(b"No instance can take this request.", status_code=503)
        instance.requests += 1
        headers = [(k, v) for k, v in request.scope["headers"] if k.decode("latin-1").lower() not in _HOP_BY_HOP]
        raw_path = (request.scope.get("raw_path") or path.encode()).decode("latin-1")
        url = f"http://127.0.0.1:{instance.port}{raw_path}" + (f"?{request.url.query}" if request.url.query else "")
        body = await request.body()
        try:
            upstream = await self.forwarder.send(request.method, url, headers, body)
        except NoHeadersInTime:
            return Response(status_code=504)
        except FailedBeforeHeaders as exc:
            platform_log(f"front end: {request.method} {path} to instance {instance.name} failed before its "
                         f"response started ({exc}) → 502")
            return Response(status_code=502)

        async def stream() -> Any:
            completed = False
            try:
                async for chunk in upstream.chunks:
                    yield chunk
                completed = True
            except BrokenStream as exc:
                platform_log(f"front end: response {request.method} {path} from instance {instance.name} broke off "
                             f"({exc}); the client connection is aborted")
                raise InstanceLost(str(exc)) from exc
            finally:
                await upstream.close(completed)

        response = StreamingResponse(stream(), status_code=upstream.status)
        response.raw_headers = [(k, v) for k, v in upstream.raw_headers
                                if k.decode("latin-1").lower() not in _HOP_BY_HOP | {"date", "server"}]
        return response

    async def control(self, request: Request, parts: list[str]) -> Response:
        if parts == ["instances"] and request.method == "GET":
            return JSONResponse([i.describe() for i in self.instances.values()])
        if parts == ["instances"] and request.method == "POST":
            instance = await self.add()
            return JSONResponse(instance.describe(), status_code=201 if instance.state == READY else 500)
        if len(parts) == 3 and parts[0] == "instances" and request.method == "POST":
            instance = self.instances.get(parts[1])
            if instance is None:
                return JSONResponse({"Message": f"no instance {parts[1]!r}"}, status_code=404)
            if parts[2] == "drain":
                await self.drain(instance)
                return JSONResponse(instance.describe())
            if parts[2] == "kill":
                return JSONResponse({**instance.describe(), "killed_pid": self.kill(instance)})
        return Response(status_code=404)

    # ---------------------------------------------------------------------------------------- lifecycle
    async def run(self) -> int:
        try:
            sock = loopback_socket(self.port)
            sock.listen(1024)
        except OSError as exc:
            raise SystemExit(f"host double: cannot listen on 127.0.0.1:{self.port}: {exc}") from None
        logging.getLogger("uvicorn.error").addFilter(_QuietInstanceLost())
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop.set)
        added = await asyncio.gather(*(self.add() for _ in range(self.initial)))
        if not all(i.state == READY for i in added):
            platform_log("an instance failed to start; giving up")
            await self.shutdown()
            return STARTUP_FAILED_EXIT_CODE
        app = Starlette(routes=[Route("/{path:path}", self.front, methods=[
            "GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "TRACE"])])
        server, task = await start_server(app, sock, keep_alive_s=130, graceful_s=2, own_signals=True)
        platform_log(f"front end on port {self.port} spreads requests across "
                     f"{', '.join(i.name for i in added)}")
        print(READY_LINE.format(port=self.port), flush=True)
        await self._stop.wait()
        server.should_exit = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 5.0)
        await self.shutdown()
        return 0

    async def shutdown(self) -> None:
        self._stopping = True
        procs = [i.proc for i in self.instances.values() if i.proc is not None and i.proc.returncode is None]
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        if procs:
            await asyncio.wait([asyncio.create_task(p.wait()) for p in procs],
                                            timeout=self.shutdown_timeout + 40.0)
            for proc in procs:
                if proc.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
        await self.forwarder.aclose()
        self.scratch.cleanup()


def run_scaled_platform(app_dir: str, port: int, script: str, kind_redelivery: bool, instances: int,
                        shutdown_timeout: int) -> int:
    platform = ScaleOutPlatform(app_dir, port, script, kind_redelivery, instances, shutdown_timeout)
    return asyncio.run(platform.run())

