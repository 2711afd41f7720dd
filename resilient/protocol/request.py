"""``POST /responses`` request validation.

Every malformed body becomes a 400 that names the offending ``param`` with a JSON path
(``input[0].content[1].text``), never a 500 and never a silently ignored typo: unknown fields are
rejected; every create parameter the ``openai`` client sends is accepted, validated and stored for the
agent (``create_params.py``), so stock clients work. ``tools`` accepts function tools only (another tool
type is a clear 400, since ignoring a tool would change the answer), and ``input`` accepts every input
item kind of the Responses API (``input_items.py``). Whether a ``call_id``, an ``approval_request_id``
or an ``item_reference`` names something the input or the chain really has needs storage:
``resilient/engine/chain/continuation.py`` checks that.

The model is strict (no ``"true"`` → ``True`` coercion) and frozen. Input items, their content parts,
tools and ``tool_choice`` are pydantic models in discriminated unions on ``type`` (a message may omit
it), each strict with unknown keys forbidden; pydantic's own errors are translated into the API's
messages. Rules that pydantic cannot express with an exact message (ids, metadata limits, cross-field
rules) raise custom errors from validators, so ``CreateResponseRequest.model_validate`` enforces
everything on its own and :func:`parse_create_request` only translates the first error into an
:class:`ApiError`.

The parts live beside it: ``input_items.py`` and ``input_parts.py`` (the input, and its normalisation
into stored items), ``create_params.py`` (model and sampling parameters),
``tools.py`` (``tools`` and ``tool_choice``), ``request_errors.py`` (the custom errors and the translation of
every validation error).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from resilient.ids import CONVERSATION_PREFIX, RESPONSE_PREFIX, InvalidId, response_of_item, validate_id
from resilient.protocol import errors
from resilient.protocol.create_params import CreateParams
from resilient.protocol.errors import invalid_request
from resilient.protocol.input_items import (
    INPUT_ITEMS,
    ApprovalResponse,
    FunctionCall,
    FunctionCallOutput,
    InputItem,
    InputMessage,
    InputTextPart,
    ItemReference,
    normalize_input_items,
)
from resilient.protocol.request_errors import (
    _fail,
    _fail_bad_id,
    _fail_type,
    _fail_value,
    _json_kind,
    _param_of,
    api_error_from_validation,
    fail_value_here,
    tag_error,
)
from resilient.protocol.tools import TOOLS, FunctionTool, parse_tool_choice

__all__ = ["ApprovalResponse", "CreateResponseRequest", "FunctionCall", "FunctionCallOutput", "FunctionTool",
           "InputItem", "InputMessage", "ItemReference", "api_error_from_validation", "normalize_input_items",
           "parse_create_request"]

METADATA_MAX_PAIRS = 16
METADATA_MAX_KEY = 64
METADATA_MAX_VALUE = 512
MODEL_MAX_LENGTH = 256

MAX_TOOLS = 128
# Input items per create. Each item is one table row, written in transactions of 100 before the create
# answers, so the count bounds the create's storage work (21 transactions at most; on Azurite each
# transaction also gets slower as the response's partition grows, so 20,000 items took minutes). Longer histories
# belong to the chain: previous_response_id and conversation carry earlier turns without resending them.
MAX_INPUT_ITEMS = 2048


# --------------------------------------------------------------------------- models


class StreamOptions(BaseModel):
    """``stream_options``; ``include_obfuscation`` is accepted and has no effect."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    include_obfuscation: bool = True


def _conversation_id(value: str) -> str:
    try:
        return validate_id(value, prefix=CONVERSATION_PREFIX, param="conversation")
    except InvalidId:
        fail_value_here(f"{errors.echo(value)}. Expected an id starting with '{CONVERSATION_PREFIX}', 1-128 "
                        "characters of [A-Za-z0-9_-].")


ConversationId = Annotated[str, AfterValidator(_conversation_id)]


class ConversationRef(BaseModel):
    """``conversation`` as an object."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    id: ConversationId


# A conversation id, or an object holding one.
_CONVERSATION: TypeAdapter[str | ConversationRef] = TypeAdapter(
    Annotated[
        Annotated[ConversationId, Tag("string")] | Annotated[ConversationRef, Tag("object")],
        Discriminator(
            lambda value: "string" if isinstance(value, str) else "object" if isinstance(value, dict) else None,
            custom_error_type="api_tag",
            custom_error_message="not a conversation",
            custom_error_context=tag_error(errors.CODE_INVALID_TYPE, "", "",
                                           expected="a string or an object with an 'id'"),
        ),
    ]
)


def check_metadata(value: dict[str, str] | None) -> dict[str, str] | None:
    """OpenAI's metadata limits (16 pairs, keys ≤ 64, values ≤ 512 characters); shared by every body."""
    if value is None:
        return None
    if len(value) > METADATA_MAX_PAIRS:
        _fail_value("metadata", f"expected at most {METADATA_MAX_PAIRS} pairs, got {len(value)}.")
    for key, item in value.items():
        if len(key) > METADATA_MAX_KEY:
            _fail_value("metadata", f"keys must be at most {METADATA_MAX_KEY} characters ({errors.echo(key)}).")
        if len(item) > METADATA_MAX_VALUE:
            _fail_value(f"metadata.{key}", f"values must be at most {METADATA_MAX_VALUE} characters.")
    return value


class CreateResponseRequest(CreateParams):
    """A validated ``POST /responses`` body. ``conversation`` is normalized to the id string; the model and
    sampling parameters are the base class's (``create_params.py``)."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    model: str | None = Field(default=None, min_length=1, max_length=MODEL_MAX_LENGTH)
    input: str | list[InputItem]
    instructions: str | None = None
    background: bool = False
    stream: bool = False
    store: bool = True
    previous_response_id: str | None = None
    conversation: str | None = None
    metadata: Annotated[dict[str, str] | None, AfterValidator(check_metadata)] = None
    stream_options: StreamOptions | None = None
    tools: list[FunctionTool] = Field(default_factory=list)
    tool_choice: str | dict[str, Any] = "auto"

    @model_validator(mode="before")
    @classmethod
    def _drop_nulls(cls, data: Any) -> Any:
        """Remove explicit nulls of optional fields (null means "use the default")."""
        if not isinstance(data, dict):
            return data
        optional = cls.model_fields.keys() - {"input"}
        return {k: v for k, v in data.items() if not (v is None and k in optional)}

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
        # Through the adapter rather than the field's ``str | list`` union, whose member labels would land in
        # every error's location.
        return INPUT_ITEMS.validate_python(value, strict=True)

    @field_validator("tools", mode="before")
    @classmethod
    def _check_tools(cls, value: object) -> object:
        if not isinstance(value, list):
            _fail_type("tools", "an array", value)
        if len(value) > MAX_TOOLS:
            _fail_value("tools", f"expected at most {MAX_TOOLS} tools, got {len(value)}.")
        tools = TOOLS.validate_python(value, strict=True)
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
        return parse_tool_choice(value)

    @field_validator("conversation", mode="before")
    @classmethod
    def _check_conversation(cls, value: object) -> object:
        conversation = _CONVERSATION.validate_python(value, strict=True)
        return conversation if isinstance(conversation, str) else conversation.id

    @field_validator("previous_response_id")
    @classmethod
    def _check_previous(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            return validate_id(value, prefix=RESPONSE_PREFIX, param="previous_response_id")
        except InvalidId:
            _fail_bad_id("previous_response_id", RESPONSE_PREFIX, value)

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
        seen_ids: set[str] = set()
        for i, item in enumerate(self.items()):
            names_response = isinstance(item, ApprovalResponse) and response_of_item(item.approval_request_id)
            if isinstance(item, ApprovalResponse) and not continuing and not names_response:
                # Without either, the request's id must name its stored response (continuation.answered_turn).
                _fail_value(f"input[{i}].approval_request_id", "an mcp_approval_response answers an earlier turn: "
                            "send it with previous_response_id (or conversation), or answer a stored approval "
                            "request by its id.")
            if isinstance(item, ApprovalResponse):
                approvals += 1
                if approvals > 1:
                    _fail_value(f"input[{i}].approval_request_id", "a turn can answer one approval request.")
            if item.id is not None:  # the stored id: one per item of the response
                if item.id in seen_ids:
                    _fail_value(f"input[{i}].id", f"Duplicate item found with id {errors.echo(item.id)}.")
                seen_ids.add(item.id)
        # Which call_ids a function_call_output may answer (this input's calls, the chain's) and which calls
        # must be answered is the continuation check's (resilient/engine/chain/continuation.py).
        return self

    def items(self) -> list[InputItem]:
        """``input`` as a list of items (a string is one user message)."""
        if isinstance(self.input, str):
            return [InputMessage(role="user", content=[InputTextPart(text=self.input)])]
        return list(self.input)

    def function_outputs(self) -> list[FunctionCallOutput]:
        return [item for item in self.items() if isinstance(item, FunctionCallOutput)]

    def approval_responses(self) -> list[ApprovalResponse]:
        return [item for item in self.items() if isinstance(item, ApprovalResponse)]

    def function_calls(self) -> list[FunctionCall]:
        """The model's calls sent back as history (a stateless tool loop resends them with their outputs)."""
        return [item for item in self.items() if isinstance(item, FunctionCall)]

    def item_references(self) -> list[ItemReference]:
        return [item for item in self.items() if isinstance(item, ItemReference)]


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


