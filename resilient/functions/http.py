"""HTTP bindings: the Responses endpoints as FastAPI-typed Functions (HTTP streaming), in a blueprint.

All routes use the FastAPI ``Request``/response types from ``azurefunctions-extensions-http-fastapi``:
streaming is app-wide once enabled, and one classic ``func.HttpRequest`` route would fail indexing.
Each function only adapts: body/query/headers in, :class:`~resilient.http.service.HttpResult` out.
"""

from __future__ import annotations

import logging
import os

import azure.functions as func
from azurefunctions.extensions.http.fastapi import JSONResponse, Request, Response, StreamingResponse

from resilient.functions import runtime
from resilient.functions.client import ClientRuntime, repairer
from resilient.functions.durable_bindings import DurableBlueprint, DurableClient
from resilient.http.service import HttpResult, ResponsesService
from resilient.http.traced import traced
from resilient.settings import Settings

log = logging.getLogger("resilient.http")


async def _service(binding: str) -> ResponsesService:
    worker = await runtime.worker()
    client = DurableClient(binding)  # loads the Durable SDK only if this request makes a Durable call
    return worker.service(ClientRuntime(client), repairer(client, worker.engine))


def _to_response(result: HttpResult) -> Response:
    if result.stream is not None:
        return StreamingResponse(result.stream, status_code=result.status, headers=result.headers,
                                 media_type="text/event-stream")
    return JSONResponse(result.body, status_code=result.status, headers=result.headers)


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


def http_blueprint() -> DurableBlueprint:
    bp = DurableBlueprint()

    @bp.route(route="responses", methods=["POST"])
    @bp.durable_client_input(client_name="client")
    async def create_response(req: Request, client: str) -> Response:
        async def handle() -> HttpResult:
            return await (await _service(client)).create(await req.body())

        return _to_response(await traced("POST /responses", handle()))

    @bp.route(route="responses/{response_id}", methods=["GET"])
    @bp.durable_client_input(client_name="client")
    async def get_response(req: Request, client: str) -> Response:
        response_id = _response_id(req)

        async def handle() -> HttpResult:
            return await (await _service(client)).retrieve(response_id, dict(req.query_params), _headers(req))

        return _to_response(await traced("GET /responses/{response_id}", handle(), response_id))

    @bp.route(route="responses/{response_id}/cancel", methods=["POST"])
    @bp.durable_client_input(client_name="client")
    async def cancel_response(req: Request, client: str) -> Response:
        response_id = _response_id(req)

        async def handle() -> HttpResult:
            return await (await _service(client)).cancel(response_id)

        return _to_response(await traced("POST /responses/{response_id}/cancel", handle(), response_id))

    @bp.route(route="responses/{response_id}", methods=["DELETE"])
    @bp.durable_client_input(client_name="client")
    async def delete_response(req: Request, client: str) -> Response:
        response_id = _response_id(req)

        async def handle() -> HttpResult:
            return await (await _service(client)).delete(response_id)

        return _to_response(await traced("DELETE /responses/{response_id}", handle(), response_id))

    @bp.route(route="responses/{response_id}/input_items", methods=["GET"])
    @bp.durable_client_input(client_name="client")
    async def list_input_items(req: Request, client: str) -> Response:
        response_id = _response_id(req)

        async def handle() -> HttpResult:
            return await (await _service(client)).input_items(response_id, dict(req.query_params))

        return _to_response(await traced("GET /responses/{response_id}/input_items", handle(), response_id))

    @bp.route(route="ops/crash", methods=["POST"], auth_level=func.AuthLevel.ADMIN)
    async def crash_worker(req: Request) -> Response:
        """Demo/test hook: kill this worker process, as a real crash would. Off unless the app setting
        ``RESILIENT_ENABLE_CRASH_ENDPOINT`` is true (otherwise 404, indistinguishable from no route).
        Admin-level auth in Azure (the master key). Not under ``/admin``: the host reserves that prefix."""
        if not Settings.from_env().enable_crash_endpoint:
            return JSONResponse({"error": {"message": "Not found.", "type": "invalid_request_error",
                                           "code": "not_found", "param": None}}, status_code=404,
                                headers={"x-should-retry": "false"})
        log.warning("crash endpoint called: exiting the worker process")
        logging.shutdown()
        os._exit(17)

    return bp
