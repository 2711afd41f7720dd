"""A check schemathesis loads (``SCHEMATHESIS_HOOKS``) for tests/contract/test_schemathesis.py.

schemathesis.toml lets three operations answer 400 to a spec-valid request, because the OpenAI API does so
for rules docs/openapi.yaml can state only in words (docs/CONTRACT.md, E11). A status alone would also let
a validator that wrongly refuses a valid body pass unseen, so this check narrows the allowance to the codes
of those rules: a 400 to a spec-valid request must carry one of them. Anything else (``invalid_type``,
``unknown_parameter``, ``invalid_value`` on a field the schema describes, ...) is a validator bug.
"""

from __future__ import annotations

import json
from typing import Any

import schemathesis

# 400 codes a spec-valid request may get, per operation: what the request refers to does not exist or is
# in another state (an unknown previous response, a call_id the chain never issued, an unanswered call, an
# approval request that answers nothing), or two of its parts conflict in a way the schema cannot express.
STATE_CODES: dict[str, frozenset[str]] = {
    "createResponse": frozenset({
        "previous_response_not_found",  # resilient/http/service.py
        "tool_call_not_found", "tool_output_required", "approval_request_not_found",
        "duplicate_call_output",  # resilient/http/continuation.py
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
    raise AssertionError(
        f"A spec-valid request to {operation} was refused with 400 {code!r} (param {param!r}): only "
        f"{sorted(STATE_CODES.get(operation, ()))} may refuse a valid request. Body: {response.text[:500]}")
