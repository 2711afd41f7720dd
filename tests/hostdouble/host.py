"""The host process of the double: public HTTP server, reverse proxy to the worker, Durable HTTP API.

Public surface on ``127.0.0.1:PORT``:

* ``/<routePrefix>/<route>``: every HTTP function of the app (host.json ``extensions.http.routePrefix``,
  default ``api``), reverse-proxied to the worker and streamed back chunk by chunk;
* ``/runtime/webhooks/durabletask/...``: the subset of the Durable Functions HTTP API the Python
  ``DurableOrchestrationClient`` calls (its binding's ``rpcBaseUrl`` points here), plus
  ``_double/stats`` (GET) and ``_double/kill-worker`` (POST) for tests.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from .engine import TERMINAL, DurableEngine, Instance, InstanceConflict, UnknownFunction
from .protocol import BINDINGS_HEADER, DURABLE_PREFIX, FUNCTION_HEADER, INVOCATION_HEADER, ROUTE_PARAMS_HEADER
from .routes import RouteError, Router
from .supervisor import WorkerSupervisor, post_json

_HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer",
               "upgrade", "host", "content-length"}
_DROP_RESPONSE = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer",
                  "upgrade", "date", "server"}
# YARP's ActivityTimeout as configured by the Functions host's HTTP proxy (DefaultHttpProxyService).
PROXY_IDLE_TIMEOUT = 240.0


class WorkerLost(Exception):
    """The worker died while a proxied response was streaming: the client connection is aborted."""


class _QuietWorkerLost(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], WorkerLost))


def log(message: str) -> None:
    print(f"[hostdouble] {message}", file=sys.stderr, flush=True)


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


def load_host_json(app_dir: str) -> dict[str, Any]:
    path = Path(app_dir) / "host.json"
    if not path.exists():
        return {}
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


class Host:
    def __init__(self, app_dir: str, port: int, script: str = "function_app.py") -> None:
        self.app_dir = app_dir
        self.port = port
        self.public_url = f"http://127.0.0.1:{port}"
        host_json = load_host_json(app_dir)
        extensions = host_json.get("extensions", {})
        self.route_prefix = str(extensions.get("http", {}).get("routePrefix", "api")).strip("/")
        self.task_hub = str(extensions.get("durableTask", {}).get("hubName") or "TestHubName")
        self.supervisor = WorkerSupervisor(app_dir, script, log)
        self.engine = DurableEngine(self, log)
        # Pooled connections expire well before the worker's keep-alive timeout (see worker.serve).
        self.client = httpx.AsyncClient(limits=httpx.Limits(max_connections=1000, max_keepalive_connections=100,
                                                            keepalive_expiry=20.0))
        self.router = Router()
        self.function_errors: dict[str, str] = {}
        self._indexed_generation = 0
        self._functions: dict[str, dict[str, Any]] = {}
        logging.getLogger("uvicorn.error").addFilter(_QuietWorkerLost())

    # ------------------------------------------------------------------------------------------- lifecycle
    async def startup(self) -> None:
        await self.supervisor.start()
        self._index()

    async def shutdown(self) -> None:
        await self.engine.close()
        await self.supervisor.stop()
        await self.client.aclose()

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

    # ------------------------------------------------------------------------------------------ worker calls
    async def _call_worker(self, path: str, payload: dict[str, Any], on_attempt: Any = None) -> dict[str, Any]:
        """POST to the worker; survives worker deaths by waiting for the next worker and sending again.

        ``on_attempt(redelivery: bool)`` is called for every attempt that may have reached a worker.
        """
        lost = False
        while True:
            generation, base = await self.supervisor.ready()
            try:
                answer = await post_json(self.client, base + path, payload)
            except httpx.ConnectError:
                await self.supervisor.wait_past(generation, 10.0)
                continue
            except httpx.TransportError:
                if not await self.supervisor.wait_past(generation, 10.0):
                    continue  # worker alive: a stale pooled connection, the request never ran
                if on_attempt is not None:
                    on_attempt(lost)
                lost = True
                continue
            except httpx.HTTPStatusError as exc:
                answer = {"ok": False, "error": f"worker answered HTTP {exc.response.status_code}",
                          "reason": f"worker answered HTTP {exc.response.status_code}",
                          "details": exc.response.text[:2000]}
            if on_attempt is not None:
                on_attempt(lost)
            return answer

    async def run_orchestrator(self, name: str, context: str) -> dict[str, Any]:
        function = self.orchestrator_function(name)
        if function is None:
            return {"ok": False, "error": f"The function '{name}' doesn't exist, is disabled, or is not an "
                    "orchestrator function."}

        def attempt(redelivery: bool) -> None:
            if redelivery:
                self.engine.episode_reruns += 1

        return await self._call_worker("/_hostdouble/orchestrator", {"function": function, "context": context},
                                       attempt)

    async def run_activity(self, function: str, name: str, input_: Any, instance_id: str) -> dict[str, Any]:
        meta = self._functions.get(function, {})
        payload = {"function": function, "input": input_, "invocation_id": str(uuid.uuid4()),
                   "bindings": {p: self.client_binding() for p in meta.get("client_params", [])}}

        def attempt(redelivery: bool) -> None:
            self.engine.activity_deliveries[name] += 1
            if redelivery:
                self.engine.activity_redeliveries[name] += 1
                log(f"re-delivering activity '{name}' of instance {instance_id}")

        return await self._call_worker("/_hostdouble/activity", payload, attempt)

    async def run_entity(self, function: str, context: str) -> dict[str, Any]:
        def attempt(redelivery: bool) -> None:
            if redelivery:
                self.engine.entity_batch_reruns += 1

        return await self._call_worker("/_hostdouble/entity", {"function": function, "context": context}, attempt)

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
            return await self.durable_api(request, path[len(DURABLE_PREFIX):])
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
                return Response(status_code=404)
            path = path[len(self.route_prefix):]
        found = self.router.match(path, request.method)
        if found is None or "\n" in path:
            return _not_found(request.method, path)
        function, route_params = found
        meta = self._functions[function]
        body = await request.body()
        headers = _forward_headers(request)
        headers += [
            (INVOCATION_HEADER.encode(), str(uuid.uuid4()).encode()),
            (FUNCTION_HEADER.encode(), function.encode()),
            (ROUTE_PARAMS_HEADER.encode(), json.dumps(route_params).encode()),
            (BINDINGS_HEADER.encode(),
             json.dumps({p: self.client_binding() for p in meta.get("client_params", [])}).encode()),
        ]
        timeout = httpx.Timeout(None, connect=10.0, read=PROXY_IDLE_TIMEOUT)
        for _ in range(3):
            generation, base = await self.supervisor.ready(timeout=60.0)
            raw_path = request.scope.get("raw_path") or request.url.path.encode()
            url = base + raw_path.decode("latin-1") + (f"?{request.url.query}" if request.url.query else "")
            outgoing = self.client.build_request(request.method, url, headers=headers, content=body,
                                                 timeout=timeout)
            try:
                upstream = await self.client.send(outgoing, stream=True)
                break
            except httpx.ConnectError:
                await self.supervisor.wait_past(generation, 10.0)
            except httpx.TimeoutException:
                return Response(status_code=504)  # no response headers within the proxy's idle timeout
            except httpx.TransportError as exc:
                if not await self.supervisor.wait_past(generation, 10.0):
                    continue  # worker alive: a stale pooled connection, the request never ran
                log(f"proxied request {request.method} /{path} lost: worker gone ({exc!r})")
                return Response(status_code=502)
        else:
            return Response(status_code=502)

        async def stream() -> Any:
            try:
                async for chunk in upstream.aiter_raw():
                    yield chunk
            except httpx.TransportError as exc:
                log(f"proxied response {request.method} /{path} aborted (worker gone, or idle for "
                    f"{PROXY_IDLE_TIMEOUT:.0f} s): {exc!r}")
                raise WorkerLost(str(exc)) from exc
            finally:
                await upstream.aclose()

        response = StreamingResponse(stream(), status_code=upstream.status_code)
        response.raw_headers = [(k, v) for k, v in upstream.headers.raw
                                if k.decode("latin-1").lower() not in _DROP_RESPONSE]
        return response

    # ------------------------------------------------------------------------------------------ durable API
    async def durable_api(self, request: Request, path: str) -> Response:
        parts = [p for p in path.strip("/").split("/") if p != ""]
        method = request.method
        if not parts:
            return JSONResponse({"Message": "No such API"}, status_code=400)
        head = parts[0].lower()
        if head == "_double":
            return await self._double_api(request, parts[1:])
        if head == "orchestrators" and method == "POST" and len(parts) in (2, 3):
            return await self._start(request, parts[1], parts[2] if len(parts) == 3 else None)
        if head == "entities" and len(parts) >= 2 and method in ("GET", "POST"):
            key = "/".join(parts[2:]) if len(parts) > 2 else ""
            if method == "GET":
                return self._get_entity(parts[1], key)
            return await self._signal_entity(request, parts[1], key)
        if head == "instances":
            if len(parts) == 1 and method == "GET":
                return self._list_instances(request)
            if len(parts) == 2 and method == "GET":
                return self._status(request, parts[1])
            if len(parts) == 2 and method == "DELETE":
                if self.engine.purge(parts[1]):
                    return JSONResponse({"instancesDeleted": 1})
                return Response(status_code=404)
            if len(parts) == 3 and method == "POST" and parts[2].lower() == "terminate":
                return self._terminate(request, parts[1])
            if len(parts) == 4 and method == "POST" and parts[2].lower() == "raiseevent":
                return await self._raise_event(request, parts[1], parts[3])
            if len(parts) == 3 and method == "POST":
                return JSONResponse({"Message": f"'{parts[2]}' is not supported by the host double"},
                                    status_code=501)
        return JSONResponse({"Message": "No such API"}, status_code=400)

    async def _double_api(self, request: Request, parts: list[str]) -> Response:
        if parts == ["stats"] and request.method == "GET":
            return JSONResponse(self.stats())
        if parts == ["kill-worker"] and request.method == "POST":
            return JSONResponse({"killed_pid": self.supervisor.kill()})
        return Response(status_code=404)

    def stats(self) -> dict[str, Any]:
        return {
            "worker_pid": self.supervisor.pid,
            "worker_generation": self.supervisor.generation,
            "worker_restarts": self.supervisor.restarts,
            "worker_exit_codes": self.supervisor.exit_codes,
            "worker_ready": self.supervisor.base_url is not None,
            "function_errors": self.function_errors,
            "functions": sorted(self._functions),
            **self.engine.stats(),
        }

    async def _start(self, request: Request, name: str, instance_id: str | None) -> Response:
        raw = await request.body()
        try:
            input_ = json.loads(raw) if raw.strip() else None
        except json.JSONDecodeError as exc:
            return JSONResponse({"Message": "Invalid JSON content", "ExceptionMessage": str(exc)}, status_code=400)
        try:
            inst = self.engine.start(name, instance_id, input_, request.query_params.get("version", ""))
        except UnknownFunction as exc:
            return JSONResponse({"Message": "One or more of the arguments submitted is incorrect",
                                 "ExceptionMessage": str(exc), "ExceptionType": "System.ArgumentException"},
                                status_code=400)
        except InstanceConflict as exc:
            return JSONResponse({"Message": "Something went wrong while processing your request",
                                 "ExceptionMessage": str(exc),
                                 "ExceptionType": "System.InvalidOperationException"}, status_code=500)
        payload = self.management_payload(inst.instance_id)
        return JSONResponse(payload, status_code=202,
                            headers={"Location": payload["statusQueryGetUri"], "Retry-After": "10"})

    def _status(self, request: Request, instance_id: str) -> Response:
        inst = self.engine.instances.get(instance_id)
        if inst is None:
            return Response(status_code=404)
        query = request.query_params
        body = inst.payload(show_input=query.get("showInput", "true").lower() != "false",
                            show_history=query.get("showHistory", "false").lower() == "true")
        if inst.status in ("Pending", "Running"):
            return JSONResponse(body, status_code=202,
                                headers={"Location": str(request.url), "Retry-After": "5"})
        return JSONResponse(body, status_code=500 if inst.status == "Failed" else 200)

    def _list_instances(self, request: Request) -> Response:
        query = request.query_params
        statuses = {s for s in query.get("runtimeStatus", "").split(",") if s}
        prefix = query.get("instanceIdPrefix", "")
        result = [i.payload(show_input=query.get("showInput", "true").lower() != "false")
                  for i in self.engine.instances.values()
                  if (not statuses or i.status in statuses) and i.instance_id.startswith(prefix)]
        return JSONResponse(result)

    def _active(self, instance_id: str) -> tuple[Instance | None, Response | None]:
        inst = self.engine.instances.get(instance_id)
        if inst is None:
            return None, Response(status_code=404)
        if inst.status in TERMINAL:
            return None, Response(status_code=410)
        return inst, None

    def _terminate(self, request: Request, instance_id: str) -> Response:
        inst, error = self._active(instance_id)
        if inst is None:
            return error  # type: ignore[return-value]
        self.engine.terminate(inst, request.query_params.get("reason"))
        return Response(status_code=202)

    async def _raise_event(self, request: Request, instance_id: str, event_name: str) -> Response:
        inst, error = self._active(instance_id)
        if inst is None:
            return error  # type: ignore[return-value]
        media = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if media != "application/json":
            return JSONResponse({"Message": "Only application/json request content is supported"}, status_code=400)
        raw = await request.body()
        try:
            data = json.loads(raw) if raw.strip() else None
        except json.JSONDecodeError as exc:
            return JSONResponse({"Message": "Invalid JSON content", "ExceptionMessage": str(exc)}, status_code=400)
        self.engine.raise_event(inst, event_name, data)
        return Response(status_code=202)

    def _get_entity(self, name: str, key: str) -> Response:
        record = self.engine.read_entity(name, key)
        if record is None:
            return Response(status_code=404)
        return JSONResponse(None if record.state is None else json.loads(record.state))

    async def _signal_entity(self, request: Request, name: str, key: str) -> Response:
        operation = request.query_params.get("op", "")
        raw = await request.body()
        if not raw:
            batch_input = None
        else:
            media = request.headers.get("content-type", "").split(";")[0].strip().lower()
            if media == "application/json":
                try:
                    batch_input = json.dumps(json.loads(raw))
                except json.JSONDecodeError as exc:
                    return JSONResponse({"Message": f"Could not parse JSON content: {exc}"}, status_code=400)
            else:
                batch_input = json.dumps(raw.decode())
        self.engine.signal_entity(name, key, operation, batch_input)
        return Response(status_code=202)
