"""``POST /responses`` request validation.

Every malformed body becomes a 400 that names the offending ``param`` with a JSON path
(``input[0].content[1].text``), never a 500 and never a silently ignored typo: unknown fields are
rejected, known OpenAI fields this service does not implement are accepted and ignored (so stock
clients work). ``tools`` accepts function tools only (another tool type is a clear 400, since ignoring a
tool would change the answer), and ``input`` accepts messages, ``function_call_output`` and
``mcp_approval_response`` items. Whether a ``call_id`` or an ``approval_request_id`` was really issued on
the chain needs storage: ``resilient/http/continuation.py`` checks that.

The model is strict (no ``"true"`` → ``True`` coercion) and frozen. Rules that pydantic cannot express
with an exact param (input items, ids, metadata limits, cross-field rules) raise
``PydanticCustomError("api_error", ..., {"param", "code", "message"})`` from validators, so
``CreateResponseRequest.model_validate`` enforces everything on its own and :func:`parse_create_request`
only translates the first error into an :class:`ApiError`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, Literal, NoReturn, cast

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import ErrorDetails, PydanticCustomError

from resilient.ids import CONVERSATION_PREFIX, RESPONSE_PREFIX, InvalidId, validate_id
from resilient.protocol import errors
from resilient.protocol.errors import ApiError, invalid_request
from resilient.protocol.items import (
    MessageRole,
    approval_response_item,
    function_call_output_item,
    input_text_part,
    output_message,
    output_text_part,
)

# Known OpenAI create parameters that are accepted and ignored.
IGNORED_FIELDS: frozenset[str] = frozenset(
    {
        "temperature",
        "top_p",
        "max_output_tokens",
        "max_tool_calls",
        "parallel_tool_calls",
        "truncation",
        "user",
        "reasoning",
        "text",
        "include",
        "prompt_cache_key",
        "safety_identifier",
        "service_tier",
        "top_logprobs",
        "prompt",
    }
)

METADATA_MAX_PAIRS = 16
METADATA_MAX_KEY = 64
METADATA_MAX_VALUE = 512
MODEL_MAX_LENGTH = 256

_ROLES: tuple[str, ...] = ("user", "system", "developer", "assistant")
_MESSAGE_KEYS: frozenset[str] = frozenset({"type", "role", "content", "id", "status", "phase"})
_PART_KEYS: dict[str, frozenset[str]] = {
    "input_text": frozenset({"type", "text", "prompt_cache_breakpoint"}),
    "output_text": frozenset({"type", "text", "annotations", "logprobs"}),
}
_ITEM_STATUSES: tuple[str, ...] = ("in_progress", "completed", "incomplete")
_PHASES: tuple[str, ...] = ("commentary", "final_answer")
_MAX_KEY_ECHO = 64
MAX_TOOLS = 128
# Input items per create. Each item is one table row, written in transactions of 100 before the create
# answers, so the count bounds the create's storage work (21 transactions at most; on Azurite each
# transaction also gets slower as the response's partition grows, so 20,000 items took minutes). Longer histories
# belong to the chain: previous_response_id and conversation carry earlier turns without resending them.
MAX_INPUT_ITEMS = 2048
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_FUNCTION_TOOL_KEYS: frozenset[str] = frozenset({"type", "name", "description", "parameters", "strict"})
_TOOL_CHOICE_MODES: tuple[str, ...] = ("auto", "none", "required")
_FUNCTION_OUTPUT_KEYS: frozenset[str] = frozenset({"type", "call_id", "output", "id", "status"})
_APPROVAL_RESPONSE_KEYS: frozenset[str] = frozenset({"type", "approval_request_id", "approve", "reason", "id"})
_INPUT_ITEM_TYPES: tuple[str, ...] = ("message", "function_call_output", "mcp_approval_response")


# --------------------------------------------------------------------------- error helpers


def _key(key: object) -> str:
    """A client-chosen key as it appears in a ``param`` path, capped so a huge key is not echoed."""
    text = str(key)
    return text if len(text) <= _MAX_KEY_ECHO else text[:_MAX_KEY_ECHO] + "..."


def _json_kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _fail(param: str | None, code: str, message: str, *, status: int = 400) -> NoReturn:
    raise PydanticCustomError("api_error", "{message}",
                              {"param": param, "code": code, "message": message, "status": status})


def _fail_type(param: str, expected: str, value: object) -> NoReturn:
    _fail(
        param,
        errors.CODE_INVALID_TYPE,
        f"Invalid type for '{param}': expected {expected}, but got {_json_kind(value)} instead.",
    )


def _fail_value(param: str | None, detail: str) -> NoReturn:
    _fail(param, errors.CODE_INVALID_VALUE, f"Invalid value for '{param}': {detail}")


def _fail_bad_id(param: str, prefix: str, value: object) -> NoReturn:
    _fail_value(
        param,
        f"{errors.echo(value)}. Expected an id starting with '{prefix}', 1-128 characters of [A-Za-z0-9_-].",
    )


def _fail_unknown(param: str) -> NoReturn:
    _fail(param, errors.CODE_UNKNOWN_PARAMETER, f"Unknown parameter: '{param}'.")


def _fail_missing(param: str) -> NoReturn:
    _fail(param, errors.CODE_MISSING_PARAMETER, f"Missing required parameter: '{param}'.")


# --------------------------------------------------------------------------- models


class StreamOptions(BaseModel):
    """``stream_options``; ``include_obfuscation`` is accepted and has no effect."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    include_obfuscation: bool = True


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


class FunctionTool(BaseModel):
    """A ``function`` tool. ``parameters`` is a JSON Schema of type ``object`` (passed to the model as is)."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    type: Literal["function"] = "function"
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None

    def to_json(self) -> dict[str, Any]:
        """The tool as the response object echoes it (``FunctionTool``)."""
        return {"type": "function", "name": self.name, "description": self.description,
                "parameters": self.parameters, "strict": self.strict}


def _parse_tool(raw: object, at: str) -> FunctionTool:
    if not isinstance(raw, dict):
        _fail_type(at, "an object", raw)
    if "type" not in raw:
        _fail_missing(f"{at}.type")
    if raw["type"] != "function":
        _fail(f"{at}.type", errors.CODE_UNSUPPORTED_VALUE,
              f"Unsupported value for '{at}.type': {errors.echo(raw['type'])}. This service supports only "
              "tools of type 'function'.")
    for key in raw:
        if key not in _FUNCTION_TOOL_KEYS:
            _fail_unknown(f"{at}.{_key(key)}")
    if "name" not in raw:
        _fail_missing(f"{at}.name")
    name = raw["name"]
    if not isinstance(name, str):
        _fail_type(f"{at}.name", "a string", name)
    if not _TOOL_NAME.fullmatch(name):
        _fail_value(f"{at}.name", f"{errors.echo(name)}. Expected 1-64 characters of [A-Za-z0-9_-].")
    description = raw.get("description")
    if description is not None and not isinstance(description, str):
        _fail_type(f"{at}.description", "a string", description)
    strict = raw.get("strict")
    if strict is not None and not isinstance(strict, bool):
        _fail_type(f"{at}.strict", "a boolean", strict)
    parameters = raw.get("parameters")
    if parameters is not None:
        # Only what docs/openapi.yaml states: an object whose ``type``, if given, is "object". Checking it
        # against the JSON Schema meta-schema here would refuse bodies the spec allows (the meta-schema's
        # rules for every keyword, recursively, are not in the spec); a model that cannot use a malformed
        # schema fails the run with its own error instead.
        if not isinstance(parameters, dict):
            _fail_type(f"{at}.parameters", "an object (a JSON Schema)", parameters)
        if parameters.get("type", "object") != "object":
            _fail_value(f"{at}.parameters.type", "the parameters of a function must be a JSON Schema of type "
                        "'object'.")
    return FunctionTool(name=name, description=description, parameters=parameters, strict=strict)


def _parse_tool_choice(value: object) -> str | dict[str, Any]:
    if isinstance(value, str):
        if value not in _TOOL_CHOICE_MODES:
            _fail_value("tool_choice", f"{errors.echo(value)}. Supported values are: auto, none, required, or "
                        "{\"type\": \"function\", \"name\": ...}.")
        return value
    if not isinstance(value, dict):
        _fail_type("tool_choice", "a string or an object", value)
    if value.get("type") != "function":
        _fail(
            "tool_choice.type", errors.CODE_UNSUPPORTED_VALUE,
            f"Unsupported value for 'tool_choice.type': {errors.echo(value.get('type'))}. This service supports "
            "only 'function'.",
        )
    for key in value:
        if key not in ("type", "name"):
            _fail_unknown(f"tool_choice.{_key(key)}")
    if "name" not in value:
        _fail_missing("tool_choice.name")
    if not isinstance(value["name"], str):
        _fail_type("tool_choice.name", "a string", value["name"])
    return {"type": "function", "name": value["name"]}


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


def _parse_conversation(value: object) -> str:
    if isinstance(value, str):
        param = "conversation"
        conv_id: object = value
    elif isinstance(value, dict):
        for key in value:
            if key != "id":
                _fail_unknown(f"conversation.{_key(key)}")
        if "id" not in value:
            _fail_missing("conversation.id")
        param, conv_id = "conversation.id", value["id"]
        if not isinstance(conv_id, str):
            _fail_type(param, "a string", conv_id)
    else:
        _fail_type("conversation", "a string or an object with an 'id'", value)
    try:
        return validate_id(conv_id, prefix=CONVERSATION_PREFIX, param=param)
    except InvalidId:
        _fail_bad_id(param, CONVERSATION_PREFIX, conv_id)


class CreateResponseRequest(BaseModel):
    """A validated ``POST /responses`` body. ``conversation`` is normalized to the id string."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    model: str | None = Field(default=None, min_length=1, max_length=MODEL_MAX_LENGTH)
    input: str | list[InputItem]
    instructions: str | None = None
    background: bool = False
    stream: bool = False
    store: bool = True
    previous_response_id: str | None = None
    conversation: str | None = None
    metadata: dict[str, str] | None = None
    stream_options: StreamOptions | None = None
    tools: list[FunctionTool] = Field(default_factory=list)
    tool_choice: str | dict[str, Any] = "auto"

    @model_validator(mode="before")
    @classmethod
    def _drop_ignored(cls, data: Any) -> Any:
        """Remove accepted-and-ignored fields and explicit nulls (null means "use the default")."""
        if not isinstance(data, dict):
            return data
        optional = cls.model_fields.keys() - {"input"}
        return {
            k: v for k, v in data.items() if k not in IGNORED_FIELDS and not (v is None and k in optional)
        }

    @field_validator("input", mode="before")
    @classmethod
    def _check_input(cls, value: object) -> object:
        if isinstance(value, str):
            if not value:
                _fail_value("input", "expected a non-empty string or a non-empty array of input items.")
            return value
        if not isinstance(value, list):
            _fail_type("input", "a string or an array of input items", value)
        if not value:
            _fail_value("input", "expected a non-empty string or a non-empty array of input items.")
        if len(value) > MAX_INPUT_ITEMS:  # before any item is parsed: the refusal costs nothing per item
            _fail_value("input", f"array too long: expected at most {MAX_INPUT_ITEMS} input items, got "
                        f"{len(value)}; continue a longer history with previous_response_id or conversation.")
        return [_parse_item(item, f"input[{i}]") for i, item in enumerate(value)]

    @field_validator("tools", mode="before")
    @classmethod
    def _check_tools(cls, value: object) -> object:
        if not isinstance(value, list):
            _fail_type("tools", "an array", value)
        if len(value) > MAX_TOOLS:
            _fail_value("tools", f"expected at most {MAX_TOOLS} tools, got {len(value)}.")
        tools = [_parse_tool(tool, f"tools[{i}]") for i, tool in enumerate(value)]
        seen: set[str] = set()
        for i, tool in enumerate(tools):
            if tool.name in seen:  # a rule between items that docs/openapi.yaml cannot state; OpenAI: 400
                _fail(f"tools[{i}].name", errors.CODE_DUPLICATE_TOOL_NAME,
                      f"{errors.echo(tool.name)}: tool names must be unique.")
            seen.add(tool.name)
        return tools

    @field_validator("tool_choice", mode="before")
    @classmethod
    def _check_tool_choice(cls, value: object) -> object:
        return _parse_tool_choice(value)

    @field_validator("conversation", mode="before")
    @classmethod
    def _check_conversation(cls, value: object) -> object:
        return _parse_conversation(value)

    @field_validator("previous_response_id")
    @classmethod
    def _check_previous(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            return validate_id(value, prefix=RESPONSE_PREFIX, param="previous_response_id")
        except InvalidId:
            _fail_bad_id("previous_response_id", RESPONSE_PREFIX, value)

    @field_validator("metadata")
    @classmethod
    def _check_metadata(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is None:
            return None
        if len(value) > METADATA_MAX_PAIRS:
            _fail_value("metadata", f"expected at most {METADATA_MAX_PAIRS} pairs, got {len(value)}.")
        for key, item in value.items():
            if len(key) > METADATA_MAX_KEY:
                _fail_value(
                    "metadata", f"keys must be at most {METADATA_MAX_KEY} characters ({errors.echo(key)})."
                )
            if len(item) > METADATA_MAX_VALUE:
                _fail_value(f"metadata.{key}", f"values must be at most {METADATA_MAX_VALUE} characters.")
        return value

    @model_validator(mode="after")
    def _cross_field(self) -> CreateResponseRequest:
        if self.background and not self.store:
            _fail(
                "background",
                errors.CODE_UNSUPPORTED_PARAMETER,
                "background=true requires store=true: a background response must be stored to be retrieved.",
            )
        if self.previous_response_id is not None and self.conversation is not None:
            _fail(
                "previous_response_id",
                errors.CODE_MUTUALLY_EXCLUSIVE,
                "Mutually exclusive parameters: send only one of 'previous_response_id' or 'conversation'.",
            )
        names = [tool.name for tool in self.tools]
        if self.tool_choice == "required" and not names:
            _fail_value("tool_choice", "'required' needs at least one tool in 'tools'.")
        if isinstance(self.tool_choice, dict) and self.tool_choice["name"] not in names:
            # A cross-reference inside the body, which docs/openapi.yaml cannot express; OpenAI: 400.
            _fail("tool_choice.name", errors.CODE_INVALID_VALUE,
                  f"No tool named {errors.echo(self.tool_choice['name'])} in 'tools'.")
        continuing = self.previous_response_id is not None or self.conversation is not None
        approvals = 0
        for i, item in enumerate(self.items()):
            if isinstance(item, FunctionCallOutput | ApprovalResponse) and not continuing:
                what = "call_id" if isinstance(item, FunctionCallOutput) else "approval_request_id"
                _fail_value(f"input[{i}].{what}", "a function_call_output or mcp_approval_response answers an "
                            "earlier turn: send it with previous_response_id (or conversation).")
            if isinstance(item, ApprovalResponse):
                approvals += 1
                if approvals > 1:
                    _fail_value(f"input[{i}].approval_request_id", "a turn can answer one approval request.")
        # A call_id answered twice is refused by the continuation check, once every call_id is known to
        # have been issued (an unknown one is a 404 first).
        return self

    def items(self) -> list[InputItem]:
        """``input`` as a list of items (a string is one user message)."""
        if isinstance(self.input, str):
            return [InputMessage(role="user", content=[TextPart(type="input_text", text=self.input)])]
        return list(self.input)

    def function_outputs(self) -> list[FunctionCallOutput]:
        return [item for item in self.items() if isinstance(item, FunctionCallOutput)]

    def approval_responses(self) -> list[ApprovalResponse]:
        return [item for item in self.items() if isinstance(item, ApprovalResponse)]


# --------------------------------------------------------------------------- entry points


def _param_of(loc: tuple[int | str, ...]) -> str | None:
    """``("input", 0, "content")`` → ``input[0].content``."""
    param = ""
    for part in loc:
        if isinstance(part, int):
            param += f"[{part}]"
        else:
            param += f".{_key(part)}" if param else _key(part)
    return param or None


_EXPECTED: dict[str, str] = {
    "bool_type": "a boolean",
    "string_type": "a string",
    "dict_type": "an object",
    "model_type": "an object",
    "list_type": "an array",
    "int_type": "an integer",
    "float_type": "a number",
}


def _api_error_of(error: ErrorDetails) -> ApiError:
    ctx = error.get("ctx") or {}
    if error["type"] == "api_error":
        return ApiError(int(ctx.get("status", 400)), errors.INVALID_REQUEST, str(ctx["message"]), param=ctx["param"],
                        code=str(ctx["code"]))
    param = _param_of(error["loc"])
    if error["type"] == "extra_forbidden":
        return invalid_request(
            f"Unknown parameter: '{param}'.", param=param, code=errors.CODE_UNKNOWN_PARAMETER
        )
    if error["type"] == "missing":
        return invalid_request(
            f"Missing required parameter: '{param}'.", param=param, code=errors.CODE_MISSING_PARAMETER
        )
    if error["type"].endswith("_type"):
        expected = _EXPECTED.get(error["type"])
        if expected is not None:
            got = _json_kind(error["input"])
            return invalid_request(
                f"Invalid type for '{param}': expected {expected}, but got {got} instead.",
                param=param,
                code=errors.CODE_INVALID_TYPE,
            )
        return invalid_request(
            f"Invalid type for '{param}': {error['msg']}.", param=param, code=errors.CODE_INVALID_TYPE
        )
    return invalid_request(
        f"Invalid value for '{param}': {error['msg']}.", param=param, code=errors.CODE_INVALID_VALUE
    )


def api_error_from_validation(exc: ValidationError) -> ApiError:
    """The one error reported for a bad body: unknown parameters first, then in field order."""
    found = exc.errors()
    found.sort(key=lambda err: err["type"] != "extra_forbidden")
    return _api_error_of(found[0])


def _reject_unpaired_surrogates(data: Any) -> None:
    """400 for the first string (key or value) holding an unpaired UTF-16 surrogate.

    ``json.loads`` accepts ``"\\ud800"``, but such a string cannot be encoded as UTF-8: storing or
    streaming it would fail later (a 500). A bad key is reported at its parent's path (the key itself
    cannot be echoed). Iterative, so deep nesting cannot exhaust the stack.
    """
    stack: list[tuple[Any, tuple[int | str, ...]]] = [(data, ())]
    while stack:
        value, loc = stack.pop()
        if isinstance(value, str):
            if not value.isascii():
                try:
                    value.encode("utf-8")
                except UnicodeEncodeError:
                    param = _param_of(loc)
                    raise invalid_request(
                        f"Invalid value for '{param or 'body'}': a string contains an unpaired UTF-16 surrogate "
                        "(such as \\ud800), which is not valid Unicode.",
                        param=param,
                        code=errors.CODE_INVALID_VALUE,
                    ) from None
        elif isinstance(value, dict):
            for key, item in reversed(list(value.items())):
                stack += [(item, (*loc, key)), (key, loc)]
        elif isinstance(value, list):
            stack += [(value[i], (*loc, i)) for i in reversed(range(len(value)))]


def parse_create_request(raw: bytes) -> CreateResponseRequest:
    """Parse and validate a ``POST /responses`` body; every failure is an ``ApiError`` 400."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):  # JSONDecodeError, bad UTF-8, absurd nesting
        raise invalid_request(
            "The request body is not valid JSON.", param=None, code=errors.CODE_INVALID_JSON
        ) from None
    if not isinstance(data, dict):
        raise invalid_request(
            f"The request body must be a JSON object, got {_json_kind(data)}.",
            param=None,
            code=errors.CODE_INVALID_JSON,
        )
    _reject_unpaired_surrogates(data)
    try:
        return CreateResponseRequest.model_validate(data)
    except ValidationError as exc:
        raise api_error_from_validation(exc) from None


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
