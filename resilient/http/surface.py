"""The OpenAI-compatible surface around the Responses endpoints: the ``/v1`` routes, request ids, the
health check and the root pointer.

Why a ``/v1`` alias: the ``openai`` client's ``base_url`` is conventionally ``https://<host>/v1``, and a
user who types it should not get a 404. The unprefixed routes stay (existing clients and scripts use
them); both reach the same handlers.

Why request ids: the OpenAI API answers every request with ``x-request-id``, clients log it
(``response._request_id`` in the ``openai`` client), and it is what a user quotes when something went
wrong. A caller's own id is echoed when it is sane (so a gateway's id survives); anything else gets a
fresh one, never a reflection of arbitrary bytes.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

log = logging.getLogger("resilient.http")

REQUEST_ID_HEADER = "x-request-id"
# Printable, header-safe and short: what gateways and tracing systems send (UUIDs, req_..., W3C ids).
_SANE_REQUEST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
HEALTH_TIMEOUT_SECONDS = 3.0  # the health answer must come before a load balancer's probe gives up

# (method, path after /v1 split into segments) -> operation; "{id}" is the response id segment.
_V1_OPERATIONS: dict[tuple[str, tuple[str, ...]], str] = {
    ("POST", ("responses",)): "create",
    ("GET", ("responses", "{id}")): "retrieve",
    ("DELETE", ("responses", "{id}")): "delete",
    ("POST", ("responses", "{id}", "cancel")): "cancel",
    ("GET", ("responses", "{id}", "input_items")): "input_items",
}

# OpenAI endpoints this service answers with a 501 that says why (docs/CONTRACT.md, "Not served").
UNSERVED: dict[str, str] = {
    "compact": "POST /responses/compact is not implemented by this service: compaction rewrites a "
               "conversation's history with a model, and here the configured agent, not the service, decides "
               "what its model sees. Continue a long conversation with previous_response_id or conversation.",
    "input_tokens": "POST /responses/input_tokens is not implemented by this service: a token count depends on "
                    "the model, which the configured agent chooses; the service has no tokenizer for it. Count "
                    "tokens with the model provider's API.",
}


def request_id(headers: Mapping[str, str]) -> str:
    """The caller's ``x-request-id`` when it is sane, else a new ``req_<32 hex>``."""
    sent = next((value for key, value in headers.items() if key.lower() == REQUEST_ID_HEADER), None)
    if sent is not None and _SANE_REQUEST_ID.fullmatch(sent):
        return sent
    return "req_" + secrets.token_hex(16)


def v1_operation(method: str, path: str) -> tuple[str, str] | None:
    """Which Responses operation a ``/v1/...`` request is, and its response id ("" when none), or None.

    ``path`` is the part after ``v1/`` as the route delivered it. Matching is exact (no trailing segments,
    literals case-insensitive as the host matches them), so ``/v1/...`` answers exactly what the
    unprefixed route answers and nothing more."""
    segments = [s for s in path.split("/") if s != ""]
    if not segments or segments[0].lower() != "responses":
        return None
    if len(segments) == 2 and method.upper() == "POST" and segments[1].lower() in UNSERVED:
        return segments[1].lower(), ""
    shape = ["responses"] + ["{id}" if i == 1 else s.lower() for i, s in enumerate(segments[1:], start=1)]
    operation = _V1_OPERATIONS.get((method.upper(), tuple(shape)))
    if operation is None:
        return None
    return operation, segments[1] if len(segments) > 1 else ""


def root_body() -> dict[str, Any]:
    """``GET /``: where the API is, for a person (or a probe) that opens the bare host name."""
    return {
        "object": "service",
        "name": "resilient-responses",
        "description": "Crash-resilient OpenAI-style Responses API. Point an OpenAI client at base_url "
                       "'<this host>/v1' (or '<this host>').",
        "endpoints": {
            "responses": "/v1/responses",
            "health": "/health",
        },
    }


async def health(settings_check: Callable[[], object],
                 storage_check: Callable[[], Awaitable[object]]) -> tuple[int, dict[str, Any]]:
    """200 when the settings are valid and storage answers within HEALTH_TIMEOUT_SECONDS, else 503.

    Each check reports ``ok`` or the reason it failed, so the body says what to fix; no secret (a
    connection string, a key) is ever part of a reason."""
    checks: dict[str, dict[str, Any]] = {}
    try:
        settings_check()
        checks["settings"] = {"status": "ok"}
    except Exception as exc:
        checks["settings"] = {"status": "error", "reason": str(exc)[:300]}
    if checks["settings"]["status"] == "ok":
        try:
            async with asyncio.timeout(HEALTH_TIMEOUT_SECONDS):
                await storage_check()
            checks["storage"] = {"status": "ok"}
        except TimeoutError:
            checks["storage"] = {"status": "error", "reason": f"no answer within {HEALTH_TIMEOUT_SECONDS:g} s"}
        except Exception as exc:
            checks["storage"] = {"status": "error", "reason": type(exc).__name__}
    else:
        checks["storage"] = {"status": "skipped", "reason": "settings are invalid"}
    healthy = all(check["status"] == "ok" for check in checks.values())
    if not healthy:
        log.warning("health check failed", extra={"checks": checks})
    return (200 if healthy else 503), {"status": "ok" if healthy else "unavailable", "checks": checks}


def check_settings_at_start_up(load: Callable[[], object]) -> bool:
    """Validate the app settings once when the worker indexes the app, and say so in one log line: an
    invalid setting is then visible at start-up, not only as a 500 on the first request."""
    try:
        load()
    except Exception as exc:
        log.error("invalid app settings: %s; requests will answer 500 and GET /health 503 until this is fixed",
                  exc)
        return False
    return True
