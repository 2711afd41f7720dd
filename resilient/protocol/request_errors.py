"""How ``POST /responses`` validation failures become API errors: the ``api_error`` custom errors the
validators raise (an exact ``param``, ``code`` and message), and the translation of a pydantic
``ValidationError`` into the first :class:`ApiError`."""

from __future__ import annotations

from typing import NoReturn

from pydantic import ValidationError
from pydantic_core import ErrorDetails, PydanticCustomError

from resilient.protocol import errors
from resilient.protocol.errors import ApiError, invalid_request

_MAX_KEY_ECHO = 64
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


