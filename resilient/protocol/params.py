"""Query-string and header parameters: integers and booleans as ``docs/openapi.yaml`` declares them.

Why not ``int(value)``: Python's ``int`` accepts ``" 5"``, ``"+5"``, ``"1_0"``, full-width ``"５"`` and
Arabic-Indic ``"٥"`` digits. A client generated from the spec never sends those, and a server that accepts
them answers differently from any other implementation of the same spec (and from the OpenAI API). So an
integer here is plain ASCII decimal digits, with one leading ``-`` only where the parameter may be
negative; a boolean is exactly ``true`` or ``false``; an empty value is not a value. Everything else is a
400 naming the parameter (the query name, or the header name when the value came from a header).
"""

from __future__ import annotations

import re

from resilient.protocol import errors
from resilient.protocol.errors import ApiError

_UNSIGNED = re.compile(r"[0-9]+")
_SIGNED = re.compile(r"-?[0-9]+")
# Far above any bound used here (2^53 has 16 digits): keeps a megabyte of digits from being parsed at all.
_MAX_DIGITS = 20


def _invalid_type(param: str, expected: str, value: str) -> ApiError:
    return errors.invalid_request(
        f"Invalid value for '{param}': expected {expected}, got {errors.echo(value)}.",
        param=param, code=errors.CODE_INVALID_TYPE)


def parse_int(value: str, *, param: str, minimum: int, maximum: int) -> int:
    """``value`` as an integer in ``[minimum, maximum]``; ASCII digits, ``-`` only if ``minimum < 0``."""
    grammar = _SIGNED if minimum < 0 else _UNSIGNED
    if not grammar.fullmatch(value):  # fullmatch: "$" would also match before a trailing newline
        kind = "an integer" if minimum < 0 else "a non-negative integer"
        raise _invalid_type(param, f"{kind} written with the ASCII digits 0-9", value)
    if len(value.lstrip("-")) > _MAX_DIGITS or not minimum <= int(value) <= maximum:
        raise errors.invalid_request(
            f"Invalid value for '{param}': must be between {minimum} and {maximum}.",
            param=param, code=errors.CODE_INVALID_VALUE)
    return int(value)


def parse_bool(value: str, *, param: str) -> bool:
    """``true`` or ``false`` (as the ``openai`` client and every OpenAPI generator write them)."""
    if value == "true":
        return True
    if value == "false":
        return False
    raise _invalid_type(param, "'true' or 'false'", value)
