"""The ``input`` of a ``POST /responses`` body: messages (with text parts), ``function_call_output`` and
``mcp_approval_response`` items, each checked with an exact ``param`` path, and their normalisation into
stored items (the input-items listing's shape)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, cast

from pydantic import BaseModel, ConfigDict

from resilient.ids import InvalidId, validate_id
from resilient.protocol import errors
from resilient.protocol.items import (
    MessageRole,
    approval_response_item,
    function_call_output_item,
    input_text_part,
    output_message,
    output_text_part,
)
from resilient.protocol.request_errors import (
    _fail_missing,
    _fail_type,
    _fail_unknown,
    _fail_value,
    _key,
)

if TYPE_CHECKING:
    from resilient.protocol.request import CreateResponseRequest

_ROLES: tuple[str, ...] = ("user", "system", "developer", "assistant")
_MESSAGE_KEYS: frozenset[str] = frozenset({"type", "role", "content", "id", "status", "phase"})
_PART_KEYS: dict[str, frozenset[str]] = {
    "input_text": frozenset({"type", "text", "prompt_cache_breakpoint"}),
    "output_text": frozenset({"type", "text", "annotations", "logprobs"}),
}
_ITEM_STATUSES: tuple[str, ...] = ("in_progress", "completed", "incomplete")
_PHASES: tuple[str, ...] = ("commentary", "final_answer")
_FUNCTION_OUTPUT_KEYS: frozenset[str] = frozenset({"type", "call_id", "output", "id", "status"})
_APPROVAL_RESPONSE_KEYS: frozenset[str] = frozenset({"type", "approval_request_id", "approve", "reason", "id"})
_INPUT_ITEM_TYPES: tuple[str, ...] = ("message", "function_call_output", "mcp_approval_response")


class TextPart(BaseModel):
    """One text content part of an input message, after normalization."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    type: Literal["input_text", "output_text"]
    text: str


class InputMessage(BaseModel):
    """One input message, normalized: ``content`` is always a list of parts."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    role: MessageRole
    content: list[TextPart]


class FunctionCallOutput(BaseModel):
    """A ``function_call_output`` input item: the client's answer to a ``function_call``."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    type: Literal["function_call_output"] = "function_call_output"
    call_id: str
    output: str | list[TextPart]


class ApprovalResponse(BaseModel):
    """An ``mcp_approval_response`` input item: a person's answer to an ``mcp_approval_request``."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    type: Literal["mcp_approval_response"] = "mcp_approval_response"
    approval_request_id: str
    approve: bool
    reason: str | None = None


InputItem = InputMessage | FunctionCallOutput | ApprovalResponse


def _check_item_id(at: str, value: object) -> str:
    if not isinstance(value, str):
        _fail_type(at, "a string", value)
    try:
        return validate_id(value, param=at)
    except InvalidId:
        _fail_value(at, f"{errors.echo(value)}. Expected 1-128 characters of [A-Za-z0-9_-].")


def _parse_function_output(raw: dict[str, Any], at: str) -> FunctionCallOutput:
    for key in raw:
        if key not in _FUNCTION_OUTPUT_KEYS:
            _fail_unknown(f"{at}.{_key(key)}")
    if "call_id" not in raw:
        _fail_missing(f"{at}.call_id")
    call_id = _check_item_id(f"{at}.call_id", raw["call_id"])
    if "output" not in raw:
        _fail_missing(f"{at}.output")
    output = raw["output"]
    if raw.get("id") is not None and not isinstance(raw["id"], str):
        _fail_type(f"{at}.id", "a string", raw["id"])
    if raw.get("status") is not None and raw["status"] not in _ITEM_STATUSES:
        _fail_value(f"{at}.status", f"{errors.echo(raw['status'])}. Supported values are: "
                    f"{', '.join(_ITEM_STATUSES)}.")
    if isinstance(output, str):
        return FunctionCallOutput(call_id=call_id, output=output)
    if not isinstance(output, list):
        _fail_type(f"{at}.output", "a string or an array of input_text parts", output)
    parts = [_parse_part(part, f"{at}.output[{j}]", "user") for j, part in enumerate(output)]
    return FunctionCallOutput(call_id=call_id, output=parts)


def _parse_approval_response(raw: dict[str, Any], at: str) -> ApprovalResponse:
    for key in raw:
        if key not in _APPROVAL_RESPONSE_KEYS:
            _fail_unknown(f"{at}.{_key(key)}")
    if "approval_request_id" not in raw:
        _fail_missing(f"{at}.approval_request_id")
    request_id = _check_item_id(f"{at}.approval_request_id", raw["approval_request_id"])
    if "approve" not in raw:
        _fail_missing(f"{at}.approve")
    if not isinstance(raw["approve"], bool):
        _fail_type(f"{at}.approve", "a boolean", raw["approve"])
    reason = raw.get("reason")
    if reason is not None and not isinstance(reason, str):
        _fail_type(f"{at}.reason", "a string", reason)
    if raw.get("id") is not None and not isinstance(raw["id"], str):
        _fail_type(f"{at}.id", "a string", raw["id"])
    return ApprovalResponse(approval_request_id=request_id, approve=raw["approve"], reason=reason)


def _parse_item(raw: object, at: str) -> InputItem:
    if isinstance(raw, dict) and "type" in raw and raw["type"] != "message":
        if raw["type"] == "function_call_output":
            return _parse_function_output(raw, at)
        if raw["type"] == "mcp_approval_response":
            return _parse_approval_response(raw, at)
        _fail_value(f"{at}.type", f"{errors.echo(raw['type'])}. Supported values are: {', '.join(_INPUT_ITEM_TYPES)}.")
    return _parse_message(raw, at)


def _parse_part(raw: object, at: str, role: str) -> TextPart:
    if not isinstance(raw, dict):
        _fail_type(at, "an object", raw)
    part_type = raw.get("type")
    if part_type is None:
        _fail_missing(f"{at}.type")
    allowed: Literal["input_text", "output_text"] = "output_text" if role == "assistant" else "input_text"
    if part_type != allowed:
        _fail_value(
            f"{at}.type", f"{errors.echo(part_type)}. Supported values for role '{role}' are: '{allowed}'."
        )
    for key in raw:
        if key not in _PART_KEYS[allowed]:
            _fail_unknown(f"{at}.{_key(key)}")
    _check_ignored_part_fields(raw, at)
    if "text" not in raw:
        _fail_missing(f"{at}.text")
    text = raw["text"]
    if not isinstance(text, str):
        _fail_type(f"{at}.text", "a string", text)
    return TextPart(type=allowed, text=text)


def _check_ignored_part_fields(raw: dict[str, Any], at: str) -> None:
    """The part fields that are accepted and ignored still have the OpenAI API's types, so a request the
    server takes is one ``docs/openapi.yaml`` allows (and a typo inside them is not silently dropped)."""
    for key in ("annotations", "logprobs"):
        if key in raw and not isinstance(raw[key], list):
            _fail_type(f"{at}.{key}", "an array", raw[key])
    if "prompt_cache_breakpoint" not in raw:
        return
    breakpoint_, where = raw["prompt_cache_breakpoint"], f"{at}.prompt_cache_breakpoint"
    if not isinstance(breakpoint_, dict):
        _fail_type(where, "an object", breakpoint_)
    for key in breakpoint_:
        if key not in ("mode", "ttl"):
            _fail_unknown(f"{where}.{_key(key)}")
    if "mode" not in breakpoint_:
        _fail_missing(f"{where}.mode")
    if breakpoint_["mode"] != "explicit":
        _fail_value(f"{where}.mode", f"{errors.echo(breakpoint_['mode'])}. Supported values are: 'explicit'.")
    if "ttl" in breakpoint_ and breakpoint_["ttl"] not in ("30m", "12h"):
        _fail_value(f"{where}.ttl", f"{errors.echo(breakpoint_['ttl'])}. Supported values are: '30m', '12h'.")


def _parse_message(raw: object, at: str) -> InputMessage:
    if not isinstance(raw, dict):
        _fail_type(at, "an object", raw)
    if "type" in raw and raw["type"] != "message":
        _fail_value(f"{at}.type", f"{errors.echo(raw['type'])}. Supported values are: 'message'.")
    for key in raw:
        if key not in _MESSAGE_KEYS:
            _fail_unknown(f"{at}.{_key(key)}")
    if raw.get("id") is not None and not isinstance(raw["id"], str):
        _fail_type(f"{at}.id", "a string", raw["id"])
    if raw.get("status") is not None and raw["status"] not in _ITEM_STATUSES:
        _fail_value(
            f"{at}.status",
            f"{errors.echo(raw['status'])}. Supported values are: {', '.join(_ITEM_STATUSES)}.",
        )
    if raw.get("phase") is not None and raw["phase"] not in _PHASES:
        _fail_value(
            f"{at}.phase", f"{errors.echo(raw['phase'])}. Supported values are: {', '.join(_PHASES)}."
        )
    if "role" not in raw:
        _fail_missing(f"{at}.role")
    role = raw["role"]
    if not isinstance(role, str):
        _fail_type(f"{at}.role", "a string", role)
    if role not in _ROLES:
        _fail_value(f"{at}.role", f"{errors.echo(role)}. Supported values are: {', '.join(_ROLES)}.")
    if "content" not in raw:
        _fail_missing(f"{at}.content")
    content = raw["content"]
    if isinstance(content, str):
        part_type: Literal["input_text", "output_text"] = (
            "output_text" if role == "assistant" else "input_text"
        )
        return InputMessage(role=cast(MessageRole, role), content=[TextPart(type=part_type, text=content)])
    if not isinstance(content, list):
        _fail_type(f"{at}.content", "a string or an array of content parts", content)
    if not content:
        _fail_value(f"{at}.content", "expected a non-empty array of content parts.")
    parts = [_parse_part(part, f"{at}.content[{j}]", role) for j, part in enumerate(content)]
    return InputMessage(role=cast(MessageRole, role), content=parts)


def normalize_input_items(
    req: CreateResponseRequest, new_id: Callable[[], str], typed_id: Callable[[str], str] | None = None
) -> list[dict[str, Any]]:
    """The request's input as stored items, in the input-items listing's shape, each with a new id
    (``typed_id``, when given, makes the ids of non-message items from their type, for the id prefix).

    User, system and developer turns become ``ResponseInputMessageItem`` dicts (``input_text`` parts);
    assistant history becomes ``ResponseOutputMessage`` dicts (``output_text`` parts); tool outputs and
    approval answers become ``ResponseFunctionToolCallOutputItem`` and ``McpApprovalResponse`` dicts.
    """
    items: list[dict[str, Any]] = []
    for message in req.items():
        if isinstance(message, FunctionCallOutput):
            output = message.output if isinstance(message.output, str) else [
                input_text_part(part.text) for part in message.output]
            item_id = typed_id(message.type) if typed_id else new_id()
            items.append(function_call_output_item(item_id, message.call_id, output))
            continue
        if isinstance(message, ApprovalResponse):
            item_id = typed_id(message.type) if typed_id else new_id()
            items.append(approval_response_item(item_id, message.approval_request_id, message.approve,
                                                message.reason))
            continue
        item_id = new_id()
        if message.role == "assistant":
            item = output_message(item_id, "", status="completed")
            item["content"] = [output_text_part(part.text) for part in message.content]
        else:
            item = {
                "id": item_id,
                "type": "message",
                "role": message.role,
                "status": "completed",
                "content": [input_text_part(part.text) for part in message.content],
            }
        items.append(item)
    return items
