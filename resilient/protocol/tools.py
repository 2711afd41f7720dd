"""The ``tools`` and ``tool_choice`` of a ``POST /responses`` body: function tools only (another tool type is
a clear 400, since ignoring a tool would change the answer). Both are discriminated unions on ``type``."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Discriminator, Tag, TypeAdapter

from resilient.protocol import errors
from resilient.protocol.request_errors import fail_type_here, fail_value_here, one_of, tag_error, type_tag

_STRICT = ConfigDict(strict=True, extra="forbid", frozen=True)
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def _check_name(name: str) -> str:
    if not _TOOL_NAME.fullmatch(name):
        fail_value_here(f"{errors.echo(name)}. Expected 1-64 characters of [A-Za-z0-9_-].")
    return name


def _check_parameters(schema: object) -> object:
    if not isinstance(schema, dict):
        fail_type_here("an object (a JSON Schema)", schema)
    # Only what docs/openapi.yaml states: an object whose ``type``, if given, is "object". Checking it
    # against the JSON Schema meta-schema here would refuse bodies the spec allows (the meta-schema's
    # rules for every keyword, recursively, are not in the spec); a model that cannot use a malformed
    # schema fails the run with its own error instead.
    if schema.get("type", "object") != "object":
        fail_value_here("the parameters of a function must be a JSON Schema of type 'object'.", suffix=".type")
    return schema


class FunctionTool(BaseModel):
    """A ``function`` tool. ``parameters`` is a JSON Schema of type ``object`` (passed to the model as is)."""

    model_config = _STRICT

    type: Literal["function"] = "function"
    name: Annotated[str, AfterValidator(_check_name)]
    description: str | None = None
    strict: bool | None = None
    parameters: Annotated[dict[str, Any], BeforeValidator(_check_parameters)] | None = None

    def to_json(self) -> dict[str, Any]:
        """The tool as the response object echoes it (``FunctionTool``)."""
        return {"type": "function", "name": self.name, "description": self.description,
                "parameters": self.parameters, "strict": self.strict}


# A discriminated union of one member: the type is checked before anything else in the tool, so a tool of
# another type (with its own fields) is refused for its type, not for a field a function tool lacks.
Tool = Annotated[
    Annotated[FunctionTool, Tag("function")],
    Discriminator(
        lambda value: type_tag(value, "function"),
        custom_error_type="api_tag",
        custom_error_message="unsupported tool type",
        custom_error_context=tag_error(errors.CODE_UNSUPPORTED_VALUE, "Unsupported value for", ": {value}. This "
                                       "service supports only tools of type 'function'.", missing="absent"),
    ),
]
TOOLS: TypeAdapter[list[FunctionTool]] = TypeAdapter(list[Tool])


class ToolChoiceFunction(BaseModel):
    """``tool_choice`` naming one function tool."""

    model_config = _STRICT

    type: Literal["function"]
    name: str


ToolChoiceMode = Literal["auto", "none", "required"]
_MODES: tuple[ToolChoiceMode, ...] = ("auto", "none", "required")
_TOOL_CHOICE: TypeAdapter[ToolChoiceMode | ToolChoiceFunction] = TypeAdapter(
    Annotated[
        Annotated[ToolChoiceMode, one_of(_MODES, more=', or {"type": "function", "name": ...}'), Tag("mode")]
        | Annotated[ToolChoiceFunction, Tag("function")],
        Discriminator(
            lambda value: "mode" if isinstance(value, str) else type_tag(value, None),
            custom_error_type="api_tag",
            custom_error_message="unsupported tool_choice",
            custom_error_context=tag_error(errors.CODE_UNSUPPORTED_VALUE, "Unsupported value for",
                                           ": {value}. This service supports only 'function'.",
                                           expected="a string or an object"),
        ),
    ]
)


def parse_tool_choice(value: object) -> str | dict[str, Any]:
    """``tool_choice`` validated: a mode, or ``{"type": "function", "name": ...}`` as a dict."""
    choice = _TOOL_CHOICE.validate_python(value, strict=True)
    return choice if isinstance(choice, str) else choice.model_dump()
