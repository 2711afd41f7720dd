"""The ``input`` of a ``POST /responses`` body: messages (with text parts), ``function_call_output`` and
``mcp_approval_response`` items, as pydantic models (a discriminated union on ``type``; a message may omit
it), and their normalisation into stored items (the input-items listing's shape)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal, Protocol

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
    ValidationInfo,
    field_validator,
)

from resilient.ids import InvalidId, validate_id
from resilient.protocol import errors
from resilient.protocol.items import (
    ItemStatus,
    MessageRole,
    approval_response_item,
    function_call_output_item,
    input_text_part,
    output_message,
    output_text_part,
)
from resilient.protocol.request_errors import fail_type_here, fail_value_here, one_of, tag_error, type_tag

_STRICT = ConfigDict(strict=True, extra="forbid", frozen=True)
_ROLES: tuple[MessageRole, ...] = ("user", "system", "developer", "assistant")
# Accepted on input items and ignored (the stored item gets its own id and status).
_STATUS = one_of(("in_progress", "completed", "incomplete"))
_PHASE = one_of(("commentary", "final_answer"))


def _item_id(value: str) -> str:
    try:
        return validate_id(value, param="id")
    except InvalidId:
        fail_value_here(f"{errors.echo(value)}. Expected 1-128 characters of [A-Za-z0-9_-].")


ItemId = Annotated[str, AfterValidator(_item_id)]


class CacheBreakpoint(BaseModel):
    """An input part's ``prompt_cache_breakpoint`` (accepted and ignored)."""

    model_config = _STRICT

    mode: Annotated[Literal["explicit"], one_of(("explicit",), quoted=True)]
    ttl: Annotated[Literal["30m", "12h"] | None, one_of(("30m", "12h"), quoted=True)] = None


class InputTextPart(BaseModel):
    """An ``input_text`` part (of a user, system or developer message, or of a function call's output)."""

    model_config = _STRICT

    type: Literal["input_text"] = "input_text"
    # Accepted and ignored; it may be absent but not null (the OpenAI API's type), so None is only a default.
    prompt_cache_breakpoint: CacheBreakpoint = None  # type: ignore[assignment]
    text: str


class OutputTextPart(BaseModel):
    """An ``output_text`` part of an assistant message (``annotations`` and ``logprobs`` are ignored)."""

    model_config = _STRICT

    type: Literal["output_text"] = "output_text"
    annotations: list[Any] = Field(default_factory=list)
    logprobs: list[Any] = Field(default_factory=list)
    text: str


TextPart = Annotated[InputTextPart | OutputTextPart, Field(discriminator="type")]


def _parts_for(role: str) -> TypeAdapter[list[TextPart]]:
    """The content parts a message of ``role`` may hold: a discriminated union on ``type`` that admits only
    the role's part type (assistant history is ``output_text``, every other role ``input_text``)."""
    allowed = "output_text" if role == "assistant" else "input_text"

    def tag(value: Any) -> object:
        kind = type_tag(value, allowed)
        return kind if kind == allowed else None

    part: Any = Annotated[
        Annotated[InputTextPart, Tag("input_text")] | Annotated[OutputTextPart, Tag("output_text")],
        Discriminator(tag, custom_error_type="api_tag", custom_error_message="unsupported part type",
                      custom_error_context=tag_error(errors.CODE_INVALID_VALUE, "Invalid value for", f": {{value}}. "
                                                     f"Supported values for role '{role}' are: '{allowed}'.",
                                                     missing="absent or null")),
    ]
    return TypeAdapter(list[part])  # type: ignore[valid-type]


_PARTS: dict[str, TypeAdapter[list[TextPart]]] = {role: _parts_for(role) for role in _ROLES}


class InputMessage(BaseModel):
    """One input message; ``content`` is always a list of parts (a string becomes one part)."""

    model_config = _STRICT

    type: Literal["message"] = "message"
    id: str | None = None
    status: Annotated[ItemStatus, _STATUS] | None = None
    phase: Annotated[Literal["commentary", "final_answer"], _PHASE] | None = None
    role: Annotated[MessageRole, one_of(_ROLES, strings_only=True)]
    content: list[TextPart]

    @field_validator("content", mode="before")
    @classmethod
    def _content(cls, value: object, info: ValidationInfo) -> object:
        # Which part type is allowed depends on the role, a sibling field a discriminator cannot see.
        role = info.data.get("role")
        if role is None:  # the role's own error is reported first
            return value
        if isinstance(value, str):
            value = [{"type": "output_text" if role == "assistant" else "input_text", "text": value}]
        elif not isinstance(value, list):
            fail_type_here("a string or an array of content parts", value)
        elif not value:
            fail_value_here("expected a non-empty array of content parts.")
        return _PARTS[role].validate_python(value, strict=True)


class FunctionCallOutput(BaseModel):
    """A ``function_call_output`` input item: the client's answer to a ``function_call``.

    As in every model here, the field order is the order in which errors are reported (so a body with both
    a bad ``output`` and a bad ``id`` or ``status`` is told about ``output``)."""

    model_config = _STRICT

    type: Literal["function_call_output"] = "function_call_output"
    call_id: ItemId
    output: str | list[TextPart]
    id: str | None = None
    status: Annotated[ItemStatus, _STATUS] | None = None

    @field_validator("output", mode="before")
    @classmethod
    def _output(cls, value: object) -> object:
        if isinstance(value, str):
            return value
        if not isinstance(value, list):
            fail_type_here("a string or an array of input_text parts", value)
        return _PARTS["user"].validate_python(value, strict=True)


class ApprovalResponse(BaseModel):
    """An ``mcp_approval_response`` input item: a person's answer to an ``mcp_approval_request``."""

    model_config = _STRICT

    type: Literal["mcp_approval_response"] = "mcp_approval_response"
    approval_request_id: ItemId
    approve: bool
    reason: str | None = None
    id: str | None = None


InputItem = Annotated[
    Annotated[InputMessage, Tag("message")]
    | Annotated[FunctionCallOutput, Tag("function_call_output")]
    | Annotated[ApprovalResponse, Tag("mcp_approval_response")],
    Discriminator(
        lambda value: "message" if isinstance(value, dict) and "type" not in value else type_tag(value, "message"),
        custom_error_type="api_tag",
        custom_error_message="unsupported input item type",
        custom_error_context=tag_error(errors.CODE_INVALID_VALUE, "Invalid value for", ": {value}. Supported values "
                                       "are: message, function_call_output, mcp_approval_response."),
    ),
]
INPUT_ITEMS: TypeAdapter[list[InputItem]] = TypeAdapter(list[InputItem])


class HasInputItems(Protocol):
    """What normalising needs of a request (``CreateResponseRequest``): its input as items."""

    def items(self) -> list[InputItem]: ...


def normalize_input_items(
    req: HasInputItems, new_id: Callable[[], str], typed_id: Callable[[str], str] | None = None
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
