"""The host process of the double: public HTTP server, reverse proxy to the worker, Durable runtime and
HTTP API, timer triggers.

Public surface on ``127.0.0.1:PORT``:

* ``/<routePrefix>/<route>``: every HTTP function of the app (host.json ``extensions.http.routePrefix``,
  default ``api``), reverse-proxied to the worker and streamed back chunk by chunk. Each request is one
  invocation: it waits while the worker restarts, counts against ``functionTimeout`` until its body is
  copied, and fails with a 500 (empty body) when the worker dies before the response started;
* ``/runtime/webhooks/durabletask/...``: the Durable HTTP API (``durable_api.py``), plus the double's test
  hooks ``_double/stats`` (GET), ``_double/kill-worker`` (POST), ``_double/semantics`` (POST).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from . import config as host_config
from .durable.runtime import DurableRuntime
from .durable_api import DurableApi
from .failures import Outcome
from .forwarding import BrokenStream, FailedBeforeHeaders, Forwarder, NoHeadersInTime
from .protocol import (
    BINDINGS_HEADER,
    DURABLE_PREFIX,
    FUNCTION_HEADER,
    INSTANCE_SETTING,
    INVOCATION_HEADER,
    ROUTE_PARAMS_HEADER,
)
from .routes import RouteError, Router
from .supervisor import KILL_TARGETS, HostIsStopping, KillPlan, WorkerSupervisor
from .timers import TimerScheduler

_HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer",
               "upgrade", "host", "content-length"}
_DROP_RESPONSE = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer",
                  "upgrade", "date", "server"}
# YARP's ActivityTimeout as configured by the Functions host's HTTP proxy (DefaultHttpProxyService).
PROXY_IDLE_TIMEOUT = 240.0
# Counters that survive a host recycle (the platform hands them from one host to the next).
CUMULATIVE = ("worker_restarts", "worker_exit_codes", "activity_deliveries", "activity_redeliveries",
              "activity_completions", "activity_failures_worker_exit", "activity_timeouts",
              "activity_sends_before_a_failed_checkpoint", "episodes",
              "episodes_failed_worker_exit", "episodes_aborted", "episode_reruns", "entity_batches",
              "entity_batches_aborted", "entity_batch_reruns", "kills", "held_requests", "timeouts")


class WorkerLost(Exception):
    """The worker died (or timed out) while a proxied response was streaming: the client connection is aborted."""


class _QuietWorkerLost(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], WorkerLost))


# one of several instances behind the platform's front end: its lines say which
_LOG_PREFIX = f"[hostdouble {os.environ[INSTANCE_SETTING]}]" if os.environ.get(INSTANCE_SETTING) else "[hostdouble]"


def log(message: str) -> None:
    print(f"{_LOG_PREFIX} {message}", file=sys.stderr, flush=True)


def _forward_headers(request: Request) -> list[tuple[bytes, bytes]]:
    """The request headers for the worker, byte for byte (minus hop-by-hop ones).

    Header values may hold any byte but control characters (obs-text, RFC 9110 5.5). The real host's
    Kestrel takes UTF-8 values and refuses other non-ASCII bytes with an empty 400; the double passes every
    byte on and lets the app answer. (Decoding them to ``str`` and letting httpx encode them as ASCII made
    the double answer 500 for ``Last-Event-ID: ５`` or ``X-Anything: é``.)"""
    return [(name, value) for name, value in request.scope["headers"]
            if name.decode("latin-1").lower() not in _HOP_BY_HOP]


def _not_found(method: str, path: str) -> Response:
    """404 for a path under the API that no function takes, in the OpenAI error shape the app uses.

    The real host answers an empty 404 here. A decoded line break in the path also ends here: the
    worker's catch-all route (FastAPI ``/{path:path}``, in the real worker too) cannot match it, and the
    app would answer this very 404 for such an id."""
    message = f"No API route matches {method} {('/' + path.strip('/'))[:200]!r}."
    return JSONResponse({"error": {"message": message, "type": "invalid_request_error", "code": "not_found",
                                   "param": None}}, status_code=404, headers={"x-should-retry": "false"})


def _merge_counts(old: Any, new: Any) -> Any:
    if isinstance(old, dict) and isinstance(new, dict):
        return {k: old.get(k, 0) + new.get(k, 0) for k in set(old) | set(new)}
    if isinstance(old, list) and isinstance(new, list):
        return old + new
    if isinstance(old, int | float) and isinstance(new, int | float):
        return old + new
    return new


class Host:
    def __init__(self, app_dir: str, port: int, script: str = "function_app.py", *, semantics: str = "real",
                 host_generation: int = 1, state_file: str | None = None) -> None:
        self.app_dir = app_dir
        self.port = port
        self.public_url = f"http://127.0.0.1:{port}"
        self.log = log
        self.config = host_config.load(app_dir)
        self.route_prefix = self.config.route_prefix
        self.task_hub = self.config.durable.hub_name
        self.semantics = semantics
        self.host_generation = host_generation
        self.state_file = state_file
        self.carried = self._load_carried()
        self.stopped: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        connection = os.environ.get("AzureWebJobsStorage", "")
        if not connection:
            raise SystemExit("host double: AzureWebJobsStorage is not set. Durable state lives in a storage account "
                             "(UseDevelopmentStorage=true for Azurite), as with the real host.")
        self.supervisor = WorkerSupervisor(app_dir, script, log, function_timeout=self.config.function_timeout,
                                           semantics=semantics, on_host_stop=self.request_stop)
        self.runtime = DurableRuntime(self, self.config.durable, connection, log)
        self.api = DurableApi(self)
        tree = host_config.read_host_json(app_dir)  # host.json's singleton section (SingletonOptions)
        lock_period = host_config._get(tree, "singleton", "listenerLockPeriod") or "00:01:00"
        lock_recovery = host_config._get(tree, "singleton", "listenerLockRecoveryPollingInterval") or "00:01:00"
        self.instance = os.environ.get(INSTANCE_SETTING) or None  # one of several behind the platform's front end
        self.timers = TimerScheduler(
            self.runtime.storage, self.config.host_id, log, self._invoke_timer, singleton=self.instance is not None,
            lock_period=host_config.parse_timespan(lock_period, "singleton.listenerLockPeriod"),
            lock_recovery=host_config.parse_timespan(lock_recovery, "singleton.listenerLockRecoveryPollingInterval"))
        self.forwarder = Forwarder(PROXY_IDLE_TIMEOUT)  # HTTP functions' requests, on to the worker
        self.router = Router()
        self.function_errors: dict[str, str] = {}
        self.episode_reruns = 0
        self.entity_batch_reruns = 0
        self._indexed_generation = 0
        self._functions: dict[str, dict[str, Any]] = {}
        logging.getLogger("uvicorn.error").addFilter(_QuietWorkerLost())

    def _load_carried(self) -> dict[str, Any]:
        if not self.state_file or not Path(self.state_file).exists():
            return {}
        try:
            loaded: dict[str, Any] = json.loads(Path(self.state_file).read_text())
        except (OSError, ValueError):
            return {}
        return loaded

    # ------------------------------------------------------------------------------------------- lifecycle
    async def startup(self) -> None:
        await self.supervisor.start()
        self._index()
        await self.runtime.open()
        await self.timers.start(list(self._functions.values()))
        self.log(f"task hub {self.task_hub}: partitions {sorted(self.runtime.owned)} of "
                 f"{self.config.durable.partition_count} owned (worker id {self.config.durable.worker_id})")

    def request_stop(self, reason: str) -> None:
        """The host stops itself (restart limit, initialization timeout): the platform starts a new one."""
        if not self.stopped.done():
            self.supervisor.stopping()
            self.stopped.set_result(reason)

    async def drain(self) -> None:
        """Drain mode (``DrainModeManager.EnableDrainModeAsync``): the listeners stop (timers, Durable
        pollers) before running HTTP requests get their shutdown timeout."""
        await self.timers.stop()
        self.runtime.stop_taking_work()

    async def shutdown(self, graceful: bool = True) -> None:
        await self.timers.stop()
        await self.supervisor.stop()
        await self.runtime.close(graceful=graceful)
        await self.forwarder.aclose()
        self._save_carried()

    def _save_carried(self) -> None:
        if not self.state_file:
            return
        stats = self.stats()
        carried = {key: stats[key] for key in CUMULATIVE if key in stats}
        Path(self.state_file).write_text(json.dumps(carried))

    def _index(self) -> None:
        """(Re)build the routing table from the worker's indexing (once per worker generation)."""
        if self._indexed_generation == self.supervisor.generation:
            return
        self._indexed_generation = self.supervisor.generation
        router, errors = Router(), {}
        functions = {f["name"]: f for f in self.supervisor.functions}
        for f in functions.values():
            if f["trigger"] != "httpTrigger":
                continue
            try:
                router.add(f["name"], f["route"], f["methods"])
            except RouteError as exc:
                errors[f["name"]] = str(exc)
                if self.function_errors.get(f["name"]) != str(exc):
                    log(f"function '{f['name']}' is in error: {exc} (route {f['route']!r})")
        self.router, self.function_errors, self._functions = router, errors, functions

    def _durable_function(self, trigger: str, name: str) -> dict[str, Any] | None:
        self._index()
        for f in self._functions.values():
            if f["trigger"] == trigger and str(f["durable_name"]).lower() == name.lower():
                return f
        return None

    def orchestrator_function(self, name: str) -> str | None:
        f = self._durable_function("orchestrationTrigger", name)
        return f["name"] if f else None

    def activity_function(self, name: str) -> str | None:
        f = self._durable_function("activityTrigger", name)
        return f["name"] if f else None

    def entity_function(self, name: str) -> str | None:
        f = self._durable_function("entityTrigger", name)
        return f["name"] if f else None

    # ---------------------------------------------------------------------------------------- durable client
    def client_binding(self) -> str:
        """The ``durableClient`` input binding value, as the extension passes it (a JSON string)."""
        base = f"{self.public_url}/{DURABLE_PREFIX}"
        query = f"taskHub={quote(self.task_hub)}&connection=Storage"
        instance = f"{base}instances/INSTANCEID"
        return json.dumps({
            "taskHubName": self.task_hub,
            "creationUrls": {
                "createNewInstancePostUri": f"{base}orchestrators/{{functionName}}[/{{instanceId}}]?{query}",
                "createAndWaitOnNewInstancePostUri":
                    f"{base}orchestrators/{{functionName}}[/{{instanceId}}]?timeout={{timeoutInSeconds}}"
                    f"&pollingInterval={{intervalInSeconds}}&{query}",
            },
            "managementUrls": self._management_urls("INSTANCEID", instance, query),
            "baseUrl": base.rstrip("/"),
            "requiredQueryStringParameters": query,
            "rpcBaseUrl": base,
            "httpBaseUrl": base.rstrip("/"),
            "maxGrpcMessageSizeInBytes": 0,
            "grpcHttpClientTimeout": "00:01:40",
        })

    @staticmethod
    def _management_urls(instance_id: str, instance: str, query: str) -> dict[str, str]:
        return {
            "id": instance_id,
            "statusQueryGetUri": f"{instance}?{query}",
            "sendEventPostUri": f"{instance}/raiseEvent/{{eventName}}?{query}",
            "terminatePostUri": f"{instance}/terminate?reason={{text}}&{query}",
            "rewindPostUri": f"{instance}/rewind?reason={{text}}&{query}",
            "purgeHistoryDeleteUri": f"{instance}?{query}",
            "restartPostUri": f"{instance}/restart?{query}",
            "suspendPostUri": f"{instance}/suspend?reason={{text}}&{query}",
            "resumePostUri": f"{instance}/resume?reason={{text}}&{query}",
        }

    def management_payload(self, instance_id: str) -> dict[str, str]:
        base = f"{self.public_url}/{DURABLE_PREFIX}"
        query = f"taskHub={quote(self.task_hub)}&connection=Storage"
        return self._management_urls(instance_id, f"{base}instances/{quote(instance_id)}", query)

    def _bindings(self, function: str) -> dict[str, str]:
        meta = self._functions.get(function, {})
        return {p: self.client_binding() for p in meta.get("client_params", [])}

    # --------------------------------------------------------------------------- invocations (HostPort)
    async def invoke_orchestrator(self, function: str, instance_id: str, context: str) -> Outcome:
        def attempt(redelivery: bool) -> None:
            self.episode_reruns += int(redelivery)

        name = self._functions.get(function, {}).get("durable_name")
        return await self.supervisor.call(
            "orchestrator", function, name, instance_id,
            lambda inv: inv.stream.call(inv.id, "orchestrator",
                                  {"function": function, "context": context}, inv.headers), attempt)

    async def invoke_activity(self, function: str, name: str, instance_id: str, input_: Any,
                              on_attempt: Any) -> Outcome:
        return await self.supervisor.call(
            "activity", function, name, instance_id,
            lambda inv: inv.stream.call(inv.id, "activity",
                                  {"function": function, "input": input_, "invocation_id": inv.id,
                                   "bindings": self._bindings(function)}, inv.headers), on_attempt)

    async def invoke_entity(self, function: str, entity_id: str, context: str) -> Outcome:
        def attempt(redelivery: bool) -> None:
            self.entity_batch_reruns += int(redelivery)

        name = self._functions.get(function, {}).get("durable_name")
        return await self.supervisor.call(
            "entity", function, name, entity_id,
            lambda inv: inv.stream.call(inv.id, "entity",
                                  {"function": function, "context": context}, inv.headers), attempt)

    async def _invoke_timer(self, meta: dict[str, Any], timer: dict[str, Any]) -> Outcome:
        function = meta["name"]
        return await self.supervisor.call(
            "timer", function, function, None,
            lambda inv: inv.stream.call(inv.id, "timer",
                                  {"function": function, "timer": timer, "invocation_id": inv.id,
                                   "bindings": self._bindings(function)}, inv.headers))

    # -------------------------------------------------------------------------------------------- HTTP app
    def app(self) -> Starlette:
        methods = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "TRACE"]
        every_path = Route("/{path:path}", self.dispatch, methods=methods)
        # Starlette's "^/(?P<path>.*)$" misses a path with a decoded line break (answering a plain 404
        # before dispatch) and "$" lets a trailing one through: every path goes to dispatch.
        every_path.path_regex = re.compile(r"/(?P<path>.*)\Z", re.DOTALL)
        return Starlette(routes=[every_path])

    async def dispatch(self, request: Request) -> Response:
        # The decoded path exactly as received: ``request.url.path`` re-parses it as a URL, which drops
        # tabs and line breaks and ends it at a decoded "?" or "#" (so "/responses%0A" would route).
        path = str(request.scope["path"]).lstrip("/")
        if path.lower().startswith(DURABLE_PREFIX):
            return await self.api.handle(request, path[len(DURABLE_PREFIX):])
        if path.lower().startswith("admin/"):
            if path.lower() == "admin/host/status":
                return JSONResponse({"state": "Running", "version": "hostdouble"})
            return Response(status_code=404)
        return await self.proxy(request, path)

    async def proxy(self, request: Request, path: str) -> Response:
        self._index()
        if self.route_prefix:
            if not (path.lower() == self.route_prefix.lower() or
                    path.lower().startswith(self.route_prefix.lower() + "/")):
                return _not_found(request.method, path)
            path = path[len(self.route_prefix):]
        found = self.router.match(path, request.method)
        if found is None or "\n" in path:
            return _not_found(request.method, path)
        function, route_params = found
        body = await request.body()
        try:
            invocation = await self.supervisor.begin("http", function)
        except HostIsStopping:
            return Response(content=b"Function host is not running.", status_code=503)
        headers = _forward_headers(request)
        headers += [
            (INVOCATION_HEADER.encode(), invocation.id.encode()),
            (FUNCTION_HEADER.encode(), function.encode()),
            (ROUTE_PARAMS_HEADER.encode(), json.dumps(route_params).encode()),
            (BINDINGS_HEADER.encode(), json.dumps(self._bindings(function)).encode()),
            *((k.encode("latin-1"), v.encode("latin-1")) for k, v in invocation.headers.items()),
        ]
        raw_path = request.scope.get("raw_path") or request.url.path.encode()
        url = invocation.base_url + raw_path.decode("latin-1") + (f"?{request.url.query}" if request.url.query else "")
        while True:
            try:
                upstream = await self.forwarder.send(request.method, url, headers, body)
                break
            except NoHeadersInTime:
                self.supervisor.end(invocation)
                return Response(status_code=504)  # no response headers within the proxy's idle timeout
            except FailedBeforeHeaders as exc:
                if not invocation.outcome.done() and await self.supervisor.wait_alive(invocation):
                    continue  # worker alive: a stale pooled connection, the request never ran
                outcome = await invocation.outcome  # the worker died (or the invocation timed out)
                self.supervisor.end(invocation)
                log(f"proxied request {request.method} /{path} failed before its response started: "
                    f"{getattr(outcome, 'message', type(outcome).__name__)} ({exc}) → 500")
                return Response(status_code=500)  # ExceptionMiddleware: 500, empty body

        async def stream() -> Any:
            completed = False
            try:
                async for chunk in upstream.chunks:
                    yield chunk
                completed = invocation.finished_in_worker = True
            except BrokenStream as exc:
                log(f"proxied response {request.method} /{path} aborted (worker gone, or idle for "
                    f"{PROXY_IDLE_TIMEOUT:.0f} s): {exc}")
                raise WorkerLost(str(exc)) from exc
            finally:
                self.supervisor.end(invocation)
                await upstream.close(completed)

        response = StreamingResponse(stream(), status_code=upstream.status)
        response.raw_headers = [(k, v) for k, v in upstream.raw_headers
                                if k.decode("latin-1").lower() not in _DROP_RESPONSE]
        return response

    # ---------------------------------------------------------------------------------------- test hooks
    async def double_api(self, request: Request, parts: list[str]) -> Response:
        if parts == ["stats"] and request.method == "GET":
            return JSONResponse(self.stats())
        if parts == ["kill-worker"] and request.method == "POST":
            return self._kill(request)
        if parts == ["crash-host"] and request.method == "POST":
            return self._arm_host_crash(request)
        if parts == ["semantics"] and request.method == "POST":
            kind = request.query_params.get("kind_redelivery", "").lower()
            if kind not in ("true", "false"):
                return JSONResponse({"Message": "kind_redelivery=true|false"}, status_code=400)
            self.semantics = self.supervisor.semantics = "kind" if kind == "true" else "real"
            log(f"crash semantics now {self.semantics!r}")
            return JSONResponse({"semantics": self.semantics})
        return Response(status_code=404)

    def _kill(self, request: Request) -> Response:
        target = request.query_params.get("target", "now").lower()
        if target == "now":
            return JSONResponse({"target": "now", "killed_pid": self.supervisor.kill()})
        if target not in KILL_TARGETS:
            return JSONResponse({"Message": f"target must be now or one of {', '.join(KILL_TARGETS)}"},
                                status_code=400)
        try:
            delay = float(request.query_params.get("delay", "0"))
        except ValueError:
            return JSONResponse({"Message": "delay must be a number of seconds"}, status_code=400)
        plan = KillPlan(target, request.query_params.get("name") or None, max(0.0, delay))
        self.supervisor.arm_kill(plan)
        log(f"kill planned: during the next {target} invocation"
            f"{f' of {plan.name!r}' if plan.name else ''}, {plan.delay:.2f} s into it")
        return JSONResponse({"armed": {"target": plan.target, "name": plan.name, "delay": plan.delay}})

    def _arm_host_crash(self, request: Request) -> Response:
        """``at=checkpoint&name=<activity>&delay=<s>[&how=kill|storage]``: between the sends and the checkpoint
        of the next episode that schedules ``name``, the whole host dies (``kill``, the default) or the
        checkpoint's storage call fails (``storage``; see ``DurableRuntime``)."""
        name = request.query_params.get("name")
        if request.query_params.get("at") != "checkpoint" or not name:
            return JSONResponse({"Message": "at=checkpoint and name=<activity> are required"}, status_code=400)
        how = request.query_params.get("how", "kill")
        if how not in ("kill", "storage"):
            return JSONResponse({"Message": "how must be kill or storage"}, status_code=400)
        try:
            delay = max(0.0, float(request.query_params.get("delay", "0")))
        except ValueError:
            return JSONResponse({"Message": "delay must be a number of seconds"}, status_code=400)
        self.runtime.crash_before_checkpoint = (name, delay, how)
        fault = "the host dies" if how == "kill" else "its storage call fails"
        log(f"checkpoint fault armed: before the checkpoint of the next episode scheduling {name!r}, {fault} "
            f"{delay:.2f} s after its sends")
        return JSONResponse({"armed": {"at": "checkpoint", "name": name, "delay": delay, "how": how}})

    def stats(self) -> dict[str, Any]:
        supervisor = self.supervisor
        runtime = self.runtime.stats()
        own: dict[str, Any] = {
            "host_pid": os.getpid(),
            "worker_pid": supervisor.pid,
            "worker_generation": supervisor.generation,
            # a fresh host after a recycle starts a worker too: it counts as a restart (the last one died)
            "worker_restarts": supervisor.restarts + (1 if self.host_generation > 1 else 0),
            "worker_exit_codes": supervisor.exit_codes,
            "worker_ready": supervisor.base_url is not None,
            "worker_state": supervisor.state,
            "worker_errors_in_window": len(supervisor.error_times),
            "semantics": self.semantics,
            "function_timeout_s": None if self.config.function_timeout is None
            else self.config.function_timeout.total_seconds(),
            "function_errors": self.function_errors,
            "functions": sorted(self._functions),
            "episode_reruns": self.episode_reruns,
            "entity_batch_reruns": self.entity_batch_reruns,
            "kills": supervisor.kills,
            "kill_armed": None if supervisor.kill_plan is None else vars(supervisor.kill_plan),
            "held_requests": supervisor.held,
            "timeouts": supervisor.timeouts,
            "in_flight_invocations": [{"kind": i.kind, "function": i.function, "name": i.name,
                                       "instance_id": i.instance_id, "seconds": round(time.monotonic() - i.started, 3)}
                                      for i in supervisor.invocations.values()],
            "timer_runs": self.timers.runs,
            "timer_locks_held": sorted(self.timers.locks_held),
            "instance": self.instance,
            "worker_id": self.config.durable.worker_id,
            "host_generation": self.host_generation,
            "host_recycles": self.host_generation - 1,
            **runtime,
        }
        for key in CUMULATIVE:
            if key in self.carried and key in own:
                own[key] = _merge_counts(self.carried[key], own[key])
        return own
