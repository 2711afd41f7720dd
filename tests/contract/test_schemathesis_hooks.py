"""The check that narrows the contract fuzzer's 400 allowance (tests/contract/schemathesis_hooks.py): a
spec-valid create may be refused only for a state-dependent rule, never by the validator."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from tests.contract.schemathesis_hooks import hosted_item_types, state_dependent_refusal_only


def case(operation: str, positive: bool = True, body: Any = None) -> Any:
    mode = SimpleNamespace(is_positive=positive)
    return SimpleNamespace(meta=SimpleNamespace(generation=SimpleNamespace(mode=mode)), body=body,
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


def test_a_field_of_a_hosted_tool_item_is_checked_in_words_only() -> None:
    """docs/openapi.yaml checks a hosted tool item an input echoes back against the openai param type, in
    words: a 400 naming a field of such an item passes; the same 400 on a message does not."""
    assert {"file_search_call", "web_search_call", "mcp_call"} <= hosted_item_types()  # read from the document
    hosted = {"input": [{"type": "message", "role": "user", "content": "x"}, {"type": "file_search_call", "id": "r"}]}
    missing = answer(400, "missing_required_parameter", "input[1].queries")
    assert state_dependent_refusal_only(None, missing, case("createResponse", body=hosted)) is None
    with pytest.raises(AssertionError):
        state_dependent_refusal_only(None, answer(400, "invalid_type", "input[0].content"),
                                     case("createResponse", body=hosted))
    with pytest.raises(AssertionError):
        state_dependent_refusal_only(None, missing, case("createResponse", body={"input": "text"}))


def test_an_integer_sent_as_a_whole_float_may_be_refused_but_nothing_else_of_its_type() -> None:
    refused = answer(400, "invalid_type", "top_logprobs")
    assert state_dependent_refusal_only(None, refused, case("createResponse", body={"top_logprobs": 6.0})) is None
    for sent in (6, "6", 6.5):
        with pytest.raises(AssertionError):
            state_dependent_refusal_only(None, refused, case("createResponse", body={"top_logprobs": sent}))
    nested = answer(400, "invalid_type", "tools[1].parameters.n")
    body = {"tools": [{}, {"parameters": {"n": 2.0}}]}
    assert state_dependent_refusal_only(None, nested, case("createResponse", body=body)) is None
