"""The sample agent's Responses API path (``RESILIENT_MODEL_API=responses``) end to end: the unmodified app
under the host double, its agent talking to the fake model's ``POST /openai/v1/responses``, driven by the
official ``openai`` client.

A reasoning model's ``reasoning`` items (with ``encrypted_content``) reach it again: those a client sends,
and its own from earlier turns (``previous_response_id``, ``conversation``) and earlier phases of the turn.
A cancel closes the model's stream. A tool loop (the model calls a function, the
client answers, the model answers) survives a worker kill between two steps without asking the model again
for a step that was checkpointed.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from openai import OpenAI

from tests import itemshapes as shapes
from tests import live
from tests.fakemodel.responses_stream import encrypted
from tests.fakemodel.server import Behaviour, FakeModel, Seen
from tests.hostdouble.api import HostDouble
from tests.reliability.conftest import follow, kill, read_events
from tests.scenario.conftest import ROOT, wait_until

pytestmark = pytest.mark.azurite

WEATHER = {"type": "function", "name": "get_weather", "description": "Weather for a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
SLOW_ANSWER = [f"w{i} " for i in range(30)]


def decide(body: dict[str, Any]) -> Behaviour:
    """A reasoning model that decides from its input alone (a step asked again gets the same answer): a
    question → reasoning, then a call of ``get_weather``; a tool output → reasoning, then an answer quoting
    it; after an earlier phase's answer → a slow answer (room to kill the worker while it streams)."""
    last = body["input"][-1]
    if last.get("type") == "function_call_output":
        return Behaviour(chunks=["Done: ", str(last["output"]), "."], reasoning="Quote the tool.")
    if last.get("role") == "assistant":
        return Behaviour(kind="slow", chunks=SLOW_ANSWER, delay=0.05)
    return Behaviour(kind="tool_call", tool="get_weather", chunks=['{"city": ', '"Paris"}'],
                     call_id=f"call_{len(body['input'])}", reasoning="Weather needs a lookup.")


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeModel]:
    with FakeModel() as server:
        yield server


@pytest.fixture(scope="module")
def double(fake: FakeModel) -> Iterator[HostDouble]:
    live.skip_if_live("a host whose model endpoint is this test's fake model")
    env = {
        "AzureWebJobsStorage": os.environ.get("AzureWebJobsStorage", "UseDevelopmentStorage=true"),
        "RESILIENT_STORAGE_PREFIX": "r" + secrets.token_hex(4),
        "AZURE_OPENAI_ENDPOINT": fake.base + "/openai/v1",
        "AZURE_OPENAI_DEPLOYMENT": "reasoner",
        "AZURE_OPENAI_API_KEY": "test-key",
        "RESILIENT_MODEL_API": "responses",
        "RESILIENT_MODEL_MAX_RETRIES": "0",
        "RESILIENT_MODEL_TIMEOUT_SECONDS": "20",
    }
    with HostDouble(ROOT, env=env, settings=None) as running:
        yield running


@pytest.fixture(scope="module")
def client(double: HostDouble) -> OpenAI:
    return OpenAI(base_url=double.base_url, api_key="local", max_retries=0, timeout=60.0)


@pytest.fixture(autouse=True)
def _fresh_script(fake: FakeModel) -> None:
    fake.script.clear()
    fake.responder = None


def _reasoning_sent(request: Seen) -> list[str]:
    return [i["encrypted_content"] for i in request.body["input"] if i.get("type") == "reasoning"]


def test_reasoning_items_reach_the_model_and_its_own_come_back(client: OpenAI, fake: FakeModel) -> None:
    fake.script.append(Behaviour(chunks=["Twelve."], reasoning="Multiply by three."))
    developer = {"type": "message", "role": "developer", "content": [shapes.text("Read the chart."), shapes.IMAGE_URL]}
    history = [developer, shapes.user(shapes.text("What is 2+2?")), shapes.reasoning("Add them.", "enc-client"),
               shapes.assistant("Four."), shapes.user(shapes.text("And times 3?"))]
    first = client.responses.create(model="m", input=history, metadata={"research_phases": "1"})  # type: ignore[arg-type]
    assert first.status == "completed", first.error
    sent = fake.responses_requests()[-1]
    assert sent.path == "/openai/v1/responses" and not fake.chat_requests()
    assert _reasoning_sent(sent) == ["enc-client"]
    assert sent.body["input"][0]["content"][1] == {"type": "input_image", "detail": "high",  # as it is
                                                   "image_url": shapes.IMAGE_URL["image_url"]}
    assert (sent.body["store"], sent.body["include"]) == (False, ["reasoning.encrypted_content"])
    listed = [i for i in client.responses.input_items.list(first.id) if i.type == "reasoning"]
    assert [i.encrypted_content for i in listed] == ["enc-client"]

    reasoning, answer = first.output
    assert reasoning.type == "reasoning" and answer.type == "message" and first.output_text == "Twelve."
    assert reasoning.encrypted_content == encrypted("Multiply by three.")
    assert [s.text for s in reasoning.summary] == ["Multiply by three."]
    assert first.usage is not None and first.usage.output_tokens_details.reasoning_tokens > 0

    client.responses.create(model="m", input="And minus 1?", previous_response_id=first.id,
                            metadata={"research_phases": "1"})
    assert _reasoning_sent(fake.responses_requests()[-1]) == ["enc-client", encrypted("Multiply by three.")]


def _asked(fake: FakeModel, last: dict[str, Any]) -> list[Seen]:
    """The model requests whose input ends with ``last`` (the step they were asked for)."""
    return [r for r in fake.responses_requests() if r.body["input"][-1] == last]


def test_a_tool_loop_survives_a_kill_between_steps(client: OpenAI, fake: FakeModel, double: HostDouble) -> None:
    fake.responder = decide
    question = "Weather in Paris?"
    turn = client.responses.create(model="m", input=question, tools=[WEATHER],  # type: ignore[list-item]
                                   metadata={"research_phases": "3"})
    assert [o.type for o in turn.output] == ["reasoning", "function_call"], "the turn ends with the call"
    call = turn.output[1]
    assert call.type == "function_call" and call.arguments == '{"city": "Paris"}'

    output = {"type": "function_call_output", "call_id": call.call_id, "output": "18 C"}
    stream = client.responses.create(model="m", input=[output], previous_response_id=turn.id,  # type: ignore[list-item]
                                     tools=[WEATHER], metadata={"research_phases": "3"},  # type: ignore[list-item]
                                     stream=True, background=True)

    def second_step_streams(event: Any, seen: list[Any]) -> bool:  # the first step's checkpoint is written
        return event.type == "response.output_text.delta" and event.output_index == 2

    with stream:
        seen, _ = read_events(stream, stop=second_step_streams)
        assert seen[-1].type == "response.output_text.delta", "the kill lands inside the second step"
        kill(double)
    more, notes = follow(client, seen[0].response.id, seen[-1].sequence_number)
    events = seen + more
    assert events[-1].type == "response.completed", notes
    assert [e.sequence_number for e in events] == list(range(len(events)))

    final = client.responses.retrieve(seen[0].response.id)
    assert [o.type for o in final.output] == ["reasoning", "message", "message"]
    assert [o.content[0].text for o in final.output if o.type == "message"] == ["Done: 18 C.", "".join(SLOW_ANSWER)]
    sent_output = {"type": "function_call_output", "call_id": call.call_id, "output": "18 C"}
    asked_question = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": question}]}
    assert len(_asked(fake, asked_question)) == 1, "one tool decision"
    assert len(_asked(fake, sent_output)) == 1, "the checkpointed step is not asked again after the kill"
    second_step = _asked(fake, {"type": "message", "role": "assistant", "content": "Done: 18 C."})
    assert len(second_step) >= 2, "the step in flight ran again"
    assert all(json.dumps(r.body) == json.dumps(second_step[0].body) for r in second_step)  # same input
    assert _reasoning_sent(second_step[-1]) == [encrypted("Weather needs a lookup."), encrypted("Quote the tool.")]


def test_a_conversation_lists_the_models_reasoning_and_sends_it_back(client: OpenAI, fake: FakeModel) -> None:
    conversation = client.conversations.create()
    fake.script.extend([Behaviour(chunks=["Paris."], reasoning="Recall capitals."), Behaviour(chunks=["Yes."])])
    first = client.responses.create(model="m", input="Capital of France?", conversation=conversation.id,
                                    metadata={"research_phases": "1"})
    assert [o.type for o in first.output] == ["reasoning", "message"]
    listed = [i for i in client.conversations.items.list(conversation.id, order="asc") if i.type == "reasoning"]
    assert [i.encrypted_content for i in listed] == [encrypted("Recall capitals.")]
    client.responses.create(model="m", input="Sure?", conversation=conversation.id, metadata={"research_phases": "1"})
    assert _reasoning_sent(fake.responses_requests()[-1]) == [encrypted("Recall capitals.")]


def test_cancel_during_a_responses_stream_closes_it(client: OpenAI, fake: FakeModel) -> None:
    fake.script.append(Behaviour(kind="slow", chunks=[f"w{i} " for i in range(100)], delay=0.05, reasoning="Go."))
    closed_before = len(fake.closed_early)
    created = client.responses.create(model="m", input="Long answer", metadata={"research_phases": "2"},
                                      background=True)
    wait_until(lambda: any(r.body["input"][-1].get("content") == [{"type": "input_text", "text": "Long answer"}]
                           for r in fake.responses_requests()))
    assert client.responses.cancel(created.id).status == "cancelled"
    wait_until(lambda: len(fake.closed_early) > closed_before, timeout=30)
    assert 0 <= fake.closed_early[-1] < 100
