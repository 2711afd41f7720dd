"""An Agent Framework agent hosted by the service, through the official ``openai`` client: tools as
``mcp_call`` items, usage as the model reported it, a follow-up turn that continues the conversation,
approval through an Agent Framework tool, and worker kills at each point of a tool loop."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI

from tests.contract.conftest import valid
from tests.fakemodel.server import COMPLETION_TOKENS, PROMPT_TOKENS, FakeModel
from tests.frameworkagents.conftest import effects_of
from tests.frameworkagents.model import ToolLoop
from tests.hostdouble.api import HostDouble
from tests.reliability.conftest import follow, kill, read_events
from tests.scenario.conftest import wait_until

pytestmark = pytest.mark.slow(seconds=30)  # about that long in all; see tests/conftest.py

TERMINAL = {"response.completed", "response.failed", "response.incomplete"}


def assert_contiguous(events: list[Any]) -> None:
    numbers = [e.sequence_number for e in events]
    assert numbers == list(range(numbers[0], numbers[0] + len(numbers))), numbers
    assert [e.type for e in events].count("response.completed") == 1
    assert events[-1].type in TERMINAL


def output_kinds(response: Any) -> list[str]:
    return [item.type for item in response.output]


def test_a_tool_loop_streams_its_tool_call_and_answer(client: OpenAI, effects_file: Path, policy: ToolLoop) -> None:
    with client.responses.stream(model="fake", input="please e-mail bob") as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert_contiguous(events)
    assert output_kinds(final) == ["mcp_call", "message"]
    call = final.output[0]
    assert (call.name, call.output, call.status, call.server_label) == (
        "send_email", "e-mail sent to bob", "completed", "agent")
    assert final.output_text == "Done: e-mail sent to bob."
    assert final.usage is not None
    assert (final.usage.input_tokens, final.usage.output_tokens) == (2 * PROMPT_TOKENS, 2 * COMPLETION_TOKENS)
    assert len(effects_of(effects_file, final.id)) == 1
    assert client.responses.retrieve(final.id).output_text == "Done: e-mail sent to bob."
    # what the contract documents (docs/openapi.yaml), for the response and every event
    assert valid("Response", client.responses.retrieve(final.id).model_dump(mode="json", exclude_unset=True))


def test_a_tool_loops_events_are_what_the_contract_documents(client: OpenAI, policy: ToolLoop) -> None:
    with client.responses.create(model="fake", input="please e-mail bob", stream=True) as stream:
        events = list(stream)
    assert "mcp_call" in [getattr(e, "item", None) and e.item.type for e in events]
    for event in events:
        assert valid("StreamEvent", event.model_dump(mode="json", exclude_unset=True)), event


def test_the_next_turn_continues_the_agents_conversation(client: OpenAI, fake_model: FakeModel,
                                                          policy: ToolLoop) -> None:
    first = client.responses.create(model="fake", input="please e-mail bob")
    assert first.status == "completed"
    second = client.responses.create(model="fake", input="thank you", previous_response_id=first.id)
    assert second.output_text == "You are welcome; tools used so far: 1."
    roles = [m["role"] for m in fake_model.chat_requests()[-1].body["messages"]]
    assert roles[-4:] == ["assistant", "tool", "assistant", "user"]


@pytest.mark.parametrize("resent", [False, True], ids=["previous_response_id", "history-resent"])
def test_an_agent_framework_tool_that_needs_approval_waits_for_it(client: OpenAI, effects_file: Path,
                                                                  policy: ToolLoop, resent: bool) -> None:
    """Answered with ``previous_response_id``, or as the Vercel AI SDK does with ``store: true``: the history
    resent (the request as an ``item_reference``) without it; the workflow's saved state carries over."""
    asked = client.responses.create(model="fake", input="please refund order 42")
    assert asked.status == "completed" and output_kinds(asked) == ["mcp_approval_request"]
    request = asked.output[0]
    assert request.name == "refund" and request.arguments == '{"order": "42"}'
    assert effects_of(effects_file, asked.id) == []
    answer = {"type": "mcp_approval_response", "approval_request_id": request.id, "approve": True}
    answered = client.responses.create(model="fake", input=[  # type: ignore[arg-type]
        {"role": "user", "content": "please refund order 42"}, {"type": "item_reference", "id": request.id},
        answer]) if resent else client.responses.create(
        model="fake", previous_response_id=asked.id, input=[answer])  # type: ignore[list-item]
    assert answered.status == "completed", answered.error
    assert output_kinds(answered) == ["mcp_call", "message"]
    assert answered.output_text == "Done: order 42 refunded."
    assert [e["effect"] for e in effects_of(effects_file, answered.id)] == ["refund"]


WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def test_the_requests_function_tools_are_run_by_the_client(client: OpenAI, fake_model: FakeModel,
                                                            policy: ToolLoop) -> None:
    asked = client.responses.create(model="fake", input="what is the weather in Paris?", tools=[WEATHER])
    assert asked.status == "completed" and output_kinds(asked) == ["function_call"]
    call = asked.output[0]
    assert call.name == "get_weather" and call.arguments == '{"city": "Paris"}'
    sent_tools = fake_model.chat_requests()[-1].body["tools"]
    assert [t["function"]["name"] for t in sent_tools] == ["send_email", "refund", "reserve", "charge", "get_weather"]
    answered = client.responses.create(
        model="fake", previous_response_id=asked.id, tools=[WEATHER],
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}])
    assert answered.status == "completed", answered.error
    assert answered.output_text == "Done: sunny."
    roles = [m["role"] for m in fake_model.chat_requests()[-1].body["messages"]]
    assert roles[-3:] == ["user", "assistant", "tool"]


# ---------------------------------------------------------------------------------------------- kills
def start_background(client: OpenAI) -> tuple[Any, list[Any]]:
    stream = client.responses.create(model="fake", input="please e-mail bob", stream=True, background=True)
    return stream, []


def step_done(double: HostDouble, response_id: str, phase: int) -> bool:
    return bool(re.search(rf"phase done \| response_id={re.escape(response_id)} phase={phase}(?!\d)", double.log()))


def finish(client: OpenAI, response_id: str, seen: list[Any]) -> list[Any]:
    more, notes = follow(client, response_id, seen[-1].sequence_number)
    events = seen + more
    assert events[-1].type == "response.completed", (notes, [e.type for e in events[-5:]])
    assert_contiguous(events)
    return events


def test_killed_while_the_model_streams_its_tool_call(client: OpenAI, double: HostDouble, fake_model: FakeModel,
                                                      effects_file: Path, policy: ToolLoop) -> None:
    policy.call_delay = 0.8
    before = len(fake_model.chat_requests())
    stream = client.responses.create(model="fake", input="please e-mail bob", stream=True, background=True)
    with stream:
        seen, _ = read_events(stream, stop=lambda event, _: event.type == "response.in_progress")
        response_id = seen[0].response.id
        wait_until(lambda: len(fake_model.chat_requests()) > before, timeout=20)
        kill(double)
    policy.call_delay = 0.0
    events = finish(client, response_id, seen)
    assert len(effects_of(effects_file, response_id)) == 1  # the tool never ran before the kill
    assert client.responses.retrieve(response_id).output_text == "Done: e-mail sent to bob."
    assert [e.type for e in events].count("response.completed") == 1


def test_killed_after_a_tool_ran_and_before_the_next_model_call(client: OpenAI, double: HostDouble,
                                                                effects_file: Path, policy: ToolLoop) -> None:
    policy.answer_delay = 1.0  # the answer's first chunk comes a second after the next model call starts
    stream = client.responses.create(model="fake", input="please e-mail bob", stream=True, background=True)
    with stream:
        seen, _ = read_events(stream, stop=lambda event, _: event.type == "response.output_item.done")
        response_id = seen[0].response.id
        assert seen[-1].item.type == "mcp_call"
        wait_until(lambda: step_done(double, response_id, 0), timeout=20)  # the tool's step is checkpointed
        kill(double)
    policy.answer_delay = 0.0
    finish(client, response_id, seen)
    assert len(effects_of(effects_file, response_id)) == 1  # the finished step's tool did not run again
    final = client.responses.retrieve(response_id)
    assert output_kinds(final) == ["mcp_call", "message"] and final.output_text == "Done: e-mail sent to bob."


def test_killed_while_the_answer_streams(client: OpenAI, double: HostDouble, effects_file: Path,
                                         policy: ToolLoop) -> None:
    policy.answer_delay = 0.6
    stream = client.responses.create(model="fake", input="please e-mail bob", stream=True, background=True)
    with stream:
        seen, _ = read_events(stream, stop=lambda event, _: event.type == "response.output_text.delta")
        response_id = seen[0].response.id
        kill(double)
    policy.answer_delay = 0.0
    events = finish(client, response_id, seen)
    assert len(effects_of(effects_file, response_id)) == 1
    resets = [e for e in events if e.type == "response.in_progress"]
    assert len(resets) >= 2  # the opening one and the recovery reset before the answer streams again
    final = client.responses.retrieve(response_id)
    assert output_kinds(final) == ["mcp_call", "message"] and final.output_text == "Done: e-mail sent to bob."
    time.sleep(0)  # keep the double's log readable between tests


def test_a_steered_agent_finishes_its_step_early_then_the_queued_turn_runs(client: OpenAI, fake_model: FakeModel,
                                                                          effects_file: Path,
                                                                          policy: ToolLoop) -> None:
    policy.answer_delay = 0.5  # the answer streams slowly: room to steer it
    conv = client.conversations.create().id
    first = client.responses.create(model="fake", input="please e-mail bob", background=True, conversation=conv)
    wait_until(lambda: any(e.type == "response.output_text.delta"
                           for e in client.responses.retrieve(first.id, stream=True, starting_after=-1)
                           if e.type != "response.completed"), timeout=30)
    second = client.responses.create(model="fake", input="thank you", background=True, conversation=conv)
    assert second.status == "queued"
    done_first = wait_until(lambda: (r := client.responses.retrieve(first.id)).status != "in_progress" and r,
                            timeout=60)
    assert done_first.status == "completed"
    assert output_kinds(done_first) == ["mcp_call", "message"] and done_first.output[-1].status == "incomplete"
    assert done_first.output_text != "Done: e-mail sent to bob."  # it stopped early
    policy.answer_delay = 0.0
    done_second = wait_until(lambda: (r := client.responses.retrieve(second.id)).status == "completed" and r,
                             timeout=60)
    assert done_second.output_text == "You are welcome; tools used so far: 1."  # it sees the first turn's tool
    assert len(effects_of(effects_file, first.id)) == 1


def test_a_worker_told_to_shut_down_stops_its_step_which_runs_again_elsewhere(
        client: OpenAI, double: HostDouble, effects_file: Path, policy: ToolLoop) -> None:
    """SIGTERM (scale-in, host stop): the step streaming the answer stops at once, closes its item
    ``incomplete`` itself and is not checkpointed; the next worker runs it again from the tool's result."""
    import os
    import signal

    policy.answer_delay = 0.4
    stream = client.responses.create(model="fake", input="please e-mail bob", stream=True, background=True)
    with stream:
        seen, _ = read_events(stream, stop=lambda event, _: event.type == "response.output_text.delta")
        response_id = seen[0].response.id
        before = double.stats()["worker_restarts"]
        os.kill(double.stats()["worker_pid"], signal.SIGTERM)
        double.wait_for_worker_restarts(before + 1, timeout=60)
    policy.answer_delay = 0.0
    events = finish(client, response_id, seen)
    closed = [e for e in events if e.type == "response.output_item.done" and e.item.type == "message"]
    assert closed[0].item.status == "incomplete"  # closed by the worker that stopped, before the reset
    assert [e.type for e in events].index("response.in_progress", 2) > events.index(closed[0])
    assert re.search(rf"phase stopped: the worker is shutting down \| response_id={response_id}", double.log())
    assert len(effects_of(effects_file, response_id)) == 1
    assert client.responses.retrieve(response_id).output_text == "Done: e-mail sent to bob."
