"""The ``input`` of a ``POST /responses`` body: every input item the Responses API accepts, as pydantic
models in a discriminated union on ``type`` (a message may omit it), and their normalisation into stored
items (the input-items listing's shape).

Messages, ``function_call``, ``function_call_output``, ``reasoning``, ``item_reference`` and
``mcp_approval_response`` are modelled here, since the service itself reads them (call ids, references,
approvals). The other item kinds a client echoes back from earlier output (hosted tool calls and their
outputs: ``mcp_call``, ``mcp_list_tools``, ``web_search_call``, ...) are checked strictly against the
``openai`` client's param type of their ``type`` (:mod:`resilient.protocol.typed_check`) and passed on as
sent. Content parts are in :mod:`resilient.protocol.input_parts`.
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Callable
from typing import Annotated, Any, Literal, Protocol

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
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
from resilient.protocol.input_parts import (
    OUTPUT_PARTS,
    ROLE_PARTS,
    ContentPart,
    InputTextPart,
    stored_part,
)
from resilient.protocol.items import ItemStatus, MessageRole, approval_response_item, function_call_output_item
from resilient.protocol.request_errors import fail_type_here, fail_value_here, one_of, tag_error, type_tag
from resilient.protocol.typed_check import check_typed

__all__ = ["HOSTED_ITEM_TYPES", "INPUT_ITEMS", "ApprovalResponse", "FunctionCall", "FunctionCallOutput",
           "HostedItem", "InputItem", "InputMessage", "InputTextPart", "ItemReference", "Reasoning",
           "normalize_input_items"]

_STRICT = ConfigDict(strict=True, extra="forbid", frozen=True)
_ROLES: tuple[MessageRole, ...] = ("user", "system", "developer", "assistant")
# Accepted on input items; a stored message is "completed" (the listing's shape).
_STATUS = one_of(("in_progress", "completed", "incomplete"))
_PHASE = one_of(("commentary", "final_answer"))
# The item kinds checked against the ``openai`` param types (every member of ``ResponseInputItemParam``
# that is not modelled here; tests/unit/test_input_items.py keeps the two lists equal).
HOSTED_ITEM_TYPES: tuple[str, ...] = (
    "file_search_call", "computer_call", "computer_call_output", "web_search_call", "tool_search_call",
    "tool_search_output", "additional_tools", "configuration_update", "compaction", "compaction_trigger",
    "image_generation_call", "code_interpreter_call", "local_shell_call", "local_shell_call_output", "shell_call",
    "shell_call_output", "apply_patch_call", "apply_patch_call_output", "mcp_list_tools", "mcp_approval_request",
    "mcp_call", "custom_tool_call", "custom_tool_call_output", "program", "program_output",
)
_MODELLED = ("message", "function_call", "function_call_output", "reasoning", "item_reference",
             "mcp_approval_response")


def _item_id(value: str) -> str:
    try:
        return validate_id(value, param="id")
    except InvalidId:
        fail_value_here(f"{errors.echo(value)}. Expected 1-128 characters of [A-Za-z0-9_-].")


ItemId = Annotated[str, AfterValidator(_item_id)]


class InputMessage(BaseModel):
    """One input message; ``content`` is always a list of parts (a string becomes one text part)."""

    model_config = _STRICT

    type: Literal["message"] = "message"
    id: ItemId | None = None
    status: Annotated[ItemStatus, _STATUS] | None = None
    phase: Annotated[Literal["commentary", "final_answer"], _PHASE] | None = None
    role: Annotated[MessageRole, one_of(_ROLES, strings_only=True)]
    content: list[ContentPart]

    @field_validator("content", mode="before")
    @classmethod
    def _content(cls, value: object, info: ValidationInfo) -> object:
        # Which part types are allowed depends on the role, a sibling field a discriminator cannot see.
        role = info.data.get("role")
        if role is None:  # the role's own error is reported first
            return value
        if isinstance(value, str):
            value = [{"type": "output_text" if role == "assistant" else "input_text", "text": value}]
        elif not isinstance(value, list):
            fail_type_here("a string or an array of content parts", value)
        elif not value:
            fail_value_here("expected a non-empty array of content parts.")
        return ROLE_PARTS[role].validate_python(value, strict=True)


def _caller(value: object) -> object:
    from openai.types.responses.response_function_tool_call_param import Caller

    return check_typed(Caller, value)


class FunctionCall(BaseModel):
    """A ``function_call`` item: a call the model made, sent back as history (stateless tool loops)."""

    model_config = _STRICT

    type: Literal["function_call"] = "function_call"
    call_id: ItemId
    name: str = Field(min_length=1, max_length=128)
    arguments: str
    id: ItemId | None = None
    status: Annotated[ItemStatus, _STATUS] | None = None
    namespace: str | None = None
    caller: Annotated[dict[str, Any], BeforeValidator(_caller)] | None = None


class FunctionCallOutput(BaseModel):
    """A ``function_call_output`` item: the client's answer to a ``function_call``. ``output`` is a string
    or a list of ``input_text``/``input_image``/``input_file`` parts.

    As in every model here, the field order is the order in which errors are reported."""

    model_config = _STRICT

    type: Literal["function_call_output"] = "function_call_output"
    call_id: ItemId
    output: str | list[ContentPart]
    id: ItemId | None = None
    status: Annotated[ItemStatus, _STATUS] | None = None
    name: str | None = None
    namespace: str | None = None
    caller: Annotated[dict[str, Any], BeforeValidator(_caller)] | None = None

    @field_validator("output", mode="before")
    @classmethod
    def _output(cls, value: object) -> object:
        if isinstance(value, str):
            return value
        if not isinstance(value, list):
            fail_type_here("a string or an array of input_text, input_image or input_file parts", value)
        return OUTPUT_PARTS.validate_python(value, strict=True)


class SummaryText(BaseModel):
    model_config = _STRICT

    type: Annotated[Literal["summary_text"], one_of(("summary_text",))]
    text: str


class ReasoningText(BaseModel):
    model_config = _STRICT

    type: Annotated[Literal["reasoning_text"], one_of(("reasoning_text",))]
    text: str


class Reasoning(BaseModel):
    """A ``reasoning`` item sent back as history, with its ``encrypted_content`` when the model gave one."""

    model_config = _STRICT

    type: Literal["reasoning"] = "reasoning"
    id: ItemId
    summary: list[SummaryText]
    content: list[ReasoningText] | None = None
    encrypted_content: str | None = None
    status: Annotated[ItemStatus, _STATUS] | None = None


class ItemReference(BaseModel):
    """An ``item_reference``: an item of an earlier turn of the chain, named by its id."""

    model_config = _STRICT

    type: Literal["item_reference"] | None = "item_reference"
    id: ItemId


class ApprovalResponse(BaseModel):
    """An ``mcp_approval_response`` item: a person's answer to an ``mcp_approval_request``."""

    model_config = _STRICT

    type: Literal["mcp_approval_response"] = "mcp_approval_response"
    approval_request_id: ItemId
    approve: bool
    reason: str | None = None
    id: ItemId | None = None


@functools.cache
def _param_types() -> dict[str, Any]:
    """``type`` → the ``openai`` param class of each hosted item kind."""
    from openai.types.responses.response_input_item_param import ResponseInputItemParam

    found: dict[str, Any] = {}
    for member in typing.get_args(ResponseInputItemParam):
        for kind in typing.get_args(typing.get_type_hints(member).get("type")):
            if isinstance(kind, str) and kind in HOSTED_ITEM_TYPES:
                found[kind] = member
    return found


class HostedItem(BaseModel):
    """An item kind the service passes on without reading (hosted tool calls and outputs), as sent."""

    model_config = ConfigDict(frozen=True)

    type: str
    data: dict[str, Any]

    @property
    def id(self) -> str | None:
        found = self.data.get("id")
        return found if isinstance(found, str) else None


def _hosted(value: Any) -> HostedItem:
    if isinstance(value, HostedItem):
        return value
    param_type = _param_types().get(value["type"])
    if param_type is None:  # a kind the installed ``openai`` types do not know
        fail_value_here(f"{errors.echo(value['type'])} is not supported by this service.", suffix=".type")
    check_typed(param_type, value)
    if "id" in value and value["id"] is not None:
        if not isinstance(value["id"], str):
            fail_type_here("a string", value["id"])
        try:
            validate_id(value["id"], param="id")
        except InvalidId:
            fail_value_here(f"{errors.echo(value['id'])}. Expected 1-128 characters of [A-Za-z0-9_-].", suffix=".id")
    return HostedItem(type=value["type"], data=dict(value))


def _item_tag(value: Any) -> object:
    if isinstance(value, HostedItem | ItemReference):  # validated already (the field's second pass)
        return "hosted" if isinstance(value, HostedItem) else "item_reference"
    if not isinstance(value, dict):
        return type_tag(value, "message")
    kind = value.get("type")
    if kind is None and "role" not in value and "id" in value:
        return "item_reference"  # its type may be omitted or null
    if "type" not in value:
        return "message"
    return "hosted" if kind in HOSTED_ITEM_TYPES else kind


_SUPPORTED = ", ".join(_MODELLED) + ", and the tool call items of the Responses API (mcp_call, ...)"
InputItem = Annotated[
    Annotated[InputMessage, Tag("message")]
    | Annotated[FunctionCall, Tag("function_call")]
    | Annotated[FunctionCallOutput, Tag("function_call_output")]
    | Annotated[Reasoning, Tag("reasoning")]
    | Annotated[ItemReference, Tag("item_reference")]
    | Annotated[ApprovalResponse, Tag("mcp_approval_response")]
    | Annotated[HostedItem, BeforeValidator(_hosted), Tag("hosted")],
    Discriminator(
        _item_tag,
        custom_error_type="api_tag",
        custom_error_message="unsupported input item type",
        custom_error_context=tag_error(errors.CODE_INVALID_VALUE, "Invalid value for",
                                       f": {{value}}. Supported values are: {_SUPPORTED}."),
    ),
]
INPUT_ITEMS: TypeAdapter[list[InputItem]] = TypeAdapter(list[InputItem])


class HasInputItems(Protocol):
    """What normalising needs of a request (``CreateResponseRequest``): its input as items."""

    def items(self) -> list[InputItem]: ...


def _message(item: InputMessage, item_id: str) -> dict[str, Any]:
    stored = {"id": item_id, "type": "message", "role": item.role, "status": "completed",
              "content": [stored_part(part) for part in item.content]}
    if item.role == "assistant" and item.phase is not None:
        stored["phase"] = item.phase
    return stored


def stored_item(item: InputItem, item_id: str) -> dict[str, Any]:
    """One input item in the input-items listing's shape, with ``item_id``: as sent, every part and its data
    included; messages carry a list of parts and a status, as the ``openai`` listing types require."""
    if isinstance(item, InputMessage):
        return _message(item, item_id)
    if isinstance(item, FunctionCallOutput):
        output = item.output if isinstance(item.output, str) else [stored_part(part) for part in item.output]
        return function_call_output_item(item_id, item.call_id, output)
    if isinstance(item, ApprovalResponse):
        return approval_response_item(item_id, item.approval_request_id, item.approve, item.reason)
    if isinstance(item, ItemReference):
        return {"type": "item_reference", "id": item.id}
    if isinstance(item, HostedItem):
        return {**item.data, "id": item_id}
    stored = item.model_dump(exclude_unset=True, exclude_none=True)
    stored.update(type=item.type, id=item_id)
    if isinstance(item, FunctionCall):
        stored["status"] = item.status or "completed"
    return stored


def normalize_input_items(
    req: HasInputItems, new_id: Callable[[], str], typed_id: Callable[[str], str] | None = None
) -> list[dict[str, Any]]:
    """The request's input as stored items, each with its id: the one sent, else a new one (``typed_id``,
    when given, makes the ids of non-message items from their type, for the id prefix)."""
    items: list[dict[str, Any]] = []
    for item in req.items():
        item_id = item.id
        if item_id is None:
            item_id = new_id() if typed_id is None or isinstance(item, InputMessage) else typed_id(str(item.type))
        items.append(stored_item(item, item_id))
    return items
