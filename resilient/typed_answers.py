"""Checks a ``function_call_output`` that answers a hosted workflow's ``request_info`` against the type asked.

Why here, before the turn is accepted: the HTTP layer cannot reach the workflow (it runs in an activity),
but the ``function_call`` item the workflow's request became carries the answer's JSON schema in its
arguments (:mod:`resilient.agents.framework.human_input`). Checking the answer against it here turns a
wrong answer into a 400 that names the expected type, and the paused workflow keeps waiting for a right
one: a turn that would fail only later, in the worker, would leave the chain with a failed turn instead.

No Agent Framework import: the HTTP functions load without it.
"""

from __future__ import annotations

import json
from typing import Any

CALL_ID_PREFIX = "wfreq_"  # marks the call_id of a function_call that asks for a workflow request's answer


def answer_problem(call_item: dict[str, Any], output: str) -> str | None:
    """Why ``output`` does not answer the workflow request ``call_item`` asked, or None when it does (or the
    call is not a workflow request)."""
    if not str(call_item.get("call_id", "")).startswith(CALL_ID_PREFIX):
        return None
    try:
        arguments = json.loads(str(call_item.get("arguments") or "{}"))
    except ValueError:
        return None
    schema = arguments.get("response_schema") if isinstance(arguments, dict) else None
    if not isinstance(schema, dict) or not schema:
        return None
    expected = str(arguments.get("response_type") or "the requested type")
    if schema.get("type") == "string":
        return None  # the output text is the answer
    try:
        value = json.loads(output)
    except ValueError:
        return f"expected {expected} as JSON (the schema is in the call's arguments), got text that is not JSON."
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import best_match

    try:
        error = best_match(Draft202012Validator(schema).iter_errors(value))
    except Exception:  # a schema the validator cannot use: the worker's parse into the type still checks it
        return None
    if error is None:
        return None
    where = "".join(f"[{p!r}]" for p in error.absolute_path)
    return f"expected {expected}: {where + ' ' if where else ''}{_short(error.message)}."


def _short(text: str) -> str:
    return text if len(text) <= 200 else text[:197] + "..."
