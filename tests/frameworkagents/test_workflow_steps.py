"""A hosted workflow on its own (no storage, no host): a new workflow object for every step, typed answers to
``request_info``, usage from its agents' models, checkpoints decoded only into allowed types, and what the
loader accepts and refuses."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from agent_framework import (
    Executor,
    FileCheckpointStorage,
    WorkflowBuilder,
    WorkflowCheckpointException,
    WorkflowContext,
    handler,
    response_handler,
)

from resilient.agents.base import (
    AgentRequest,
    FunctionCall,
    NextStep,
    PermanentAgentError,
    PhaseContext,
    SaveState,
    Usage,
)
from resilient.agents.framework.step_checkpoints import StepCheckpointStorage
from resilient.agents.framework.workflow import FrameworkWorkflow
from resilient.agents.loader import AgentLoadError, load_agent, wrap_agent
from resilient.settings import Settings
from resilient.typed_answers import answer_problem
from tests.fakemodel.server import COMPLETION_TOKENS, PROMPT_TOKENS, FakeModel
from tests.frameworkagents.model import ToolLoop

APP = "tests.frameworkagents.app_workflow"


def settings() -> Settings:
    return Settings.from_env({"AzureWebJobsStorage": "UseDevelopmentStorage=true"})


def request(response_id: str, text: str | None = None, previous_state: Any = None,
            outputs: dict[str, str] | None = None) -> AgentRequest:
    items: list[dict[str, Any]] = [{"type": "message", "role": "user", "content": text}] if text else []
    items += [{"type": "function_call_output", "call_id": c, "output": o} for c, o in (outputs or {}).items()]
    return AgentRequest(response_id=response_id, model="m", instructions=None, input_items=items, history=[],
                        metadata={}, previous_state=previous_state)


async def run_turn(agent: Any, req: AgentRequest, state: Any = None) -> tuple[list[Any], Any]:
    """Every step of one turn, each from the JSON state the one before saved (as separate activities)."""
    outputs: list[Any] = []
    for index in range(20):
        context = PhaseContext(request=req, plan=[], phase_index=index, is_recovery=False, output_so_far=[],
                               state=state)
        step = [o async for o in agent.run_phase(context)]
        outputs += step
        saved = [o for o in step if isinstance(o, SaveState)]
        state = json.loads(json.dumps(saved[-1].value)) if saved else state
        if not any(isinstance(o, NextStep) for o in step):
            return outputs, state
    raise AssertionError("the turn did not end")


def text(outputs: list[Any]) -> str:
    return "".join(o for o in outputs if isinstance(o, str))


def calls(outputs: list[Any]) -> list[FunctionCall]:
    return [o for o in outputs if isinstance(o, FunctionCall)]


@pytest.fixture()
def effects(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    path = tmp_path / "effects.jsonl"
    monkeypatch.setenv("SIDE_EFFECTS_FILE", str(path))
    return path


async def test_overlapping_turns_each_get_their_own_workflow(effects: Path) -> None:
    agent = load_agent(f"{APP}:build", settings())
    done = await asyncio.gather(*(run_turn(agent, request(f"resp_{n}", f"topic {n}")) for n in range(4)))
    assert [text(outputs) for outputs, _ in done] == [f"Drafted from the outline of topic {n}. Published."
                                                      for n in range(4)]


async def test_a_turn_abandoned_mid_superstep_leaves_nothing_for_the_next(effects: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKFLOW_DRAFT_DELAY", "5")
    agent = load_agent(f"{APP}:build", settings())
    _, state = await run_turn(agent, request("resp_a", "first"))  # outline only: the turn's next step is draft
    context = PhaseContext(request=request("resp_a", "first"), plan=[], phase_index=1, is_recovery=False,
                           output_so_far=[], state=state)
    step = agent.run_phase(context)
    pending = asyncio.ensure_future(step.__anext__())
    await asyncio.sleep(0.3)  # draft is sleeping with a message in flight: the response is cancelled here
    pending.cancel()
    await step.aclose()
    monkeypatch.setenv("WORKFLOW_DRAFT_DELAY", "0")
    outputs, _ = await run_turn(agent, request("resp_b", "second"))
    assert text(outputs) == "Drafted from the outline of second. Published."


async def test_a_failed_turn_leaves_nothing_for_the_next(effects: Path) -> None:
    agent = load_agent(f"{APP}:build", settings())
    with pytest.raises(RuntimeError, match="the outline exploded"):
        await run_turn(agent, request("resp_f", "explode"))
    outputs, _ = await run_turn(agent, request("resp_g", "calm"))
    assert text(outputs) == "Drafted from the outline of calm. Published."


async def test_a_factory_that_returns_one_workflow_twice_is_refused_with_a_reason(effects: Path) -> None:
    agent = load_agent(f"{APP}:build_shared", settings())
    first = agent.run_phase(PhaseContext(request=request("resp_1", "one"), plan=[], phase_index=0,
                                         is_recovery=False, output_so_far=[]))
    assert [o async for o in first][-1] == NextStep()  # start-up's own object runs the first step
    with pytest.raises(PermanentAgentError, match="build a new one on every call"):
        await run_turn(agent, request("resp_2", "two"))  # its next step gets the same object again


async def test_a_title_and_a_decision_are_asked_together_and_answered_with_typed_values(effects: Path) -> None:
    agent = load_agent(f"{APP}:build", settings())
    asked, paused = await run_turn(agent, request("resp_1", "both please"))
    title, decision = calls(asked)
    assert title.name == "request_info" and decision.name == "publish_request"
    assert json.loads(title.arguments) == {"data": "Title for outline of both please?", "response_type": "str",
                                           "response_schema": {"type": "string"}}
    decision_args = json.loads(decision.arguments)
    assert decision_args["data"] == {"draft": "outline of both please", "words": 4}
    assert decision_args["response_type"] == "Decision"
    assert decision_args["response_schema"]["required"] == ["approved"]
    assert [c["call_id"] for c in paused["pending"]] == [title.call_id, decision.call_id]
    answers = {str(title.call_id): "Cats, durably", str(decision.call_id): '{"approved": true, "note": "ok"}'}
    fresh = load_agent(f"{APP}:build", settings())  # another worker: built anew, restored from the state
    done, _ = await run_turn(fresh, request("resp_2", None, paused, answers), paused)
    assert text(done) == "Published as 'Cats, durably'. Published after approval (ok) of 4 words. "


def test_a_wrong_answer_is_found_before_the_turn_and_names_the_type() -> None:
    call = {"type": "function_call", "call_id": "wfreq_1", "name": "publish_request",
            "arguments": json.dumps({"data": {}, "response_type": "Decision", "response_schema": {
                "type": "object", "properties": {"approved": {"type": "boolean"}}, "required": ["approved"]}})}
    assert answer_problem(call, '{"approved": true}') is None
    assert "expected Decision" in str(answer_problem(call, '{"note": "x"}'))
    assert "'approved' is a required property" in str(answer_problem(call, '{"note": "x"}'))
    assert "not JSON" in str(answer_problem(call, "yes"))
    as_string = {**call, "arguments": json.dumps({"response_type": "str", "response_schema": {"type": "string"}})}
    assert answer_problem(as_string, "anything at all") is None
    client_tool = {**call, "call_id": "call_1"}  # the client's own function tools are not checked
    assert answer_problem(client_tool, "yes") is None


async def test_usage_is_the_sum_of_the_agent_executors_model_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeModel() as fake:
        fake.responder = ToolLoop()
        monkeypatch.setenv("FAKE_MODEL_URL", fake.base)
        agent = load_agent(f"{APP}:build_with_agents", settings())
        outputs, _ = await run_turn(agent, request("resp_u", "thanks"))
    usage = [o for o in outputs if isinstance(o, Usage)]
    assert len(usage) == 2  # one model call per agent executor
    assert sum(u.input_tokens for u in usage) == 2 * PROMPT_TOKENS
    assert sum(u.output_tokens for u in usage) == 2 * COMPLETION_TOKENS
    assert "You are welcome" in text(outputs)


async def test_a_workflow_without_models_reports_no_usage(effects: Path) -> None:
    outputs, _ = await run_turn(load_agent(f"{APP}:build", settings()), request("resp_n", "quiet"))
    assert not [o for o in outputs if isinstance(o, Usage)]


async def test_a_workflow_agent_runs_as_its_workflow_superstep_by_superstep(effects: Path) -> None:
    agent = load_agent(f"{APP}:build_as_agent", settings())
    assert isinstance(agent, FrameworkWorkflow)
    outputs, _ = await run_turn(agent, request("resp_w", "owls"))
    assert text(outputs) == "Drafted from the outline of owls. Published."
    assert sum(isinstance(o, NextStep) for o in outputs) == 3  # topic, outline, draft; publish ends the turn


@pytest.mark.filterwarnings(r"ignore:\[FUNCTIONAL_WORKFLOWS\]")
def test_a_functional_workflow_is_refused_with_what_to_do_instead() -> None:
    with pytest.raises(AgentLoadError, match=r"functional workflow .*Build the workflow with WorkflowBuilder"):
        load_agent("tests.frameworkagents.app_functional:build", settings())


def test_an_agent_that_cannot_be_stepped_is_refused_with_what_to_do_instead() -> None:
    class RunsWhole:
        async def run(self, messages: Any) -> Any:
            return None

    refusal = r"cannot be run step by step: its run\(\) takes no chat and function middleware.*Build an agent_framework"
    with pytest.raises(AgentLoadError, match=refusal):
        wrap_agent(RunsWhole())


@dataclass
class Unregistered:
    secret: str


class AsksUnregistered(Executor):
    @handler
    async def ask(self, text: str, ctx: WorkflowContext[str, str]) -> None:
        await ctx.request_info(Unregistered(text), str)

    @response_handler
    async def answered(self, request: Unregistered, answer: str, ctx: WorkflowContext[str, str]) -> None:
        await ctx.yield_output(answer)


def _asks_unregistered() -> Any:
    return WorkflowBuilder(name="unregistered", start_executor=AsksUnregistered(id="ask")).build()


async def test_a_checkpoint_holding_a_type_nobody_allowed_is_not_saved() -> None:
    agent = FrameworkWorkflow(_asks_unregistered)
    with pytest.raises(PermanentAgentError, match=r"could not be checkpointed.*register_checkpoint_type"):
        await run_turn(agent, request("resp_x", "hush"))


async def test_a_stored_checkpoint_is_decoded_only_into_allowed_types(tmp_path: Path) -> None:
    allowed = FileCheckpointStorage(tmp_path, allowed_checkpoint_types=[f"{__name__}:Unregistered"])
    async for _ in _asks_unregistered().run("hush", checkpoint_storage=allowed, stream=True):
        pass
    latest = await allowed.get_latest(workflow_name="unregistered")
    assert latest is not None and latest.pending_request_info_events  # the request's data is in it
    encoded = json.loads((tmp_path / f"{latest.checkpoint_id}.json").read_text())
    strict = StepCheckpointStorage()  # the service's own: only registered types
    try:
        with pytest.raises(WorkflowCheckpointException, match="blocked"):
            await strict.restore(encoded)
    finally:
        strict.close()



def test_a_workflow_request_is_a_function_call_item_whatever_the_request_offers() -> None:
    from resilient.engine.run.phase_items import PhaseItems
    from resilient.ids import new_response_id

    # No tools offered, tool_choice none: a workflow may still ask.
    items = PhaseItems(0, set(), "none", response_id=new_response_id())
    items.feed(FunctionCall("publish_request", '{"data": {}}', call_id="wfreq_1", agent_defined=True))
    assert [(i["type"], i["name"], i["call_id"]) for i in items.items] == [("function_call", "publish_request",
                                                                           "wfreq_1")]
