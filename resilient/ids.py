"""Identifier generation and validation.

Every id that reaches a Table key or a blob name passes :func:`validate_id` first, so a hostile id
(``../x``, ``a'b``, ``#``, control characters, very long strings) can never inject into a key or a path.
Generated ids carry 192 random bits: response ids are bearer-like handles and must be unguessable.

The ids of the items a response stores (its output items, and the input items it names itself) carry that
response's id: ``<type prefix><the response id's 48 hex><16 random hex>``. An ``item_reference`` to such an
item then names the response that holds it, so it resolves with one read of that response's items, with
no index of item ids to write (:func:`response_of_item`). Whoever holds an item id could always read the
response it came from, so embedding the response id reveals nothing new. An id of another shape (a
client's own, an item stored before this scheme) names no response.
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
REASONING_PREFIX = "rs_"

_RESPONSE_HEX = 48  # the random part of a response id
_ITEM_HEX = 16  # an item id's own random part, after its response's
# The prefixes of the item ids this service makes; only these embed a response id.
ITEM_PREFIXES = (MESSAGE_PREFIX, FUNCTION_CALL_PREFIX, APPROVAL_REQUEST_PREFIX, FUNCTION_OUTPUT_PREFIX,
                 APPROVAL_RESPONSE_PREFIX, MCP_CALL_PREFIX, REASONING_PREFIX)
_PREFIX_GROUP = "|".join(re.escape(prefix) for prefix in ITEM_PREFIXES)
_ITEM_ID = re.compile(rf"^(?:{_PREFIX_GROUP})([0-9a-f]{{{_RESPONSE_HEX}}})[0-9a-f]{{{_ITEM_HEX}}}$")
_RESPONSE_ID = re.compile(rf"^{re.escape(RESPONSE_PREFIX)}[0-9a-f]{{{_RESPONSE_HEX}}}$")


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


def item_id(prefix: str, response_id: str) -> str:
    """A new id for an item that response ``response_id`` stores: the prefix, the response id's hex, then
    64 random bits (unique within the response; the response id already makes it unguessable)."""
    if prefix not in ITEM_PREFIXES:
        raise ValueError(f"not an item id prefix: {prefix!r}")
    if not _RESPONSE_ID.fullmatch(response_id):
        raise InvalidId(response_id, "response_id")
    return prefix + response_id[len(RESPONSE_PREFIX):] + secrets.token_hex(_ITEM_HEX // 2)


def response_of_item(value: object) -> str | None:
    """The id of the response whose item ``value`` names, when it has this service's item id shape, else
    None. Only a shape: the response may not exist, or not hold the item (a client may send any id)."""
    if not isinstance(value, str):
        return None
    found = _ITEM_ID.fullmatch(value)
    return RESPONSE_PREFIX + found.group(1) if found else None


def new_message_id(response_id: str) -> str:
    return item_id(MESSAGE_PREFIX, response_id)


def new_conversation_id() -> str:
    return _random_id(CONVERSATION_PREFIX)


def new_function_call_id(response_id: str) -> str:
    """The item id of a ``function_call`` output item."""
    return item_id(FUNCTION_CALL_PREFIX, response_id)


def new_call_id() -> str:
    """A ``call_id``: fresh for every attempt of a phase, so a recovered phase never repeats one."""
    return _random_id(CALL_PREFIX)


def new_approval_request_id(response_id: str) -> str:
    return item_id(APPROVAL_REQUEST_PREFIX, response_id)


def new_mcp_call_id(response_id: str) -> str:
    return item_id(MCP_CALL_PREFIX, response_id)


def new_reasoning_id(response_id: str) -> str:
    return item_id(REASONING_PREFIX, response_id)


_INPUT_PREFIXES = {"function_call_output": FUNCTION_OUTPUT_PREFIX, "mcp_approval_response": APPROVAL_RESPONSE_PREFIX,
                   "function_call": FUNCTION_CALL_PREFIX, "reasoning": REASONING_PREFIX}


def new_input_item_id(item_type: str, response_id: str) -> str:
    """The id of a stored input item, prefixed by its type as the OpenAI API does."""
    return item_id(_INPUT_PREFIXES.get(item_type, MESSAGE_PREFIX), response_id)


def new_conversation_item_id(item_type: str = "message") -> str:
    """The id of an item added to a conversation through its API (no response stores it): its type's prefix
    and 192 random bits. It names no response, so a reference to it resolves only along its conversation."""
    return _random_id(_INPUT_PREFIXES.get(item_type, MESSAGE_PREFIX))
