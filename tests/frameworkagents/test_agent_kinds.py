"""Which Agent Framework agents are run step by step, and which are refused with a message (never run as
one unchecked step)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from agent_framework import AgentSession, InMemoryHistoryProvider, RawAgent

from resilient.agents.base import NextStep, PermanentAgentError, SaveState, ToolRun
from resilient.agents.framework.agent import FrameworkAgent
from resilient.agents.loader import AgentLoadError, wrap_agent
from tests.fakemodel.server import FakeModel
from tests.frameworkagents import app_agents
from tests.frameworkagents.test_adapter import context_for, effects, request, run_step


async def two_steps(agent: Any, model: FakeModel) -> tuple[list[Any], list[Any]]:
    req = request("please e-mail bob")
    first = await run_step(agent, context_for(req, 0))
    assert len(model.chat_requests()) == 1  # the step ended before the next model call
    state = json.loads(json.dumps([o for o in first if isinstance(o, SaveState)][-1].value))
    return first, await run_step(agent, context_for(req, 1, state))


async def test_a_raw_agent_is_stepped_through_its_chat_clients_middleware(model: FakeModel, tmp_path: Path) -> None:
    raw = RawAgent(client=app_agents._client(), instructions="You send e-mails.", tools=[app_agents.send_email])
    first, second = await two_steps(wrap_agent(raw), model)
    assert [(r.name, r.output) for r in first if isinstance(r, ToolRun)] == [("send_email", "e-mail sent to bob")]
    assert isinstance(first[-1], NextStep)
    assert "".join(o for o in second if isinstance(o, str)) == "Done: e-mail sent to bob."
    assert [e["key"] for e in effects(tmp_path)] == ["resp_1/step-0/call_2"]


async def test_a_factory_builds_a_fresh_agent_for_every_step(model: FakeModel) -> None:
    built: list[Any] = []

    def factory() -> Any:
        built.append(app_agents.build())
        return built[-1]

    _, second = await two_steps(FrameworkAgent(factory), model)
    assert len(built) == 2 and built[0] is not built[1]
    assert "".join(o for o in second if isinstance(o, str)) == "Done: e-mail sent to bob."


class RunOnly:
    """A ``SupportsAgentRun`` written from scratch: its ``run`` takes no middleware."""

    id = "run-only"
    name = "run-only"
    description = None

    def run(self, messages: Any = None, *, stream: bool = False, session: Any = None, **kwargs: Any) -> Any:
        raise AssertionError("never run: it cannot be stepped")

    def create_session(self, *, session_id: str | None = None) -> AgentSession:
        return AgentSession(session_id=session_id)


def test_an_agent_whose_run_takes_no_middleware_is_refused() -> None:
    with pytest.raises(AgentLoadError, match="RunOnly cannot be run step by step: its run\\(\\) takes no chat"):
        wrap_agent(RunOnly())


def test_an_agent_with_its_own_history_provider_is_refused(model: FakeModel) -> None:
    agent = app_agents.build()
    agent.context_providers.append(InMemoryHistoryProvider())
    with pytest.raises(AgentLoadError, match="has a history provider of its own \\('in_memory'\\)"):
        wrap_agent(agent)
    agent.context_providers[-1] = InMemoryHistoryProvider(load_messages=False)  # an audit log: fine
    assert isinstance(wrap_agent(agent), FrameworkAgent)


async def test_a_factory_that_builds_an_agent_that_cannot_be_stepped_fails_the_step_with_the_reason() -> None:
    agent = FrameworkAgent(RunOnly)
    with pytest.raises(PermanentAgentError, match="RunOnly cannot be run step by step"):
        await run_step(agent, context_for(request("hello"), 0))
