"""What a step of an open plan yields besides text: tool runs (``mcp_call`` items), state, ``NextStep``."""

from __future__ import annotations

import pytest

from resilient.agents.base import NextStep, SaveState, ToolRun
from resilient.engine.run.phase_items import MAX_STATE_BYTES, AgentOutputError, PhaseItems
from resilient.protocol.items import validate_output_item

RID = "resp_" + "ab" * 24


def test_a_tool_run_is_one_complete_mcp_call_item() -> None:
    items = PhaseItems(3, set(), "auto", response_id=RID)
    events = items.feed(ToolRun("send_email", '{"to": "bob"}', "sent"))
    assert [e["type"] for e in events] == ["response.output_item.added", "response.output_item.done"]
    assert events[0]["output_index"] == 3 and events[0]["item"]["status"] == "in_progress"
    assert events[0]["item"]["output"] is None
    item = items.items[0]
    assert (item["type"], item["name"], item["output"], item["status"]) == ("mcp_call", "send_email", "sent",
                                                                           "completed")
    validate_output_item(item)  # the openai client's own type, strictly
    failed = PhaseItems(0, set(), "auto", response_id=RID)
    failed.feed(ToolRun("send_email", "{}", None, error="SMTP down"))
    assert failed.items[0]["status"] == "failed" and failed.items[0]["error"] == "SMTP down"


def test_state_and_next_step_add_no_events_and_the_last_state_wins() -> None:
    items = PhaseItems(0, set(), "auto", response_id=RID)
    assert items.feed(SaveState({"a": 1})) == [] and items.feed(SaveState({"a": 2})) == []
    assert items.feed(NextStep()) == []
    assert items.state == SaveState({"a": 2}) and items.more
    assert items.close("completed", ensure_item=False) == [] and items.items == []


def test_state_over_the_bound_or_not_json_fails_the_step_with_a_clear_message() -> None:
    items = PhaseItems(0, set(), "auto", response_id=RID)
    with pytest.raises(AgentOutputError, match=f"over the limit of {MAX_STATE_BYTES} bytes"):
        items.feed(SaveState("x" * MAX_STATE_BYTES))
    with pytest.raises(AgentOutputError, match="must be JSON"):
        items.feed(SaveState({"when": object()}))


def test_a_tool_run_with_arguments_that_are_not_an_object_is_refused() -> None:
    with pytest.raises(AgentOutputError, match="must be a JSON object"):
        PhaseItems(0, set(), "auto", response_id=RID).feed(ToolRun("t", "[1]", "x"))
