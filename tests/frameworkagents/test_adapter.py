"""The Agent Framework adapter on its own (no storage, no host): what each step yields, and that a step
continues from the state the previous one saved, in a fresh agent object as a new worker would."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from resilient.agents.base import (
    AgentRequest,
    Approval,
    ApprovalRequest,
    NextStep,
    PhaseContext,
    SaveProgress,
    SaveState,
    ToolRun,
    Usage,
)
from resilient.agents.loader import AgentLoadError, load_agent, wrap_agent
from resilient.settings import Settings
from tests.fakemodel.server import FakeModel
from tests.frameworkagents import app_agents


def effects(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "effects.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def request(text: str, response_id: str = "resp_1", **extra: Any) -> AgentRequest:
    return AgentRequest(response_id=response_id, model="m", instructions=None,
                        input_items=[{"type": "message", "role": "user", "content": text}], history=[],
                        metadata={}, **extra)


async def run_step(agent: Any, context: PhaseContext) -> list[Any]:
    """The step's outputs, as the engine takes them: a kept progress is written (here: noted) before the
    next output is asked for."""
    outputs = []
    async for output in agent.run_phase(context):
        if isinstance(output, SaveProgress):
            output.saved.set()
        outputs.append(output)
    return outputs


def context_for(req: AgentRequest, index: int, state: Any = None, *, is_recovery: bool = False,
                **extra: Any) -> PhaseContext:
    return PhaseContext(request=req, plan=[], phase_index=index, is_recovery=is_recovery, output_so_far=[],
                        state=state, **extra)


def settings() -> Settings:
    return Settings.from_env({"AzureWebJobsStorage": "UseDevelopmentStorage=true"})


async def test_a_tool_loop_runs_one_model_call_and_its_tools_per_step(model: FakeModel, tmp_path: Path) -> None:
    agent = wrap_agent(app_agents.build())
    assert getattr(agent, "open_plan", False)
    req = request("please e-mail bob")
    first = await run_step(agent, context_for(req, 0))
    runs = [o for o in first if isinstance(o, ToolRun)]
    assert [(r.name, json.loads(r.arguments), r.output) for r in runs] == [
        ("send_email", {"to": "bob"}, "e-mail sent to bob")]
    assert isinstance(first[-1], NextStep) and isinstance(first[-2], SaveState)
    assert not [o for o in first if isinstance(o, str)]  # the tool-calling call said nothing
    assert len(model.chat_requests()) == 1  # the step stopped before the next model call
    assert [e["key"] for e in effects(tmp_path)] == ["resp_1/step-0/call_2"]  # keyed by the model's call id

    # The next step, in a new agent object (another worker), from the saved state only.
    state = json.loads(json.dumps(first[-2].value))  # the state survives JSON (it is stored as JSON)
    second = await run_step(wrap_agent(app_agents.build()), context_for(req, 1, state))
    text = "".join(o for o in second if isinstance(o, str))
    assert text == "Done: e-mail sent to bob."
    assert not any(isinstance(o, (ToolRun, NextStep)) for o in second)
    assert isinstance(second[-1], SaveState)
    usage = [o for o in second if isinstance(o, Usage)]
    assert usage and usage[0].input_tokens > 0  # what the model reported
    assert len(effects(tmp_path)) == 1  # the tool of the finished step did not run again
    roles = [m["role"] for m in model.chat_requests()[-1].body["messages"]]
    assert roles[-2:] == ["assistant", "tool"]  # the model got the call and its result back


async def test_a_step_run_again_replays_the_models_decision_and_the_finished_tools(model: FakeModel,
                                                                                  tmp_path: Path) -> None:
    agent = wrap_agent(app_agents.build())
    req = request("please e-mail bob")
    first = await run_step(agent, context_for(req, 0))
    kept = [o.value for o in first if isinstance(o, SaveProgress)]
    assert len(kept) == 2  # the model's decision before the tool ran, then the tool's result
    assert kept[0]["decision"] and kept[0]["tools"] == {}
    assert kept[1]["tools"] == {"call_2": {"output": "e-mail sent to bob", "error": None}}
    asked = len(model.chat_requests())

    # The worker died while the tool ran (only the decision was kept): the model is not asked again, the
    # tool runs again with the same key.
    again = await run_step(wrap_agent(app_agents.build()), context_for(req, 0, is_recovery=True,
                                                                        progress=json.loads(json.dumps(kept[0]))))
    assert len(model.chat_requests()) == asked
    assert [e["key"] for e in effects(tmp_path)] == ["resp_1/step-0/call_2", "resp_1/step-0/call_2"]
    assert [o.value for o in again if isinstance(o, SaveState)] == [o.value for o in first if isinstance(o, SaveState)]

    # The worker died after the tool returned and before the checkpoint: the tool does not run again, and
    # the step still reports it (its mcp_call item) with the result it had.
    last = await run_step(wrap_agent(app_agents.build()), context_for(req, 0, is_recovery=True,
                                                                       progress=json.loads(json.dumps(kept[1]))))
    assert len(model.chat_requests()) == asked and len(effects(tmp_path)) == 2
    assert [(r.name, r.output) for r in last if isinstance(r, ToolRun)] == [("send_email", "e-mail sent to bob")]
    assert isinstance(last[-1], NextStep)


async def test_the_next_turn_continues_the_conversation_of_the_previous_one(model: FakeModel) -> None:
    agent = wrap_agent(app_agents.build())
    first_turn = request("please e-mail bob")
    saved = [o for o in await run_step(agent, context_for(first_turn, 0)) if isinstance(o, SaveState)][-1]
    final = [o for o in await run_step(agent, context_for(first_turn, 1, saved.value))
             if isinstance(o, SaveState)][-1]
    follow_up = request("thank you", response_id="resp_2", previous_state=final.value)
    outputs = await run_step(agent, context_for(follow_up, 0, follow_up.previous_state))
    assert "".join(o for o in outputs if isinstance(o, str)) == "You are welcome; tools used so far: 1."
    roles = [m["role"] for m in model.chat_requests()[-1].body["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "user"]


async def test_a_tool_that_needs_approval_pauses_the_turn_and_runs_once_approved(model: FakeModel,
                                                                                  tmp_path: Path) -> None:
    agent = wrap_agent(app_agents.build())
    asking = request("please refund order 42")
    outputs = await run_step(agent, context_for(asking, 0))
    assert isinstance(outputs[-1], ApprovalRequest) and outputs[-1].name == "refund"
    assert json.loads(outputs[-1].arguments) == {"order": "42"}
    assert effects(tmp_path) == []  # nothing ran before the approval
    paused = [o for o in outputs if isinstance(o, SaveState)][-1]
    answer = AgentRequest(response_id="resp_2", model="m", instructions=None, history=[], metadata={},
                          input_items=[{"type": "mcp_approval_response", "approval_request_id": "mcpr_1",
                                        "approve": True}], previous_state=paused.value)
    resumed = await run_step(agent, context_for(answer, 0, paused.value,
                                                approval=Approval("mcpr_1", True)))
    assert [r.name for r in resumed if isinstance(r, ToolRun)] == ["refund"]
    assert [e["effect"] for e in effects(tmp_path)] == ["refund"]


def test_the_setting_names_what_it_cannot_load() -> None:
    with pytest.raises(AgentLoadError, match="module 'no_such_module_here' could not be imported"):
        load_agent("no_such_module_here:build", settings())
    with pytest.raises(AgentLoadError, match="has no 'nothing'"):
        load_agent("tests.frameworkagents.app_agents:nothing", settings())
    with pytest.raises(AgentLoadError, match="must have the form 'module:callable'"):
        load_agent("tests.frameworkagents.app_agents", settings())
    with pytest.raises(AgentLoadError, match="returned str"):
        load_agent("tests.frameworkagents.app_agents:__name__.upper", settings())


async def test_a_tool_that_failed_before_the_crash_is_not_run_again_and_the_model_hears_the_same_error(
        model: FakeModel, tmp_path: Path) -> None:
    agent = wrap_agent(app_agents.build())
    req = request("please e-mail bob")
    first = await run_step(agent, context_for(req, 0))
    decision = next(o.value for o in first if isinstance(o, SaveProgress))
    failed = {**decision, "tools": {"call_2": {"output": None, "error": "RuntimeError: mail server down"}}}
    again = await run_step(wrap_agent(app_agents.build()), context_for(req, 0, is_recovery=True, progress=failed))
    assert [(r.name, r.output, r.error) for r in again if isinstance(r, ToolRun)] == [
        ("send_email", None, "RuntimeError: mail server down")]
    assert len(effects(tmp_path)) == 1  # only the first attempt's run: the failed one did not run again
    state = [o for o in again if isinstance(o, SaveState)][-1].value
    results = [c for m in state["messages"] for c in m["contents"] if c["type"] == "function_result"]
    # what Agent Framework tells the model of any failed tool (without include_detailed_errors), as it did
    # the first time
    assert [r["result"] for r in results] == ["Error: Function failed."]


def test_a_kept_decision_joins_streamed_text_and_replays_as_the_same_answer() -> None:
    from agent_framework import ChatResponse, ChatResponseUpdate, Content

    from resilient.agents.framework.decisions import coalesced

    streamed = [ChatResponseUpdate(contents=[Content.from_text(word)], role="assistant", message_id="m1")
                for word in ("Let ", "me ", "look ", "that ", "up.")]
    streamed.append(ChatResponseUpdate(contents=[Content.from_function_call("call_1", "send_email",
                                                                            arguments='{"to": "bob"}')],
                                       role="assistant", message_id="m1"))
    recorded = [json.loads(json.dumps(u.to_dict())) for u in streamed]
    kept = coalesced(recorded)
    assert len(kept) == 2
    replayed = ChatResponse.from_updates([ChatResponseUpdate.from_dict(u) for u in kept])
    original = ChatResponse.from_updates(streamed)
    assert replayed.text == original.text == "Let me look that up."
    assert [(c.type, c.call_id) for c in replayed.messages[-1].contents if c.type == "function_call"] == [
        ("function_call", "call_1")]
