"""The Durable Functions HTTP API under ``/runtime/webhooks/durabletask/``, answering as the extension's
``HttpApiHandler`` does (routes, status codes, bodies), over the double's runtime.

What the Python ``DurableOrchestrationClient`` calls: start (``POST orchestrators/{name}[/{id}]``), status
(``GET instances/{id}``), list (``GET instances``), purge (``DELETE instances/{id}``), ``raiseEvent``,
``terminate``, ``rewind``, ``restart``, entity signal (``POST entities/{name}/{key}?op=``) and state
(``GET entities/{name}/{key}``). Suspend/resume and purge-by-filter answer 501 (not modelled).
Plus the double's own test hooks under ``_double/`` (handled by the host).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .durable.history import ACTIVE, TERMINAL, status_time
from .durable.runtime import InstanceConflict, InvalidInstanceId, NotFailed, UnknownFunction

if TYPE_CHECKING:
    from .host import Host


def _error(status: int, message: str, error: Exception | None = None) -> JSONResponse:
    """``request.CreateErrorResponse``: ASP.NET's HttpError shape."""
    body: dict[str, Any] = {"Message": message}
    if error is not None:
        body.update({"ExceptionMessage": str(error), "ExceptionType": _dotnet_type(error)})
    return JSONResponse(body, status_code=status)


def _dotnet_type(error: Exception) -> str:
    return {UnknownFunction: "System.ArgumentException", InvalidInstanceId: "System.ArgumentException",
            InstanceConflict: "DurableTask.Core.Exceptions.OrchestrationAlreadyExistsException",
            NotFailed: "System.InvalidOperationException"}.get(type(error), "System.Exception")


def _flag(request: Request, name: str, default: bool) -> bool:
    value = request.query_params.get(name)
    return default if value is None else value.strip().lower() == "true"


def _time(value: Any) -> str | None:
    if not value:
        return None
    try:
        return status_time(datetime.fromisoformat(str(value).replace("Z", "+00:00")))
    except ValueError:
        return str(value)


def _json(value: Any) -> Any:
    if value is None or value == "":
        return None
    try:
        return json.loads(value)
    except (TypeError, ValueError):
        return value


class DurableApi:
    def __init__(self, host: Host) -> None:
        self.host = host
        self.runtime = host.runtime

    def payload(self, row: dict[str, Any], show_input: bool = True) -> dict[str, Any]:
        """``DurableOrchestrationStatus`` as the HTTP API returns it (``ConvertFrom``)."""
        return {
            "name": row.get("Name"),
            "instanceId": row.get("InstanceId"),
            "runtimeStatus": row.get("RuntimeStatus"),
            "input": _json(row.get("Input")) if show_input else None,
            "customStatus": _json(row.get("CustomStatus")),
            "output": _json(row.get("Output")),
            "createdTime": _time(row.get("CreatedTime")),
            "lastUpdatedTime": _time(row.get("LastUpdatedTime")),
        }

    async def handle(self, request: Request, path: str) -> Response:
        parts = [p for p in path.strip("/").split("/") if p != ""]
        try:
            return await self._route(request, parts)
        except Exception as error:  # HttpApiHandler's last catch: 500 "Something went wrong..."
            self.host.log(f"durable API {request.method} /{path}: {type(error).__name__}: {error}")
            return _error(500, "Something went wrong while processing your request", error)

    async def _route(self, request: Request, parts: list[str]) -> Response:
        method = request.method
        head = parts[0].lower() if parts else ""
        if head == "_double":
            return await self.host.double_api(request, parts[1:])
        if head == "orchestrators" and len(parts) in (2, 3):
            if method != "POST":
                return Response(status_code=404)
            return await self._start(request, parts[1], parts[2] if len(parts) == 3 else None)
        if head == "entities" and len(parts) >= 2:
            key = "/".join(parts[2:])
            if method == "GET" and key:
                return await self._get_entity(parts[1], key)
            if method in ("POST", "DELETE"):
                return await self._signal_entity(request, parts[1], key)
            return Response(status_code=404)
        if head == "instances":
            return await self._instances(request, parts[1:])
        return Response(status_code=404)

    async def _instances(self, request: Request, parts: list[str]) -> Response:
        method = request.method
        if not parts:
            if method == "GET":
                return await self._list(request)
            if method == "DELETE":
                return _error(501, "Purging history by filter is not supported by the host double")
            return Response(status_code=404)
        instance_id = parts[0]
        if len(parts) == 1:
            if method == "GET":
                return await self._status(request, instance_id)
            if method == "DELETE":
                deleted = await self.runtime.purge(instance_id)
                return JSONResponse({"instancesDeleted": 1}) if deleted else Response(status_code=404)
            return Response(status_code=404)
        operation = parts[1].lower()
        if operation == "raiseevent" and len(parts) == 3 and method == "POST":
            return await self._raise_event(request, instance_id, parts[2])
        if len(parts) != 2 or method != "POST":
            return Response(status_code=404)
        if operation == "terminate":
            return await self._terminate(request, instance_id)
        if operation == "rewind":
            return await self._rewind(request, instance_id)
        if operation == "restart":
            return await self._restart(request, instance_id)
        if operation in ("suspend", "resume"):
            return _error(501, f"'{parts[1]}' is not supported by the host double")
        return Response(status_code=404)

    def _check_status_response(self, instance_id: str) -> JSONResponse:
        payload = self.host.management_payload(instance_id)
        return JSONResponse(payload, status_code=202,
                            headers={"Location": payload["statusQueryGetUri"], "Retry-After": "10"})

    async def _start(self, request: Request, name: str, instance_id: str | None) -> Response:
        raw = await request.body()
        try:
            input_ = json.loads(raw) if raw.strip() else None
        except json.JSONDecodeError as exc:
            return _error(400, "Invalid JSON content", exc)
        try:
            started = await self.runtime.start_new(name, instance_id, input_, request.query_params.get("version", ""))
        except (UnknownFunction, InvalidInstanceId) as exc:
            return _error(400, "One or more of the arguments submitted is incorrect", exc)
        except InstanceConflict as exc:
            return _error(500, "Something went wrong while processing your request", exc)
        return self._check_status_response(started)

    async def _status(self, request: Request, instance_id: str) -> Response:
        row = await self.runtime.status(instance_id)
        if row is None:
            return Response(status_code=404)
        body = self.payload(row, show_input=_flag(request, "showInput", True))
        if _flag(request, "showHistory", False):
            body["historyEvents"] = await self.runtime.history(instance_id)
        status = row.get("RuntimeStatus")
        if status in ACTIVE:
            return JSONResponse(body, status_code=202, headers={"Location": str(request.url), "Retry-After": "5"})
        failed_as_500 = status == "Failed" and _flag(request, "returnInternalServerErrorOnFailure", False)
        return JSONResponse(body, status_code=500 if failed_as_500 else 200)

    async def _list(self, request: Request) -> Response:
        query = request.query_params
        statuses = {s for s in query.get("runtimeStatus", "").split(",") if s}
        rows = await self.runtime.list_instances(statuses, query.get("instanceIdPrefix", ""))
        return JSONResponse([self.payload(r, _flag(request, "showInput", True)) for r in rows])

    async def _active_or_answer(self, instance_id: str, gone: frozenset[str]) -> Response | None:
        row = await self.runtime.status(instance_id)
        if row is None:
            return Response(status_code=404)
        if row.get("RuntimeStatus") in gone:
            return Response(status_code=410)
        return None

    async def _terminate(self, request: Request, instance_id: str) -> Response:
        answer = await self._active_or_answer(instance_id, TERMINAL)
        if answer is not None:
            return answer
        await self.runtime.terminate(instance_id, request.query_params.get("reason"))
        return Response(status_code=202)

    async def _raise_event(self, request: Request, instance_id: str, event_name: str) -> Response:
        answer = await self._active_or_answer(instance_id, TERMINAL)
        if answer is not None:
            return answer
        media = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if media != "application/json":
            return _error(400, "Only application/json request content is supported")
        raw = await request.body()
        try:
            data = json.loads(raw) if raw.strip() else None
        except json.JSONDecodeError as exc:
            return _error(400, "Invalid JSON content", exc)
        await self.runtime.raise_event(instance_id, event_name, data)
        return Response(status_code=202)

    async def _rewind(self, request: Request, instance_id: str) -> Response:
        answer = await self._active_or_answer(instance_id, frozenset({"Completed", "Terminated"}))
        if answer is not None:
            return answer
        await self.runtime.rewind(instance_id, request.query_params.get("reason"))
        return Response(status_code=202)

    async def _restart(self, request: Request, instance_id: str) -> Response:
        try:
            started = await self.runtime.restart(instance_id, _flag(request, "restartWithNewInstanceId", True))
        except KeyError as exc:
            return _error(400, "InstanceId does not match a valid orchestration instance.", exc)
        return self._check_status_response(started)

    async def _get_entity(self, name: str, key: str) -> Response:
        row = await self.runtime.read_entity(name, key)
        if row is None:
            return Response(status_code=404)
        state = row.get("EntityState")
        return JSONResponse(None if not state else json.loads(state))

    async def _signal_entity(self, request: Request, name: str, key: str) -> Response:
        operation = request.query_params.get("op") or ("delete" if request.method == "DELETE" else "")
        raw = await request.body()
        if not raw:
            batch_input = None
        else:
            media = request.headers.get("content-type", "").split(";")[0].strip().lower()
            if media == "application/json":
                try:
                    batch_input = json.dumps(json.loads(raw))
                except json.JSONDecodeError as exc:
                    return _error(400, f"Could not parse JSON content: {exc}")
            else:
                batch_input = json.dumps(raw.decode())
        await self.runtime.signal_entity(name, key, operation, batch_input)
        return Response(status_code=202)
