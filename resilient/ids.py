"""Identifier generation and validation.

Every id that reaches a Table key or a blob name passes :func:`validate_id` first, so a hostile id
(``../x``, ``a'b``, ``#``, control characters, very long strings) can never inject into a key or a path.
Generated ids carry 192 random bits: response ids are bearer-like handles and must be unguessable.
"""

from __future__ import annotations

import re
import secrets

_SAFE_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")

RESPONSE_PREFIX = "resp_"
MESSAGE_PREFIX = "msg_"
CONVERSATION_PREFIX = "conv_"
FUNCTION_CALL_PREFIX = "fc_"
CALL_PREFIX = "call_"
APPROVAL_REQUEST_PREFIX = "mcpr_"
FUNCTION_OUTPUT_PREFIX = "fco_"
APPROVAL_RESPONSE_PREFIX = "mcpa_"
MCP_CALL_PREFIX = "mcp_"


class InvalidId(ValueError):
    """An id is malformed; the HTTP layer maps it to 400 (or 404 where the contract says so)."""

    def __init__(self, value: object, param: str = "id") -> None:
        self.param = param
        super().__init__(f"Invalid '{param}': {str(value)[:64]!r}. Expected [A-Za-z0-9_-], 1-128 characters.")


def is_safe_id(value: object) -> bool:
    """True when ``value`` may be used verbatim as a Table key or blob-name segment."""
    return isinstance(value, str) and bool(_SAFE_ID.fullmatch(value))


def validate_id(value: object, *, prefix: str | None = None, param: str = "id") -> str:
    """Return ``value`` if it is a safe id (and starts with ``prefix`` when given), else raise InvalidId."""
    if not is_safe_id(value) or (prefix is not None and not str(value).startswith(prefix)):
        raise InvalidId(value, param)
    return str(value)


def _random_id(prefix: str) -> str:
    return prefix + secrets.token_hex(24)


def new_response_id() -> str:
    return _random_id(RESPONSE_PREFIX)


def new_message_id() -> str:
    return _random_id(MESSAGE_PREFIX)


def new_conversation_id() -> str:
    return _random_id(CONVERSATION_PREFIX)


def new_function_call_id() -> str:
    """The item id of a ``function_call`` output item."""
    return _random_id(FUNCTION_CALL_PREFIX)


def new_call_id() -> str:
    """A ``call_id``: fresh for every attempt of a phase, so a recovered phase never repeats one."""
    return _random_id(CALL_PREFIX)


def new_approval_request_id() -> str:
    return _random_id(APPROVAL_REQUEST_PREFIX)


def new_mcp_call_id() -> str:
    return _random_id(MCP_CALL_PREFIX)


def new_input_item_id(item_type: str) -> str:
    """The id of a stored input item, prefixed by its type as the OpenAI API does."""
    prefix = {"function_call_output": FUNCTION_OUTPUT_PREFIX, "mcp_approval_response": APPROVAL_RESPONSE_PREFIX}
    return _random_id(prefix.get(item_type, MESSAGE_PREFIX))
