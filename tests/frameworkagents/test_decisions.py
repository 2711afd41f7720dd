"""The model's decision and each tool's result are kept durably inside a step; the agent's session is kept
with each step and across turns. Worker kills (SIGKILL) under the host double, on real Azurite, through
the official ``openai`` client."""

from __future__ import annotations

from pathlib import Path

import pytest
from openai import OpenAI

from tests.fakemodel.server import FakeModel
from tests.frameworkagents.conftest import effects_of
from tests.frameworkagents.model import ToolLoop
from tests.frameworkagents.test_scenarios import finish, output_kinds
from tests.hostdouble.api import HostDouble
from tests.reliability.conftest import kill, read_events
from tests.scenario.conftest import wait_until

pytestmark = pytest.mark.slow(seconds=16)  # about that long in all; see tests/conftest.py


def test_a_kill_while_the_second_tool_runs_repeats_only_that_tool_with_the_same_key(
        client: OpenAI, double: HostDouble, fake_model: FakeModel, effects_file: Path, policy: ToolLoop) -> None:
    """The model asks for ``reserve`` (quick) and ``charge`` (slow) in one answer; the worker dies while
    ``charge`` runs, after ``reserve`` returned. The model is not asked again, ``reserve`` does not run
    again, and ``charge`` runs at most twice, with the same key both times."""
    before = len(fake_model.chat_requests())
    stream = client.responses.create(model="fake", input="please book and pay", stream=True, background=True)
    with stream:
        seen, _ = read_events(stream, stop=lambda event, _: event.type == "response.output_item.done"
                              and event.item.type == "mcp_call")
        response_id = seen[0].response.id
        assert seen[-1].item.name == "reserve"  # its result is kept before its item is streamed
        wait_until(lambda: [e["effect"] for e in effects_of(effects_file, response_id)].count("charge_started") == 1,
                   timeout=20)
        assert "charge" not in [e["effect"] for e in effects_of(effects_file, response_id)]  # still running
        kill(double)
    finish(client, response_id, seen)
    assert len(fake_model.chat_requests()) - before == 2  # the decision once, the answer once: never asked again
    effects = effects_of(effects_file, response_id)
    assert [e["effect"] for e in effects].count("reserve") == 1
    started = [e["key"] for e in effects if e["effect"] == "charge_started"]
    assert 1 <= len(started) <= 2 and len(set(started)) == 1, started
    assert [e["key"] for e in effects if e["effect"] == "charge"] == started[:1]
    assert started[0].startswith(f"{response_id}/step-0/call_")
    final = client.responses.retrieve(response_id)
    assert output_kinds(final) == ["mcp_call", "mcp_call", "message"]
    assert sorted((i.name, i.output) for i in final.output[:2]) == [("charge", "10 charged"),
                                                                     ("reserve", "seat 12A reserved")]


def test_a_context_providers_session_state_survives_a_kill_and_the_next_turn(
        client: OpenAI, double: HostDouble, effects_file: Path, policy: ToolLoop) -> None:
    """``NameMemory`` (``app_agents.py``) keeps the user's name and a count of turns in the session. The
    second turn's worker is killed while the answer streams; the third turn's model is told the name and
    that two turns ran (after_run ran once per turn, the kill notwithstanding)."""
    first = client.responses.create(model="fake", input="my name is Ada; please e-mail bob")
    assert first.status == "completed", first.error
    policy.answer_delay = 0.5
    stream = client.responses.create(model="fake", input="please e-mail bob", stream=True, background=True,
                                     previous_response_id=first.id)
    with stream:
        seen, _ = read_events(stream, stop=lambda event, _: event.type == "response.output_text.delta")
        second = seen[0].response.id
        kill(double)
    policy.answer_delay = 0.0
    events = finish(client, second, seen)
    assert len([e for e in events if e.type == "response.in_progress"]) >= 2  # the step ran again
    assert len(effects_of(effects_file, second)) == 1
    third = client.responses.create(model="fake", input="what is my name?", previous_response_id=second)
    assert third.status == "completed", third.error
    assert "The user's name is Ada; turns remembered: 2." in third.output_text, third.output_text
    assert third.output_text.count("name is Ada") == 1  # told once, not once per step or attempt
