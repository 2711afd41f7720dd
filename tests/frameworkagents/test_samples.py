"""The samples in ``samples/`` load through ``RESILIENT_AGENT``'s loader and run step by step."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn

from resilient.agents.base import (
    AgentRequest,
    Approval,
    FunctionCall,
    NextStep,
    PhaseContext,
    SaveProgress,
    SaveState,
    ToolRun,
)
from resilient.agents.loader import load_agent
from resilient.settings import Settings
from tests.hostdouble.api import free_port


@pytest.fixture(scope="module")
def stub_model() -> Iterator[str]:
    from samples.stub_model import app

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="critical", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}/v1"
    server.should_exit = True
    thread.join(timeout=10)


def settings() -> Settings:
    return Settings.from_env({"AzureWebJobsStorage": "UseDevelopmentStorage=true"})


async def run_turn(agent: Any, request: AgentRequest, state: Any = None,
                   approval: Approval | None = None) -> tuple[list[Any], Any]:
    """Every step of one turn, each from the state the one before saved (as separate activities would)."""
    outputs: list[Any] = []
    for index in range(20):
        context = PhaseContext(request=request, plan=[], phase_index=index, is_recovery=False, output_so_far=[],
                               state=state, approval=approval if index == 0 else None)
        step = []
        async for output in agent.run_phase(context):
            if isinstance(output, SaveProgress):
                output.saved.set()  # what the engine does once it has written it
            step.append(output)
        outputs += step
        saved = [o for o in step if isinstance(o, SaveState)]
        state = json.loads(json.dumps(saved[-1].value)) if saved else state
        if not any(isinstance(o, NextStep) for o in step):
            return outputs, state
    raise AssertionError("the turn did not end")


def user(text: str, response_id: str, previous_state: Any = None) -> AgentRequest:
    return AgentRequest(response_id=response_id, model="stub", instructions=None, history=[], metadata={},
                        input_items=[{"type": "message", "role": "user", "content": text}],
                        previous_state=previous_state)


async def test_the_agent_sample_books_a_meeting_in_two_tool_steps(stub_model: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", stub_model)
    agent = load_agent("samples.agent_with_tools:build", settings())
    outputs, _ = await run_turn(agent, user("book a sync on Tuesday", "resp_sample"))
    assert [o.name for o in outputs if isinstance(o, ToolRun)] == ["find_free_slot", "book_meeting"]
    assert "".join(o for o in outputs if isinstance(o, str)).startswith("Done: sync booked at Tuesday 10:30")


async def test_the_workflow_sample_asks_before_it_publishes(monkeypatch: pytest.MonkeyPatch) -> None:
    workflow = load_agent("samples.workflow:build", settings())
    outputs, paused = await run_turn(workflow, user("durability", "resp_wf1"))
    assert "".join(o for o in outputs if isinstance(o, str)) == "Draft: three points about durability. "
    asked = outputs[-1]
    assert isinstance(asked, FunctionCall) and asked.name == "request_info" and asked.call_id
    assert json.loads(asked.arguments)["data"] == "Publish the draft on three points about durability?"
    answer = AgentRequest(response_id="resp_wf2", model="stub", instructions=None, history=[], metadata={},
                          input_items=[{"type": "function_call_output", "call_id": asked.call_id, "output": "true"}],
                          previous_state=paused)
    resumed, _ = await run_turn(load_agent("samples.workflow:build", settings()), answer, paused)
    assert "".join(o for o in resumed if isinstance(o, str)) == "Published."
