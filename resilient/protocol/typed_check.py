"""Strict validation of a request value against one of the ``openai`` client's ``TypedDict`` param types,
with the API's error messages.

Why: the Responses API accepts some thirty item kinds that a client echoes back (hosted tool calls, their
outputs, annotations); the installed ``openai`` types are their authoritative shapes, so the request is
checked against those types instead of copies of them. A ``TypedDict`` drops unknown keys silently and an
``Iterable`` field is validated only when iterated, so this module materialises every iterable and compares
the keys sent with the keys kept: a key the type does not declare is an "Unknown parameter", as anywhere
else in the body.

Errors are raised as ``api_here`` errors (``request_errors``), so the client sees the full ``param`` path
(``input[2].tools[0].name``) without this module knowing where in the body the value sits. The ``openai``
types load lazily, with the first value that needs them (they cost about half a second to import).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from typing import Any, NoReturn

from pydantic import TypeAdapter, ValidationError
from pydantic_core import ErrorDetails

from resilient.protocol import errors
from resilient.protocol.request_errors import EXPECTED_KINDS, fail_here, type_tail, value_detail


@functools.cache
def _adapter(type_: Any) -> TypeAdapter[Any]:
    return TypeAdapter(type_)


def _suffix(loc: tuple[int | str, ...]) -> str:
    """A pydantic location inside the value as a ``param`` suffix. Union member labels (``typed-dict``,
    ``AnnotationFileCitation``, ``literal['x']``, ``list[...]``) are not keys of the value and are dropped."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not (part[:1].isupper() or "[" in part or "-" in part):
            out += f".{part}"
    return out


def _fail_with(error: ErrorDetails, prefix: str) -> NoReturn:
    suffix = prefix + _suffix(error["loc"])
    kind = error["type"]
    if kind == "missing":
        fail_here(errors.CODE_MISSING_PARAMETER, "Missing required parameter:", ".", suffix)
    if kind in EXPECTED_KINDS:
        fail_here(errors.CODE_INVALID_TYPE, "Invalid type for", type_tail(EXPECTED_KINDS[kind], error["input"]),
                  suffix)
    fail_here(errors.CODE_INVALID_VALUE, "Invalid value for", f": {value_detail(error)}", suffix)


def _member(loc: tuple[int | str, ...]) -> tuple[int | str, ...]:
    """The location up to and including the last union member label (the member an error belongs to)."""
    for at in range(len(loc) - 1, -1, -1):
        part = loc[at]
        if isinstance(part, str) and (part[:1].isupper() or "[" in part or "-" in part):
            return loc[: at + 1]
    return ()


def _best(found: list[ErrorDetails]) -> ErrorDetails:
    """The error to report. In a union every member reports its own errors; the member whose ``type``
    matched is the one the client meant, so members that refused the ``type`` itself are passed over."""
    refused = {_member(e["loc"]) for e in found if e["type"] == "literal_error" and e["loc"][-1:] == ("type",)}
    meant = [e for e in found if _member(e["loc"]) not in refused]
    return meant[0] if meant else found[0]


def _materialise(value: Any, prefix: str) -> Any:
    """``value`` with every lazily validated iterable turned into a list (validating it now)."""
    if isinstance(value, Mapping):
        return {key: _materialise(item, f"{prefix}.{key}") for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_materialise(item, f"{prefix}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, str | bytes | int | float | bool) or value is None:
        return value
    if isinstance(value, Iterator) or hasattr(value, "__next__"):
        try:
            items = list(value)
        except ValidationError as exc:
            _fail_with(_best(exc.errors()), prefix)
        return [_materialise(item, f"{prefix}[{i}]") for i, item in enumerate(items)]
    return value


def _first_unknown_key(sent: Any, kept: Any, path: str) -> str | None:
    if isinstance(kept, list) and not isinstance(sent, list):
        # An ``Iterable`` field takes any iterable (an object's keys, a string's characters); the JSON the
        # ``openai`` types stand for is an array.
        fail_here(errors.CODE_INVALID_TYPE, "Invalid type for", type_tail("an array", sent), path)
    if isinstance(sent, dict) and isinstance(kept, dict):
        for key, value in sent.items():
            if key not in kept:
                return f"{path}.{key}"
            found = _first_unknown_key(value, kept[key], f"{path}.{key}")
            if found:
                return found
    elif isinstance(sent, list) and isinstance(kept, list) and len(sent) == len(kept):
        for index, (one, other) in enumerate(zip(sent, kept, strict=True)):
            found = _first_unknown_key(one, other, f"{path}[{index}]")
            if found:
                return found
    return None


def check_typed(type_: Any, value: object, *, at: str = "") -> Any:
    """Validate ``value`` strictly (no coercion) as ``type_``, an ``openai`` param type, and refuse keys it
    does not declare. ``at`` is a suffix of the value's own place (``.annotations``). Returns ``value``."""
    try:
        kept = _adapter(type_).validate_python(value, strict=True)
    except ValidationError as exc:
        _fail_with(_best(exc.errors()), at)
    kept = _materialise(kept, at)
    unknown = _first_unknown_key(value, kept, at)
    if unknown is not None:
        fail_here(errors.CODE_UNKNOWN_PARAMETER, "Unknown parameter:", ".", unknown)
    return value
