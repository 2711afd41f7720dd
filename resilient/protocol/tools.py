"""The ``tools`` and ``tool_choice`` of a ``POST /responses`` body: function tools only (another tool type is
a clear 400, since ignoring a tool would change the answer)."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from resilient.protocol import errors
from resilient.protocol.request_errors import _fail, _fail_missing, _fail_type, _fail_unknown, _fail_value, _key

_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_FUNCTION_TOOL_KEYS: frozenset[str] = frozenset({"type", "name", "description", "parameters", "strict"})
_TOOL_CHOICE_MODES: tuple[str, ...] = ("auto", "none", "required")
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


