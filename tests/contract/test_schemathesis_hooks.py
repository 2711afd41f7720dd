"""The check that narrows the contract fuzzer's 400 allowance (tests/contract/schemathesis_hooks.py): a
spec-valid create may be refused only for a state-dependent rule, never by the validator."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from tests.contract.schemathesis_hooks import state_dependent_refusal_only


def case(operation: str, positive: bool = True) -> Any:
    mode = SimpleNamespace(is_positive=positive)
    return SimpleNamespace(meta=SimpleNamespace(generation=SimpleNamespace(mode=mode)),
                           operation=SimpleNamespace(definition=SimpleNamespace(raw={"operationId": operation})))


def answer(status: int, code: str | None, param: str | None = None) -> Any:
    body = {"error": {"message": "m", "type": "invalid_request_error", "code": code, "param": param}}
    return SimpleNamespace(status_code=status, text=json.dumps(body))


@pytest.mark.parametrize(("code", "param"), [
    ("previous_response_not_found", "previous_response_id"), ("tool_call_not_found", "input"),
    ("tool_output_required", "input"), ("approval_request_not_found", None), ("duplicate_tool_name", "tools[1].name"),
    ("duplicate_call_output", "input[2].call_id"), ("invalid_value", "tool_choice.name"),
])
def test_a_state_dependent_refusal_of_a_valid_create_passes(code: str, param: str | None) -> None:
    assert state_dependent_refusal_only(None, answer(400, code, param), case("createResponse")) is None


@pytest.mark.parametrize(("code", "param"), [
    ("invalid_type", "temperature"), ("invalid_value", "input[0].content[1].type"), ("unknown_parameter", "foo"),
    ("missing_required_parameter", "input"), ("background_required", "stream"), (None, None),
])
def test_a_validator_refusal_of_a_valid_create_fails(code: str | None, param: str | None) -> None:
    with pytest.raises(AssertionError, match="spec-valid request to createResponse was refused with 400"):
        state_dependent_refusal_only(None, answer(400, code, param), case("createResponse"))


def test_only_400s_to_valid_requests_are_judged() -> None:
    refused = answer(400, "invalid_type", "temperature")
    assert state_dependent_refusal_only(None, refused, case("createResponse", positive=False)) is None
    assert state_dependent_refusal_only(None, answer(404, "not_found"), case("createResponse")) is None
    assert state_dependent_refusal_only(None, answer(400, "background_required", "stream"), case("getResponse")) is None
    with pytest.raises(AssertionError):
        state_dependent_refusal_only(None, refused, case("getResponse"))
