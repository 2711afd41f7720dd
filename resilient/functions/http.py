"""HTTP bindings: the Responses endpoints as FastAPI-typed Functions (HTTP streaming), in a blueprint.

All routes use the FastAPI ``Request``/response types from ``azurefunctions-extensions-http-fastapi``:
streaming is app-wide once enabled, and one classic ``func.HttpRequest`` route would fail indexing.
Each function only adapts: body/query/headers in, :class:`~resilient.http.service.HttpResult` out.
"""

from __future__ import annotations

import contextlib
import logging
import os

import azure.functions as func
from azurefunctions.extensions.http.fastapi import JSONResponse, Request, Response, StreamingResponse

from resilient.functions.client import ClientRuntime, repairer
from resilient.functions.durable_bindings import DurableBlueprint, DurableClient
from resilient.functions.runtime import ProcessRuntime
from resilient.http.service import MAX_BODY_BYTES, HttpResult, ResponsesService, error_result
from resilient.http.surface import (
    REQUEST_ID_HEADER,
    UNSERVED,
    check_settings_at_start_up,
    health,
    request_id,
    root_body,
    v1_conversation_operation,
    v1_operation,
)
from resilient.http.traced import traced
from resilient.protocol import errors
from resilient.settings import Settings
from resilient.storage.errors import NotFound

log = logging.getLogger("resilient.http")
HEALTH_PROBE_ID = "resp_healthprobe"  # never issued (issued ids carry 48 hex digits)
# The bare root and nothing else: an optional segment that, when present, must be empty. (An empty route
# would default to the function's name.)
ROOT_ROUTE = "{root:regex(^$)?}"


async def _service(process: ProcessRuntime, binding: str) -> ResponsesService:
    try:
        worker = await process.worker()
    except ValueError:
        _refuse_if_misconfigured()
        raise
    client = DurableClient(binding)  # loads the Durable SDK only if this request makes a Durable call
    return worker.service(ClientRuntime(client), repairer(client, worker.engine))


def _refuse_if_misconfigured() -> None:
    """An invalid app setting: a 500 in the OpenAI shape that says so (no traceback per request; the
    setting itself is named in the log and by ``GET /health``, not to API clients)."""
    try:
        Settings.from_env()
    except ValueError as exc:
        log.error("invalid app settings: %s", exc)
        raise errors.ApiError(500, errors.SERVER_ERROR, "The service is not configured correctly; its operator "
                              "can see why in its logs or at GET /health.", code=errors.CODE_SERVER_ERROR,
                              retryable=False) from None


def _to_response(result: HttpResult, req: Request) -> Response:
    headers = {**result.headers, REQUEST_ID_HEADER: request_id(req.headers)}
    if result.stream is not None:
        return StreamingResponse(result.stream, status_code=result.status, headers=headers,
                                 media_type="text/event-stream")
    return JSONResponse(result.body, status_code=result.status, headers=headers)


async def _operate(process: ProcessRuntime, operation: str, req: Request, client: str, response_id: str) -> Response:
    """One Responses operation, the same whether it came through ``/responses...`` or ``/v1/responses...``."""

    async def handle() -> HttpResult:
        service = await _service(process, client)
        if operation == "create":
            return await service.create(await req.body())
        if operation == "retrieve":
            return await service.retrieve(response_id, dict(req.query_params), _headers(req))
        if operation == "cancel":
            return await service.cancel(response_id)
        if operation == "delete":
            return await service.delete(response_id)
        return await service.input_items(response_id, dict(req.query_params))

    return _to_response(await traced(ROUTES[operation], handle(), response_id or None), req)


# The span name of each operation (the route it was written for; ``/v1`` requests are the same operation).
ROUTES = {
    "create": "POST /responses",
    "retrieve": "GET /responses/{response_id}",
    "cancel": "POST /responses/{response_id}/cancel",
    "delete": "DELETE /responses/{response_id}",
    "input_items": "GET /responses/{response_id}/input_items",
}


def _unserved(operation: str, req: Request) -> Response:
    """501 in the OpenAI error shape for an OpenAI endpoint this service cannot serve (the message says why)."""
    return _to_response(error_result(errors.not_implemented(UNSERVED[operation])), req)


async def _conversation(process: ProcessRuntime, operation: str, req: Request, conversation_id: str,
                        item_id: str) -> Response:
    """One Conversations operation, the same under ``/conversations...`` and ``/v1/conversations...``."""

    async def handle() -> HttpResult:
        # Loaded with the first such request (it needs the request models and the openai types), not when
        # a worker indexes the app.
        from resilient.http.conversations import ConversationsService

        service = ConversationsService((await process.engine()).storage)
        query = list(req.query_params.multi_items())
        if operation in ("create", "update", "add_items"):
            body = await req.body()
            if len(body) > MAX_BODY_BYTES:
                raise errors.payload_too_large(MAX_BODY_BYTES)
            if operation == "create":
                return await service.create(body)
            if operation == "update":
                return await service.update(conversation_id, body)
            return await service.add_items(conversation_id, query, body)
        if operation == "retrieve":
            return await service.retrieve(conversation_id)
        if operation == "delete":
            return await service.delete(conversation_id)
        if operation == "list_items":
            return await service.list_items(conversation_id, query)
        if operation == "retrieve_item":
            return await service.retrieve_item(conversation_id, item_id, query)
        return await service.delete_item(conversation_id, item_id)

    return _to_response(await traced(CONVERSATION_ROUTES[operation], handle()), req)


CONVERSATION_ROUTES = {
    "create": "POST /conversations",
    "retrieve": "GET /conversations/{conversation_id}",
    "update": "POST /conversations/{conversation_id}",
    "delete": "DELETE /conversations/{conversation_id}",
    "list_items": "GET /conversations/{conversation_id}/items",
    "add_items": "POST /conversations/{conversation_id}/items",
    "retrieve_item": "GET /conversations/{conversation_id}/items/{item_id}",
    "delete_item": "DELETE /conversations/{conversation_id}/items/{item_id}",
}


def _path_ids(req: Request) -> tuple[str, str]:
    """The ``{conversation_id}`` and ``{item_id}`` segments (from the path too, as for ``_response_id``)."""
    params = req.path_params
    parts = [p for p in req.url.path.split("/") if p]
    at = next((i for i, p in enumerate(parts) if p.lower() == "conversations"), len(parts))
    found = [*parts[at + 1:], "", "", ""]
    return str(params.get("conversation_id") or found[0]), str(params.get("item_id") or found[2])


def _not_found(req: Request) -> Response:
    error = errors.ApiError(404, errors.INVALID_REQUEST, "No API route matches this method and path.",
                            code=errors.CODE_NOT_FOUND)
    return _to_response(error_result(error), req)


async def _storage_answers(process: ProcessRuntime) -> None:
    """Storage is reachable: one row read (an id no response has; "not found" is an answer)."""
    with contextlib.suppress(NotFound):
        await (await process.engine()).storage.responses.get_control(HEALTH_PROBE_ID)


def _response_id(req: Request) -> str:
    """The ``{response_id}`` route segment. Read from the path itself as well, because how route
    parameters reach a streaming function differs between hosts (worker proxy vs. double)."""
    found = req.path_params.get("response_id")
    if found:
        return str(found)
    parts = [p for p in req.url.path.split("/") if p]
    if "responses" in parts:
        at = parts.index("responses")
        if at + 1 < len(parts):
            return str(parts[at + 1])
    return ""


def _headers(req: Request) -> dict[str, str]:
    return {k.lower(): v for k, v in req.headers.items()}


def http_blueprint(process: ProcessRuntime) -> DurableBlueprint:
    """Every HTTP function of the app, over ``process``'s workers: the Responses and Conversations APIs (with
    and without ``/v1``), health, the root and the crash hook."""
    check_settings_at_start_up(Settings.from_env)
    bp = DurableBlueprint()
    _responses_routes(bp, process)
    _conversation_routes(bp, process)
    _service_routes(bp, process)
    return bp


def _responses_routes(bp: DurableBlueprint, process: ProcessRuntime) -> None:
    """``/responses...``: each operation one function with a Durable client (what create and cancel need)."""

    @bp.route(route="responses", methods=["POST"])
    @bp.durable_client_input(client_name="client")
    async def create_response(req: Request, client: str) -> Response:
        return await _operate(process, "create", req, client, "")

    @bp.route(route="responses/{response_id}", methods=["GET"])
    @bp.durable_client_input(client_name="client")
    async def get_response(req: Request, client: str) -> Response:
        return await _operate(process, "retrieve", req, client, _response_id(req))

    @bp.route(route="responses/{response_id}/cancel", methods=["POST"])
    @bp.durable_client_input(client_name="client")
    async def cancel_response(req: Request, client: str) -> Response:
        return await _operate(process, "cancel", req, client, _response_id(req))

    @bp.route(route="responses/{response_id}", methods=["DELETE"])
    @bp.durable_client_input(client_name="client")
    async def delete_response(req: Request, client: str) -> Response:
        return await _operate(process, "delete", req, client, _response_id(req))

    @bp.route(route="responses/{response_id}/input_items", methods=["GET"])
    @bp.durable_client_input(client_name="client")
    async def list_input_items(req: Request, client: str) -> Response:
        return await _operate(process, "input_items", req, client, _response_id(req))

    @bp.route(route="responses/compact", methods=["POST"])
    async def compact_response(req: Request) -> Response:
        return _unserved("compact", req)

    @bp.route(route="responses/input_tokens", methods=["POST"])
    async def count_input_tokens(req: Request) -> Response:
        return _unserved("input_tokens", req)


def _conversation_routes(bp: DurableBlueprint, process: ProcessRuntime) -> None:
    """``/conversations...``: functions without a Durable client (the Conversations API never starts a run)."""

    @bp.route(route="conversations", methods=["POST"])
    async def create_conversation(req: Request) -> Response:
        return await _conversation(process, "create", req, "", "")

    @bp.route(route="conversations/{conversation_id}", methods=["GET", "POST", "DELETE"])
    async def one_conversation(req: Request) -> Response:
        operation = {"GET": "retrieve", "POST": "update"}.get(req.method.upper(), "delete")
        return await _conversation(process, operation, req, *_path_ids(req))

    @bp.route(route="conversations/{conversation_id}/items", methods=["GET", "POST"])
    async def conversation_items(req: Request) -> Response:
        operation = "list_items" if req.method.upper() == "GET" else "add_items"
        return await _conversation(process, operation, req, *_path_ids(req))

    @bp.route(route="conversations/{conversation_id}/items/{item_id}", methods=["GET", "DELETE"])
    async def conversation_item(req: Request) -> Response:
        operation = "retrieve_item" if req.method.upper() == "GET" else "delete_item"
        return await _conversation(process, operation, req, *_path_ids(req))


def _service_routes(bp: DurableBlueprint, process: ProcessRuntime) -> None:
    """``/v1/...`` (both APIs again, in one function), ``/health``, ``/`` and ``/ops/crash``."""

    @bp.route(route="v1/{*path}", methods=["GET", "POST", "DELETE"])
    @bp.durable_client_input(client_name="client")
    async def v1_responses(req: Request, client: str) -> Response:
        """The same operations under ``/v1`` (``OpenAI(base_url=".../v1")``); one function for all of
        them, so the app indexes one more function instead of five."""
        path = str(req.path_params.get("path") or req.url.path.split("/v1/", 1)[-1])
        conversation = v1_conversation_operation(req.method, path)
        if conversation is not None:
            operation, conversation_id, item_id = conversation
            return await _conversation(process, operation, req, conversation_id, item_id)
        found = v1_operation(req.method, path)
        if found is None:
            return _not_found(req)
        operation, response_id = found
        if operation in UNSERVED:
            return _unserved(operation, req)
        return await _operate(process, operation, req, client, response_id)

    @bp.route(route="health", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
    async def health_check(req: Request) -> Response:
        """Anonymous, for load balancers and uptime probes: settings valid and storage reachable (200), or
        not (503); the body says which check failed and nothing secret."""
        status, body = await health(Settings.from_env, lambda: _storage_answers(process))
        return _to_response(HttpResult(status, body, headers={"Cache-Control": "no-store"}), req)

    @bp.route(route=ROOT_ROUTE, methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
    async def api_root(req: Request) -> Response:
        """``GET /`` points to the API. Only the bare root: a catch-all here would also take the host's
        own ``/admin/...`` and ``/runtime/webhooks/...`` routes (routePrefix is empty)."""
        return _to_response(HttpResult(200, root_body()), req)

    @bp.route(route="ops/crash", methods=["POST"], auth_level=func.AuthLevel.ADMIN)
    async def crash_worker(req: Request) -> Response:
        """Demo/test hook: kill this worker process, as a real crash would. Off unless the app setting
        ``RESILIENT_ENABLE_CRASH_ENDPOINT`` is true (otherwise 404, indistinguishable from no route).
        Admin-level auth in Azure (the master key). Not under ``/admin``: the host reserves that prefix."""
        if not Settings.from_env().enable_crash_endpoint:
            return _to_response(error_result(errors.ApiError(404, errors.INVALID_REQUEST, "Not found.",
                                                             code=errors.CODE_NOT_FOUND)), req)
        log.warning("crash endpoint called: exiting the worker process")
        logging.shutdown()
        os._exit(17)
