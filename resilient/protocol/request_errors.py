"""How ``POST /responses`` validation failures become API errors: the custom errors the validators raise,
and the translation of a pydantic ``ValidationError`` (its own error types included) into the first
:class:`ApiError`, with the exact ``param`` path, ``code`` and message a client sees.

Custom errors come in three kinds: ``api_error`` names its ``param`` outright (rules between fields);
``api_here`` is at the validated value's own place (``{head} '<param>'{tail}``, the place filled in from
the error's location, so a model's validator need not know where in the body it is); ``api_tag`` is a
discriminated union that finds no member (an unknown or missing ``type``, or a value of no member's kind;
the wording is the union's ``custom_error_context``).
"""

from __future__ import annotations

from typing import Any, NoReturn

from pydantic import BaseModel, BeforeValidator, ValidationError
from pydantic_core import ErrorDetails, PydanticCustomError

from resilient.protocol import errors
from resilient.protocol.errors import ApiError, invalid_request

_MAX_KEY_ECHO = 64
# The Tag names of the request's discriminated unions. pydantic puts the chosen tag into an error's
# location (``input, 0, "message", "role"``); it never belongs in the ``param`` a client sees.
UNION_TAGS: frozenset[str] = frozenset(
    {"message", "function_call", "function_call_output", "mcp_approval_response", "reasoning", "item_reference",
     "hosted", "input_text", "input_image", "input_file", "output_text", "refusal", "function", "mode", "string",
     "object"}
)
# A tag follows a list index or, for a field that is a string or an object, the field itself.
_UNION_FIELDS: frozenset[str] = frozenset({"tool_choice", "conversation"})


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


def type_tail(expected: str, value: object) -> str:
    """How every type error's message ends, after ``Invalid type for '<param>'``."""
    return f": expected {expected}, but got {_json_kind(value)} instead."



def _fail(param: str | None, code: str, message: str, *, status: int = 400) -> NoReturn:
    raise PydanticCustomError("api_error", "{message}",
                              {"param": param, "code": code, "message": message, "status": status})


def _fail_type(param: str, expected: str, value: object) -> NoReturn:
    _fail(param, errors.CODE_INVALID_TYPE, f"Invalid type for '{param}'{type_tail(expected, value)}")


def _fail_value(param: str | None, detail: str) -> NoReturn:
    _fail(param, errors.CODE_INVALID_VALUE, f"Invalid value for '{param}': {detail}")


def _fail_bad_id(param: str, prefix: str, value: object) -> NoReturn:
    _fail_value(
        param,
        f"{errors.echo(value)}. Expected an id starting with '{prefix}', 1-128 characters of [A-Za-z0-9_-].",
    )


def fail_here(code: str, head: str, tail: str, suffix: str = "") -> NoReturn:
    """An error at the value being validated (or at ``suffix`` inside it, such as ``.type``): the message is
    ``{head} '<its param>'{tail}``."""
    raise PydanticCustomError("api_here", "{head} '...'{tail}",
                              {"code": code, "head": head, "tail": tail, "suffix": suffix})


def fail_type_here(expected: str, value: object) -> NoReturn:
    fail_here(errors.CODE_INVALID_TYPE, "Invalid type for", type_tail(expected, value))


def fail_value_here(detail: str, *, suffix: str = "") -> NoReturn:
    fail_here(errors.CODE_INVALID_VALUE, "Invalid value for", f": {detail}", suffix)


def type_tag(value: Any, default: object) -> object:
    """A discriminator's tag: an object's ``type`` (None when absent); ``default`` for anything else, so
    that the default member reports "expected an object"."""
    if isinstance(value, BaseModel):
        return getattr(value, "type")  # noqa: B009 (a union member: BaseModel does not declare it)
    return value.get("type") if isinstance(value, dict) else default


def tag_error(code: str, head: str, tail: str, *, missing: str = "",
              expected: str = "an object") -> dict[str, int | str | float]:
    """The ``custom_error_context`` of a discriminated union on ``type`` (translated by :func:`_tag_error`):
    ``{head} '<param>.type'{tail}``, where ``{value}`` in ``tail`` is the echoed type. ``missing``: when a
    type counts as missing, "absent" or "absent or null" ("": a missing type is not an error of its own).
    ``expected``: the type error's wording for a value that is not an object."""
    return {"code": code, "head": head, "tail": tail, "missing": missing, "expected": expected}


def one_of(values: tuple[str, ...], *, quoted: bool = False, strings_only: bool = False,
           more: str = "") -> BeforeValidator:
    """A value from ``values`` (pydantic's ``literal_error`` does not say which values, as a client reads them):
    ``'x'. Supported values are: a, b.`` (``quoted``: ``'a', 'b'``; ``more`` is appended to the list). With
    ``strings_only``, a value that is not a string is a type error instead."""
    listed = ", ".join(f"'{v}'" if quoted else v for v in values) + more

    def check(value: object) -> object:
        if strings_only and not isinstance(value, str):
            fail_type_here("a string", value)
        if value not in values:
            fail_value_here(f"{errors.echo(value)}. Supported values are: {listed}.")
        return value

    return BeforeValidator(check)


# --------------------------------------------------------------------------- translation

_BOUNDS = {"less_than_equal": ("<=", "le"), "greater_than_equal": (">=", "ge"), "less_than": ("<", "lt"),
           "greater_than": (">", "gt")}


def _number(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def value_detail(error: ErrorDetails) -> str:
    """What follows ``Invalid value for '<param>': `` for one of pydantic's own value errors: a bound
    as OpenAI words it (``expected a value <= 2, but got 3 instead.``), else pydantic's sentence."""
    bound = _BOUNDS.get(error["type"])
    ctx = error.get("ctx") or {}
    if bound is not None and bound[1] in ctx:
        return f"expected a value {bound[0]} {_number(ctx[bound[1]])}, but got {_number(error['input'])} instead."
    return f"{error['msg']}."



def _param_of(loc: tuple[int | str, ...]) -> str | None:
    """``("input", 0, "message", "content")`` → ``input[0].content`` (union tags dropped)."""
    param = ""
    previous: int | str | None = None
    for part in loc:
        if isinstance(part, int):
            param += f"[{part}]"
        elif not (part in UNION_TAGS and (isinstance(previous, int) or previous in _UNION_FIELDS)):
            param += f".{_key(part)}" if param else _key(part)
        previous = part
    return param or None


EXPECTED_KINDS: dict[str, str] = {
    "bool_type": "a boolean",
    "string_type": "a string",
    "dict_type": "an object",
    "model_type": "an object",
    "list_type": "an array",
    "int_type": "an integer",
    "float_type": "a number",
}


def _tag_error(error: ErrorDetails, param: str | None) -> ApiError:
    ctx = error.get("ctx") or {}
    value = error["input"]
    if not isinstance(value, dict):
        return invalid_request(f"Invalid type for '{param}'{type_tail(str(ctx['expected']), value)}",
                               param=param, code=errors.CODE_INVALID_TYPE)
    at = f"{param}.type"
    missing = ctx["missing"]
    if missing and (value.get("type") is None if missing == "absent or null" else "type" not in value):
        return invalid_request(f"Missing required parameter: '{at}'.", param=at, code=errors.CODE_MISSING_PARAMETER)
    tail = str(ctx["tail"]).replace("{value}", errors.echo(value.get("type")))
    return invalid_request(f"{ctx['head']} '{at}'{tail}", param=at, code=str(ctx["code"]))


def _api_error_of(error: ErrorDetails) -> ApiError:
    ctx = error.get("ctx") or {}
    if error["type"] == "api_error":
        return ApiError(int(ctx.get("status", 400)), errors.INVALID_REQUEST, str(ctx["message"]), param=ctx["param"],
                        code=str(ctx["code"]))
    param = _param_of(error["loc"])
    if error["type"] == "api_here":
        param = f"{param}{ctx['suffix']}"
        return invalid_request(f"{ctx['head']} '{param}'{ctx['tail']}", param=param, code=str(ctx["code"]))
    if error["type"] == "api_tag":
        return _tag_error(error, param)
    if error["type"] == "extra_forbidden":
        return invalid_request(
            f"Unknown parameter: '{param}'.", param=param, code=errors.CODE_UNKNOWN_PARAMETER
        )
    if error["type"] == "missing":
        return invalid_request(
            f"Missing required parameter: '{param}'.", param=param, code=errors.CODE_MISSING_PARAMETER
        )
    if error["type"].endswith("_type"):
        expected = EXPECTED_KINDS.get(error["type"])
        if expected is not None:
            return invalid_request(f"Invalid type for '{param}'{type_tail(expected, error['input'])}",
                                   param=param, code=errors.CODE_INVALID_TYPE)
        return invalid_request(
            f"Invalid type for '{param}': {error['msg']}.", param=param, code=errors.CODE_INVALID_TYPE
        )
    return invalid_request(f"Invalid value for '{param}': {value_detail(error)}", param=param,
                           code=errors.CODE_INVALID_VALUE)


def _first(found: list[ErrorDetails]) -> ErrorDetails:
    """The error a client is told about. An unknown key of the body itself (or of ``stream_options``) comes
    first; otherwise the first error in field order, unless an object holding it has an unknown key: then
    the outermost such key (an unknown key is reported before anything else in its object)."""
    def unknown(error: ErrorDetails) -> bool:
        return error["type"] == "extra_forbidden"

    for error in found:
        if unknown(error) and not any(isinstance(part, int) or part in _UNION_FIELDS for part in error["loc"]):
            return error
    first = found[0]
    holders = [e for e in found if unknown(e) and first["loc"][: len(e["loc"]) - 1] == e["loc"][:-1]]
    return min(holders, key=lambda e: len(e["loc"])) if holders else first


def api_error_from_validation(exc: ValidationError) -> ApiError:
    """The one error reported for a bad body (see :func:`_first`)."""
    return _api_error_of(_first(exc.errors()))
