"""A check schemathesis loads (``SCHEMATHESIS_HOOKS``) for tests/contract/test_schemathesis.py.

schemathesis.toml lets three operations answer 400 to a spec-valid request, because the OpenAI API does so
for rules docs/openapi.yaml can state only in words (docs/CONTRACT.md, E11). A status alone would also let
a validator that wrongly refuses a valid body pass unseen, so this check narrows the allowance to the codes
of those rules: a 400 to a spec-valid request must carry one of them, or (for ``createResponse``) name a field
of a hosted tool input item, which the document says is checked against the ``openai`` param type without
spelling those types out (also a conversation's items), refuse an integer sent as ``6.0`` (a difference
JSON Schema cannot state), or refuse an input item id that an earlier item of the input already has (a
rule between items). An ``item_reference`` naming no stored item (``item_not_found``) is state-dependent.
Anything else (``invalid_type``, ``unknown_parameter``, ``invalid_value`` on a field
the schema describes, ...) is a validator bug.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import schemathesis
import yaml

OPENAPI = Path(__file__).resolve().parents[2] / "docs" / "openapi.yaml"

# 400 codes a spec-valid request may get, per operation: what the request refers to does not exist or is
# in another state (an unknown previous response, a call_id the chain never issued, an unanswered call, an
# approval request that answers nothing), or two of its parts conflict in a way the schema cannot express.
STATE_CODES: dict[str, frozenset[str]] = {
    "createResponse": frozenset({
        "previous_response_not_found",  # resilient/http/service.py
        "item_not_found",  # resilient/engine/chain/continuation.py: an item_reference naming no earlier item
        "tool_call_not_found", "tool_output_required", "approval_request_not_found",
        "duplicate_call_output",  # resilient/engine/chain/continuation.py
        "duplicate_tool_name",  # resilient/protocol/request.py: two tools with one name
    }),
    "getResponse": frozenset({"background_required"}),  # stream replay of a foreground response
    "cancelResponse": frozenset({"background_required"}),  # cancel of a foreground response
}
# (code, param) pairs for the cross-field rules that reuse a general code (docs/CONTRACT.md, E11).
CROSS_FIELD: dict[str, frozenset[tuple[str, str]]] = {
    # tool_choice names a function that is not among tools; tool_choice "required" with no tools
    "createResponse": frozenset({("invalid_value", "tool_choice.name"), ("invalid_value", "tool_choice")}),
}


_INPUT_ITEM = re.compile(r"^(input|items)\[(\d+)\]")  # createResponse's input, a conversation's items


@cache
def hosted_item_types() -> frozenset[str]:
    """The input item types docs/openapi.yaml checks only in words (``HostedItemInput``: a hosted tool item
    echoed back is checked against the ``openai`` client's param type of its ``type``)."""
    schemas = yaml.safe_load(OPENAPI.read_text()).get("components", {}).get("schemas", {})
    hosted = schemas.get("HostedItemInput", {}).get("properties", {}).get("type", {}).get("enum", [])
    return frozenset(str(kind) for kind in hosted)


def _in_hosted_item(case: Any, param: str | None) -> bool:
    """``param`` names a field of an input item whose rules the document states in words only."""
    found = _INPUT_ITEM.match(param or "")
    body = case.body if isinstance(case.body, dict) else {}
    items = body.get(found.group(1)) if found is not None else None
    if found is None or not isinstance(items, list) or int(found.group(2)) >= len(items):
        return False
    item = items[int(found.group(2))]
    return isinstance(item, dict) and item.get("type") in hosted_item_types()


_STEP = re.compile(r"\[(\d+)\]|\.?([^.\[]+)")


def _value_at(body: Any, param: str | None) -> Any:
    """The value ``param`` (``a.b[2].c``, as the error names it) points at in ``body``, or None."""
    value = body
    for index, key in _STEP.findall(param or ""):
        if index and isinstance(value, list) and int(index) < len(value):
            value = value[int(index)]
        elif key and isinstance(value, dict) and key in value:
            value = value[key]
        else:
            return None
    return value


def _integral_float(case: Any, code: str | None, param: str | None) -> bool:
    """An integer field sent as ``6.0``: JSON Schema's ``integer`` accepts it, the OpenAI API (and this
    service, with its words) refuses it as ``invalid_type`` ("expected an integer, but got a number")."""
    value = _value_at(case.body, param) if param else None
    return code == "invalid_type" and isinstance(value, float) and value.is_integer()


_ITEM_ID = re.compile(r"^(input|items)\[(\d+)\]\.id$")


def _duplicate_item_id(case: Any, code: str | None, param: str | None) -> bool:
    """An input item whose ``id`` an earlier item of the same input already has: ids are unique in the input
    (docs/openapi.yaml says so in words; a rule between items that JSON Schema cannot state)."""
    found = _ITEM_ID.match(param or "")
    items = case.body.get(found.group(1)) if found is not None and isinstance(case.body, dict) else None
    if code != "invalid_value" or found is None or not isinstance(items, list) or int(found.group(2)) >= len(items):
        return False
    at = int(found.group(2))
    item_id = items[at].get("id") if isinstance(items[at], dict) else None
    return item_id is not None and any(isinstance(one, dict) and one.get("id") == item_id for one in items[:at])


def _error(response: Any) -> tuple[str | None, str | None]:
    try:
        body = json.loads(response.text or "null")
    except ValueError:
        return None, None
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return None, None
    return error.get("code"), error.get("param")


@schemathesis.check
def state_dependent_refusal_only(ctx: Any, response: Any, case: Any) -> bool | None:
    """A 400 to a spec-valid request names one of the operation's state-dependent rules."""
    meta = case.meta
    operation = case.operation.definition.raw.get("operationId")
    if response.status_code != 400 or meta is None or not meta.generation.mode.is_positive:
        return None
    code, param = _error(response)
    if code in STATE_CODES.get(operation, frozenset()) or (code, param) in CROSS_FIELD.get(operation, frozenset()):
        return None
    if operation == "createResponse" and (_in_hosted_item(case, param) or _integral_float(case, code, param)
                                          or _duplicate_item_id(case, code, param)):
        return None
    # schemathesis.toml: a conversation's hosted tool items are checked in words, as createResponse's are
    if operation in {"createConversation", "addConversationItems"} and (
            _in_hosted_item(case, param) or _duplicate_item_id(case, code, param)):
        return None
    raise AssertionError(
        f"A spec-valid request to {operation} was refused with 400 {code!r} (param {param!r}): only "
        f"{sorted(STATE_CODES.get(operation, ()))} may refuse a valid request. Body: {response.text[:500]}")
