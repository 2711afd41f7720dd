"""The ``object: "response"`` dict.

One builder produces every response snapshot (GET, create reply, the ``response`` inside lifecycle
events), so all of them carry the same keys in every status: every field the ``openai`` client's
``Response`` reads and every field Open Responses' ``ResponseResource`` requires. The model and sampling
parameters echo the request; one not sent is reported with the value that describes what happened
(plain text format, default sampling, no limits). ``tools`` and ``tool_choice`` echo the request.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from resilient.protocol._strict import strict_validate
from resilient.protocol.response_params import ECHOED_WHEN_SENT, RESPONSE_DEFAULTS

ResponseStatus = Literal["queued", "in_progress", "completed", "failed", "cancelled", "incomplete"]

STATUSES: frozenset[str] = frozenset(
    {"queued", "in_progress", "completed", "failed", "cancelled", "incomplete"}
)
TERMINAL_STATUSES: frozenset[str] = frozenset({"completed", "failed", "cancelled", "incomplete"})


def build_response(
    *,
    response_id: str,
    created_at: int,
    model: str,
    status: str,
    output: list[dict[str, Any]],
    background: bool,
    store: bool,
    instructions: str | None,
    metadata: dict[str, str] | None,
    previous_response_id: str | None,
    conversation_id: str | None,
    error: dict[str, Any] | None,
    incomplete_details: dict[str, Any] | None,
    usage: dict[str, Any] | None,
    completed_at: int | None,
    tools: list[dict[str, Any]] | None = None,
    tool_choice: str | dict[str, Any] = "auto",
    params: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A complete response object in OpenAI key order.

    ``error`` is ``{"code", "message"}`` with a code from the client's ``ResponseError.code`` literal
    (e.g. ``server_error``); ``incomplete_details`` is ``{"reason": ...}``. The lists and dicts passed in
    are copied shallowly so a later mutation of the caller's list cannot change a stored snapshot.
    ``params``: the model and sampling parameters the request sent (``create_params.py``), by name.
    """
    if status not in STATUSES:
        raise ValueError(f"invalid response status {status!r}")
    sent = params or {}

    def echo(name: str) -> Any:
        return sent.get(name, RESPONSE_DEFAULTS[name])

    response = {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "background": background,
        "completed_at": completed_at,
        "conversation": {"id": conversation_id} if conversation_id is not None else None,
        "error": dict(error) if error is not None else None,
        "incomplete_details": dict(incomplete_details) if incomplete_details is not None else None,
        "instructions": instructions,
        "max_output_tokens": echo("max_output_tokens"),
        "max_tool_calls": echo("max_tool_calls"),
        "model": model,
        "output": list(output),
        "parallel_tool_calls": echo("parallel_tool_calls"),
        "previous_response_id": previous_response_id,
        "prompt_cache_key": echo("prompt_cache_key"),
        "presence_penalty": echo("presence_penalty"),
        "frequency_penalty": echo("frequency_penalty"),
        "reasoning": dict(echo("reasoning")),
        "safety_identifier": echo("safety_identifier"),
        "service_tier": echo("service_tier"),
        "store": store,
        "temperature": echo("temperature"),
        "text": {**RESPONSE_DEFAULTS["text"], **echo("text")},  # a text config without format: plain text
        "tool_choice": tool_choice if isinstance(tool_choice, str) else dict(tool_choice),
        "tools": [dict(tool) for tool in tools or []],
        "top_logprobs": echo("top_logprobs"),
        "top_p": echo("top_p"),
        "truncation": echo("truncation"),
        "usage": dict(usage) if usage is not None else None,
        "user": echo("user"),
        "metadata": dict(metadata) if metadata else {},
    }
    for name in ECHOED_WHEN_SENT:
        if name in sent:
            response[name] = sent[name]
    return response


def usage_for(
    input_tokens: int, output_tokens: int, *, cached_tokens: int = 0, reasoning_tokens: int = 0
) -> dict[str, Any]:
    """Token usage. ``cached_tokens``, ``cache_write_tokens`` and ``reasoning_tokens`` are required by
    the installed client's ``ResponseUsage`` under strict validation, so they are always present."""
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached_tokens, "cache_write_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
        "total_tokens": input_tokens + output_tokens,
    }


def estimate_tokens(text: str) -> int:
    """About four characters per token: cheap, deterministic, and good enough for ``usage`` when no
    model reports real counts (the offline agent)."""
    return (len(text) + 3) // 4


def validate_response(response: dict[str, Any]) -> None:
    """Raise ValueError unless ``response`` is a strict ``openai.types.responses.Response``."""
    from openai.types.responses import Response

    strict_validate(Response, response, what="response")
