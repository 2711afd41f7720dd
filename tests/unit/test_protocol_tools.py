"""Request validation for tools, tool_choice and the answer items; the phase item machine's events."""

from __future__ import annotations

import json
from typing import Any

import pytest

from resilient.agents.base import ApprovalRequest, FunctionCall, FunctionCallDelta, Usage
from resilient.engine.run.phase_items import AgentOutputError, PhaseItems
from resilient.protocol import events as ev
from resilient.protocol.errors import ApiError
from resilient.protocol.items import validate_output_item, validate_stored_item
from resilient.protocol.request import normalize_input_items, parse_create_request

TOOL = {"type": "function", "name": "lookup", "description": "d",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}, "strict": True}

RID = "resp_" + "ab" * 24


def _error(body: dict[str, Any]) -> ApiError:
    with pytest.raises(ApiError) as raised:
        parse_create_request(json.dumps(body).encode())
    return raised.value


def test_function_tools_and_tool_choice_are_accepted() -> None:
    req = parse_create_request(json.dumps({"input": "x", "tools": [TOOL], "tool_choice": {
        "type": "function", "name": "lookup"}}).encode())
    assert [t.to_json() for t in req.tools] == [TOOL]
    assert req.tool_choice == {"type": "function", "name": "lookup"}
    for mode in ("auto", "none", "required"):
        assert parse_create_request(json.dumps({"input": "x", "tools": [TOOL], "tool_choice": mode}).encode()
                                    ).tool_choice == mode


@pytest.mark.parametrize(("body", "param", "code"), [
    ({"tools": [TOOL], "tool_choice": "sometimes"}, "tool_choice", "invalid_value"),
    ({"tool_choice": "required"}, "tool_choice", "invalid_value"),
    ({"tools": [TOOL], "tool_choice": {"type": "mcp", "server_label": "s"}}, "tool_choice.type", "unsupported_value"),
    ({"tools": [{**TOOL, "strict": "yes"}]}, "tools[0].strict", "invalid_type"),
    ({"tools": [{**TOOL, "parameters": {"type": "string"}}]}, "tools[0].parameters.type", "invalid_value"),
    ({"tools": [{**TOOL, "extra": 1}]}, "tools[0].extra", "unknown_parameter"),
    ({"tools": [{"type": "function"}]}, "tools[0].name", "missing_required_parameter"),
])
def test_bad_tools_name_the_param(body: dict[str, Any], param: str, code: str) -> None:
    error = _error({"input": "x", **body})
    assert (error.status, error.param, error.code) == (400, param, code)


def test_two_tools_with_one_name_are_400() -> None:
    """JSON Schema cannot say "names unique", but the OpenAI API refuses such a body with a 400, and so do we."""
    error = _error({"input": "x", "tools": [TOOL, {**TOOL, "description": "another"}]})
    assert (error.status, error.param, error.code) == (400, "tools[1].name", "duplicate_tool_name")


def test_a_tool_choice_naming_no_tool_is_400() -> None:
    """docs/openapi.yaml can say the name must be one of the tools but cannot enforce it; the OpenAI API
    answers such a body with a 400, and so do we."""
    error = _error({"input": "x", "tools": [TOOL], "tool_choice": {"type": "function", "name": "other"}})
    assert (error.status, error.param, error.code) == (400, "tool_choice.name", "invalid_value")


@pytest.mark.parametrize(("item", "param", "code"), [
    ({"type": "function_call_output", "output": "o"}, "input[0].call_id", "missing_required_parameter"),
    ({"type": "function_call_output", "call_id": "c/../x", "output": "o"}, "input[0].call_id", "invalid_value"),
    ({"type": "function_call_output", "call_id": "c", "output": 5}, "input[0].output", "invalid_type"),
    ({"type": "mcp_approval_response", "approval_request_id": "r", "approve": "yes"}, "input[0].approve",
     "invalid_type"),
    ({"type": "mcp_approval_response", "approve": True}, "input[0].approval_request_id",
     "missing_required_parameter"),
])
def test_bad_answer_items_name_the_param(item: dict[str, Any], param: str, code: str) -> None:
    error = _error({"input": [item], "previous_response_id": "resp_1"})
    assert (error.param, error.code) == (param, code)


def test_answer_items_are_stored_in_the_client_shape() -> None:
    req = parse_create_request(json.dumps({"previous_response_id": "resp_1", "input": [
        {"type": "function_call_output", "call_id": "call_1", "output": "out"},
        {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": False, "reason": "no"},
    ]}).encode())
    items = normalize_input_items(req, lambda: "msg_x", lambda kind: f"{kind[:3]}_1")
    assert items == [
        {"id": "fun_1", "type": "function_call_output", "call_id": "call_1", "output": "out", "status": "completed"},
        {"id": "mcp_1", "type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": False,
         "reason": "no"},
    ]
    for item in items:
        validate_stored_item(item)


def _validated(events: list[dict[str, Any]]) -> list[str]:
    for n, event in enumerate(events):
        ev.validate_event({**event, "sequence_number": n})
    return [e["type"] for e in events]


def test_phase_items_text_then_streamed_call() -> None:
    items = PhaseItems(5, {"lookup"}, "auto", response_id=RID)
    events = items.feed("Let me check.") + items.feed(Usage(10, 2))
    events += items.feed(FunctionCallDelta(0, '{"query":', name="lookup")) + items.feed(FunctionCallDelta(0, ' "q"}'))
    events += items.close("completed", ensure_item=True)
    assert _validated(events) == [
        "response.output_item.added", "response.content_part.added", "response.output_text.delta",
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.delta", "response.function_call_arguments.done",
        "response.output_item.done"]
    assert [e["output_index"] for e in events if e["type"] == "response.output_item.added"] == [5, 6]
    assert [i["type"] for i in items.items] == ["message", "function_call"]
    assert items.items[1]["arguments"] == '{"query": "q"}' and items.usage == [Usage(10, 2)]
    for item in items.items:
        validate_output_item(item)


def test_phase_items_approval_and_refusals() -> None:
    items = PhaseItems(0, {"lookup"}, "none", response_id=RID)
    events = items.feed(ApprovalRequest("deploy", '{"to": "prod"}'))
    assert _validated(events) == ["response.output_item.added", "response.output_item.done"]
    assert items.paused and items.items[0]["type"] == "mcp_approval_request"
    with pytest.raises(AgentOutputError, match="tool_choice is 'none'"):
        items.feed(FunctionCall("lookup"))
    with pytest.raises(AgentOutputError, match="not one of the request's tools"):
        PhaseItems(0, {"lookup"}, "auto", response_id=RID).feed(FunctionCall("other"))
    with pytest.raises(AgentOutputError, match="not valid JSON"):
        PhaseItems(0, {"lookup"}, "auto", response_id=RID).feed(FunctionCall("lookup", "{oops"))


def test_a_phase_that_yields_nothing_still_gets_an_item() -> None:
    items = PhaseItems(2, set(), "auto", response_id=RID)
    assert _validated(items.close("incomplete", ensure_item=True))[-1] == "response.output_item.done"
    assert items.items[0]["status"] == "incomplete" and items.items[0]["content"][0]["text"] == ""
