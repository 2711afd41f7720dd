"""The worker process of the host double: plays the Python language worker.

``python -m tests.hostdouble.worker --app-dir DIR [--script function_app.py]``

Imports the app's script (default ``function_app.py``) from ``DIR`` exactly once, indexes it the way the
worker does (``{f.get_function_name(): f for f in app.get_functions()}`` plus each function's bindings),
then serves on an ephemeral loopback port:

* ``/{path}`` with the ``x-ms-invocation-id`` header: an HTTP-triggered function, invoked like the real
  worker's HTTP-streaming path (FastAPI ``Request`` with ``path_params`` synced from the host's route
  params, ``client=<durable client binding JSON string>``), the returned FastAPI response (e.g.
  ``StreamingResponse``) is served as is, so its ``body_iterator`` streams chunk by chunk.
* on the host's event stream (:mod:`tests.hostdouble.eventstream`, a pair of pipes given by ``--stream-fds``):
  one orchestrator episode, one activity invocation, one entity batch or one timer run per message, with
  the Durable converters of ``azure-functions`` (``OrchestrationContext``,
  ``ActivityTriggerConverter.decode/encode``, ``EntityContext``). The worker exits when that stream closes.

When ready it prints one line ``HOSTDOUBLE_WORKER_READY {json}`` (port, pid, function metadata) on stdout.
It exits when its parent (the host) dies.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import contextvars
import ctypes
import functools
import importlib
import inspect
import json
import logging
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from .deployed import hide_test_tools
from .eventstream import Handler, open_pipes, serve_worker_stream
from .protocol import (
    BINDINGS_HEADER,
    FUNCTION_HEADER,
    INVOCATION_HEADER,
    KILL_HEADER,
    ROUTE_PARAMS_HEADER,
    WORKER_READY_PREFIX,
)
from .serving import loopback_socket, start_server

_PRIVATE_HEADERS = {FUNCTION_HEADER.encode(), ROUTE_PARAMS_HEADER.encode(), BINDINGS_HEADER.encode(),
                    KILL_HEADER.encode()}

log = logging.getLogger("hostdouble.worker")


@dataclass
class FunctionInfo:
    """What the host needs to know about one indexed function (sent in the ready line)."""

    name: str
    trigger: str
    trigger_param: str
    durable_name: str | None = None
    route: str | None = None
    methods: list[str] | None = None
    auth_level: str | None = None
    schedule: str | None = None
    run_on_startup: bool = False
    use_monitor: bool = True
    client_params: list[str] = field(default_factory=list)
    is_async: bool = False
    func: Any = None

    def meta(self) -> dict[str, Any]:
        return {
            "name": self.name, "trigger": self.trigger, "trigger_param": self.trigger_param,
            "durable_name": self.durable_name, "route": self.route, "methods": self.methods,
            "auth_level": self.auth_level, "client_params": self.client_params, "is_async": self.is_async,
            "schedule": self.schedule, "run_on_startup": self.run_on_startup, "use_monitor": self.use_monitor,
        }


class InvocationContext:
    """Stand-in for ``azure.functions.Context`` for user functions that declare a ``context`` parameter."""

    def __init__(self, invocation_id: str, function_name: str, directory: str) -> None:
        self.invocation_id = invocation_id
        self.function_name = function_name
        self.function_directory = directory
        self.trace_context = None
        self.retry_context = None
        self.thread_local_storage = threading.local()


def index_app(app_dir: str, script: str) -> list[FunctionInfo]:
    """Import the script and index its functions like the worker (``FunctionRegister.get_functions``)."""
    from azure.functions import FunctionRegister

    if app_dir not in sys.path:
        sys.path.insert(0, app_dir)
    module = importlib.import_module(Path(script).stem)
    # Same rule as azure_functions_runtime.loader.index_function_app: exactly one top-level attribute.
    apps = [getattr(module, n) for n in dir(module) if isinstance(getattr(module, n, None), FunctionRegister)]
    if len(apps) > 1:
        raise ValueError(f"More than one {type(apps[0]).__name__} or other top level function app instances "
                         "are defined.")
    if not apps:
        raise ValueError(f"Could not find top level function app instances in {script}.")
    functions = [_describe(f) for f in apps[0].get_functions()]
    names = [f.name for f in functions]
    duplicates = {n for n in names if names.count(n) > 1}
    if duplicates:
        raise RuntimeError(f"duplicate function names: {sorted(duplicates)}")
    return functions


def _describe(f: Any) -> FunctionInfo:
    bindings = [json.loads(b) for b in f.get_raw_bindings()]
    trigger = next((b for b in bindings if b["type"].lower().endswith("trigger")), None)
    if trigger is None:
        raise RuntimeError(f"function {f.get_function_name()} has no trigger")
    user = f.get_user_function()
    info = FunctionInfo(
        name=f.get_function_name(), trigger=trigger["type"], trigger_param=trigger["name"], func=user,
        is_async=inspect.iscoroutinefunction(user),
        client_params=[b["name"] for b in bindings if b["type"] == "durableClient"],
    )
    if trigger["type"] == "httpTrigger":
        info.route = trigger.get("route") or info.name
        info.methods = trigger.get("methods")
        info.auth_level = trigger.get("authLevel")
    elif trigger["type"] == "orchestrationTrigger":
        info.durable_name = trigger.get("orchestration") or info.name
    elif trigger["type"] == "activityTrigger":
        info.durable_name = trigger.get("activity") or info.name
    elif trigger["type"] == "entityTrigger":
        info.durable_name = (trigger.get("entityName") or info.name).lower()
    elif trigger["type"] == "timerTrigger":
        info.schedule = trigger.get("schedule")
        info.run_on_startup = bool(trigger.get("runOnStartup", False))
        info.use_monitor = bool(trigger.get("useMonitor", True))
    return info


def _kill_if_asked(headers: Any) -> None:
    """The host planned a crash inside this invocation: SIGKILL ourselves after the given delay.

    A thread, so the kill lands even while synchronous user code holds the event loop."""
    delay = headers.get(KILL_HEADER)
    if delay is None:
        return
    timer = threading.Timer(max(0.0, float(delay)), lambda: os.kill(os.getpid(), signal.SIGKILL))
    timer.daemon = True
    timer.start()


def _wants_context(func: Any, bound: dict[str, Any]) -> bool:
    try:
        params = inspect.signature(func).parameters
    except (TypeError, ValueError):
        return False
    return "context" in params and "context" not in bound


_sync_pool: concurrent.futures.ThreadPoolExecutor | None = None


async def run_sync(func: Callable[..., Any], /, **kwargs: Any) -> Any:
    """Run a synchronous function as the Python worker does: on its thread pool, off the event loop.

    (azure-functions-python-worker ``dispatcher.py``: ``loop.run_in_executor(self._sync_call_tp, ...)``, a
    ``ThreadPoolExecutor`` sized by ``PYTHON_THREADPOOL_THREAD_COUNT``; unset on Python 3.9+: its default.)
    """
    global _sync_pool
    if _sync_pool is None:
        size = os.environ.get("PYTHON_THREADPOOL_THREAD_COUNT")
        _sync_pool = concurrent.futures.ThreadPoolExecutor(max_workers=int(size) if size else None,
                                                           thread_name_prefix="sync-invocation")
    call = functools.partial(contextvars.copy_context().run, func, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(_sync_pool, call)


async def _call(info: FunctionInfo, kwargs: dict[str, Any], invocation_id: str, app_dir: str) -> Any:
    if _wants_context(info.func, kwargs):
        kwargs["context"] = InvocationContext(invocation_id, info.name, app_dir)
    if info.is_async:
        return await info.func(**kwargs)
    result = await run_sync(info.func, **kwargs)
    if inspect.isawaitable(result):
        return await result
    return result


Invocation = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


def build_app(functions: dict[str, FunctionInfo], app_dir: str) -> tuple[Any, dict[str, Invocation]]:
    """The worker's HTTP app (HTTP-triggered functions, health) and its invocation handlers by kind."""
    from azure.functions import meta
    from azure.functions.durable_functions import (
        ActivityTriggerConverter,
        EnitityTriggerConverter,
        OrchestrationTriggerConverter,
    )
    from azure.functions.timer import TimerRequestConverter
    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)

    def lookup(name: str, trigger: str) -> FunctionInfo:
        info = functions.get(name)
        if info is None or info.trigger != trigger:
            raise KeyError(f"no {trigger} function named {name!r}")
        return info

    @app.get("/_hostdouble/health")
    async def health() -> dict[str, Any]:
        return {"ok": True, "pid": os.getpid()}

    async def orchestrator(body: dict[str, Any]) -> dict[str, Any]:
        try:
            info = lookup(body["function"], "orchestrationTrigger")
            ctx = OrchestrationTriggerConverter.decode(meta.Datum(body["context"], "json"), trigger_metadata=None)
            result = await run_sync(info.func, **{info.trigger_param: ctx})
            return {"ok": True, "result": result}
        except Exception as exc:  # the SDK reports orchestrator failures as exceptions
            return {"ok": False, "error": str(exc) or type(exc).__name__}

    async def activity(body: dict[str, Any]) -> dict[str, Any]:
        try:
            info = lookup(body["function"], "activityTrigger")
            raw = body.get("input")
            value = ActivityTriggerConverter.decode(
                meta.Datum("null" if raw is None else raw, "json"), trigger_metadata=None)
            kwargs = {info.trigger_param: value, **body.get("bindings", {})}
            result = await _call(info, kwargs, body.get("invocation_id", ""), app_dir)
            encoded = ActivityTriggerConverter.encode(result, expected_type=None).value
            return {"ok": True, "result": encoded}
        except Exception as exc:  # as the Python worker serializes it (RpcException message + stack)
            return {"ok": False, "error": f"{type(exc).__name__}: {exc}", "stack": traceback.format_exc()}

    async def entity(body: dict[str, Any]) -> dict[str, Any]:
        try:
            info = lookup(body["function"], "entityTrigger")
            ctx = EnitityTriggerConverter.decode(meta.Datum(body["context"], "json"), trigger_metadata=None)
            result = await run_sync(info.func, **{info.trigger_param: ctx})
            return {"ok": True, "result": result}
        except Exception as exc:
            return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}

    async def timer(body: dict[str, Any]) -> dict[str, Any]:
        try:
            info = lookup(body["function"], "timerTrigger")
            value = TimerRequestConverter.decode(meta.Datum(json.dumps(body["timer"]), "json"), trigger_metadata=None)
            kwargs = {info.trigger_param: value, **body.get("bindings", {})}
            await _call(info, kwargs, body.get("invocation_id", ""), app_dir)
            return {"ok": True}
        except Exception as exc:
            return {"ok": False, "error": f"{type(exc).__name__}: {exc}", "stack": traceback.format_exc()}

    @app.api_route("/{path:path}", methods=["GET", "POST", "PUT", "DELETE", "OPTIONS", "HEAD", "PATCH", "TRACE"])
    async def catch_all(request: Request):  # type: ignore[no-untyped-def]
        headers = request.headers
        name = headers.get(FUNCTION_HEADER)
        invocation_id = headers.get(INVOCATION_HEADER)
        if name is None or invocation_id is None:
            return JSONResponse({"error": "missing invocation headers"}, status_code=400)
        _kill_if_asked(headers)
        info = lookup(name, "httpTrigger")
        route_params = json.loads(headers.get(ROUTE_PARAMS_HEADER, "{}"))
        bindings = json.loads(headers.get(BINDINGS_HEADER, "{}"))
        # What the user sees: the proxied request without the double's private headers.
        request.scope["headers"] = [(k, v) for k, v in request.scope["headers"] if k not in _PRIVATE_HEADERS]
        request.__dict__.pop("_headers", None)
        # RequestSynchronizer.sync_route_params of azurefunctions-extensions-http-fastapi
        request.path_params.clear()
        request.path_params.update(route_params)
        kwargs = {info.trigger_param: request, **bindings}
        return await _call(info, kwargs, invocation_id, app_dir)

    return app, {"orchestrator": orchestrator, "activity": activity, "entity": entity, "timer": timer}


def invocation_handler(invocations: dict[str, Invocation]) -> Handler:
    """What the worker's end of the event stream runs for each invocation: its kind's handler (a kill
    planned by the host is armed first)."""

    async def handle(kind: str, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        _kill_if_asked(headers)
        return await invocations[kind](body)

    return handle


def _die_with_parent() -> None:
    """SIGKILL this process when the host dies (Linux); where the kernel cannot do that, a polling fallback
    (a thread that wakes every second: ~0.1 ms of CPU per second on an idle 2-core VM, so not without need)."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        if libc.prctl(1, signal.SIGKILL) == 0:  # PR_SET_PDEATHSIG
            return
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(3)

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()


async def serve(app_dir: str, script: str, stream_fds: tuple[int, int]) -> None:
    functions = {f.name: f for f in index_app(app_dir, script)}
    app, invocations = build_app(functions, app_dir)
    reader, writer = await open_pipes(*stream_fds)
    stream = asyncio.create_task(serve_worker_stream(reader, writer, invocation_handler(invocations)))
    sock = loopback_socket(0)
    port = sock.getsockname()[1]
    # Keep idle connections longer than the host's pool does, so the host never reuses a closing one.
    _, task = await start_server(app, sock, keep_alive_s=120, graceful_s=1)
    ready = {"port": port, "pid": os.getpid(), "functions": [f.meta() for f in functions.values()]}
    print(WORKER_READY_PREFIX + json.dumps(ready), flush=True)
    await asyncio.wait([task, stream], return_when=asyncio.FIRST_COMPLETED)
    if stream.done():  # the host's end of the event stream closed: the host is gone, so is its worker
        os._exit(0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.hostdouble.worker")
    parser.add_argument("--app-dir", required=True)
    parser.add_argument("--script", default=os.environ.get("PYTHON_SCRIPT_FILE_NAME", "function_app.py"))
    parser.add_argument("--stream-fds", required=True, help="READ,WRITE: the pipe ends of the host's event stream")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    _die_with_parent()
    hide_test_tools()  # the app imports what a deployed app has (deployed.py)
    app_dir = str(Path(args.app_dir).resolve())
    os.chdir(app_dir)
    with contextlib.suppress(KeyboardInterrupt):
        read_fd, write_fd = (int(fd) for fd in args.stream_fds.split(","))
        asyncio.run(serve(app_dir, args.script, (read_fd, write_fd)))


if __name__ == "__main__":
    main()
