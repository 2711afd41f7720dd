"""The model path end to end: the unmodified app under the host double, its agent talking to a real HTTP
model server on a loopback port (``tests/fakemodel``), driven by the official ``openai`` client.

The model is reached with the Azure deployment URL shape and a managed-identity token that
``azure-identity`` fetches from the fake server's App Service style token endpoint.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from openai import BadRequestError, OpenAI

from tests import itemshapes as shapes
from tests import live
from tests.fakemodel.server import COMPLETION_TOKENS, IDENTITY_SECRET, PROMPT_TOKENS, Behaviour, FakeModel
from tests.hostdouble.api import HostDouble
from tests.scenario.conftest import ROOT, rebuild, wait_until

pytestmark = pytest.mark.azurite

MODEL_CLIENT_ID = "model-identity-client-id"
WEATHER = {"type": "function", "name": "get_weather", "description": "Weather for a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeModel]:
    with FakeModel() as server:
        yield server


@pytest.fixture(scope="module")
def model_double(fake: FakeModel) -> Iterator[HostDouble]:
    live.skip_if_live("a host whose model endpoint is this test's fake model")
    env = {
        "AzureWebJobsStorage": os.environ.get("AzureWebJobsStorage", "UseDevelopmentStorage=true"),
        "RESILIENT_STORAGE_PREFIX": "m" + secrets.token_hex(4),
        "RESILIENT_STEERABLE_CONVERSATIONS": "true",
        "AZURE_OPENAI_ENDPOINT": fake.base,
        "AZURE_OPENAI_DEPLOYMENT": "research-dep",
        "AZURE_OPENAI_CLIENT_ID": MODEL_CLIENT_ID,
        "AzureWebJobsStorage__clientId": "storage-identity-client-id",
        "IDENTITY_ENDPOINT": f"{fake.base}/msi/token",
        "IDENTITY_HEADER": IDENTITY_SECRET,
        "RESILIENT_MODEL_MAX_RETRIES": "1",
        "RESILIENT_MODEL_TIMEOUT_SECONDS": "20",
    }
    with HostDouble(ROOT, env=env, settings=None) as running:
        yield running


@pytest.fixture(scope="module")
def mclient(model_double: HostDouble) -> OpenAI:
    return OpenAI(base_url=model_double.base_url, api_key="local", max_retries=0,
                  _strict_response_validation=True, timeout=60.0)


@pytest.fixture(autouse=True)
def _fresh_script(fake: FakeModel) -> None:
    fake.script.clear()


def _phases(n: int) -> dict[str, str]:
    return {"research_phases": str(n)}


def plain(response: Any) -> dict[str, Any]:
    """A response as a dict, without what the stream helper adds when it parses (``parsed_arguments``,
    ``parsed`` of a text part: both None/derived here)."""
    dumped: dict[str, Any] = response.model_dump()
    for item in dumped["output"]:
        item.pop("parsed_arguments", None)
        for part in item.get("content") or []:
            part.pop("parsed", None)
    return dumped


def _texts(response: Any) -> list[str]:
    return [o.content[0].text for o in response.output if o.type == "message"]


def test_streamed_deltas_and_the_models_own_usage_reach_the_response(mclient: OpenAI, fake: FakeModel) -> None:
    before = len(fake.chat_requests())
    response = mclient.responses.create(model="m", input="Summarise checkpoints", metadata=_phases(2))
    assert response.status == "completed"
    assert _texts(response) == ["Model says hello.", "Model says hello."]
    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens) == (2 * PROMPT_TOKENS, 2 * COMPLETION_TOKENS)
    assert response.usage.input_tokens_details.cached_tokens == 22
    assert response.usage.total_tokens == 2 * (PROMPT_TOKENS + COMPLETION_TOKENS)
    sent = fake.chat_requests()[before:]
    assert len(sent) == 2
    assert all(r.body["stream"] is True and r.body["stream_options"] == {"include_usage": True} for r in sent)
    assert all(r.path == "/openai/deployments/research-dep/chat/completions" for r in sent)
    assert sent[1].body["messages"][-1] == {"role": "assistant", "content": "Model says hello."}


def test_the_model_is_called_with_a_managed_identity_token_of_its_own_client_id(mclient: OpenAI,
                                                                                 fake: FakeModel) -> None:
    mclient.responses.create(model="m", input="Who am I?", metadata=_phases(1))
    request = fake.chat_requests()[-1]
    assert request.headers["authorization"].startswith("Bearer fake-token-")
    assert "api-key" not in request.headers
    assert fake.token_requests, "azure-identity never asked the token endpoint"
    token = fake.token_requests[-1]
    assert token["client_id"] == MODEL_CLIENT_ID  # the model's identity, not the storage identity
    assert token["resource"] == "https://cognitiveservices.azure.com"


def test_model_tool_calls_stream_as_function_call_items(mclient: OpenAI, fake: FakeModel) -> None:
    fake.script.append(Behaviour(kind="tool_call", tool="get_weather", chunks=['{"city":', ' "Paris"}']))
    with mclient.responses.stream(model="m", input="Weather in Paris?", tools=[WEATHER],  # type: ignore[list-item]
                                  metadata=_phases(3), background=True) as stream:
        events = list(stream)
        final = stream.get_final_response()
    deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    assert deltas == ['{"city":', ' "Paris"}']
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert [d.arguments for d in done] == ['{"city": "Paris"}']
    call = final.output[-1]
    assert call.type == "function_call" and call.name == "get_weather" and call.arguments == '{"city": "Paris"}'
    assert len(final.output) == 1, "the turn ends after the phase that called a tool"
    assert plain(final) == plain(mclient.responses.retrieve(final.id))
    sent = fake.chat_requests()[-1].body
    assert sent["tools"] == [{"type": "function", "function": {
        "name": "get_weather", "description": "Weather for a city.", "parameters": WEATHER["parameters"]}}]
    assert sent["tool_choice"] == "auto"

    # The client runs the function and answers; the model sees the call and its output.
    answer = mclient.responses.create(model="m", previous_response_id=final.id, tools=[WEATHER],  # type: ignore[list-item]
                                      input=[{"type": "function_call_output", "call_id": call.call_id,
                                              "output": "18 C, light rain"}], metadata=_phases(1))
    assert answer.status == "completed" and _texts(answer) == ["Model says hello."]
    messages = fake.chat_requests()[-1].body["messages"]
    assert messages[-2]["tool_calls"][0]["id"] == call.call_id
    assert messages[-1] == {"role": "tool", "tool_call_id": call.call_id, "content": "18 C, light rain"}


def test_a_429_with_retry_after_is_retried_and_the_run_completes(mclient: OpenAI, fake: FakeModel,
                                                                 model_double: HostDouble) -> None:
    busy = Behaviour(kind="status", status=429, headers={"Retry-After": "1"}, message="Rate limit reached.")
    fake.script.extend([busy, busy, Behaviour(chunks=["after ", "the wait."])])
    before = len(fake.chat_requests())
    created = mclient.responses.create(model="m", input="Be patient", metadata=_phases(1), background=True)
    done = wait_until(lambda: (r := mclient.responses.retrieve(created.id)).status != "in_progress"
                      and r.status != "queued" and r, timeout=60)
    assert done.status == "completed" and _texts(done) == ["after the wait."]
    # The SDK retried once after Retry-After; its second 429 went to the orchestrator's durable wait.
    assert len(fake.chat_requests()) - before == 3
    assert "phase attempt failed: TransientAgentError: The model answered 429" in model_double.log()


def test_a_dropped_model_stream_is_retried_while_the_client_stays_connected(mclient: OpenAI,
                                                                            fake: FakeModel) -> None:
    """The phase fails mid-stream and runs again: the openai stream helper accepts the recovery stream,
    its final response equals GET, and a raw consumer rebuilds the fault-free text."""
    fake.script.extend([Behaviour(kind="drop", chunks=["half ", "an "]), Behaviour(chunks=["whole ", "answer."])])
    with mclient.responses.stream(model="m", input="Survive a dropped model", metadata=_phases(2),
                                  background=True) as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert final.status == "completed"
    assert _texts(final) == ["whole answer.", "Model says hello."]
    assert plain(final) == plain(mclient.responses.retrieve(final.id))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    abandoned = [e for e in events if e.type == "response.output_item.done" and e.item.status == "incomplete"]
    assert [a.item.content[0].text for a in abandoned] == ["half an "]
    assert [e.type for e in events].count("response.in_progress") == 2, "one recovery reset"
    assert [i["text"] for i in rebuild(events)] == _texts(final)


def test_a_401_fails_at_once_with_the_models_message(mclient: OpenAI, fake: FakeModel,
                                                     model_double: HostDouble) -> None:
    fake.script.append(Behaviour(kind="status", status=401, message="Access denied due to invalid subscription key."))
    before = len(fake.chat_requests())
    response = mclient.responses.create(model="m", input="Not allowed", metadata=_phases(3))
    assert response.status == "failed"
    assert response.error is not None and response.error.code == "server_error"
    assert "401" in response.error.message and "invalid subscription key" in response.error.message
    assert response.output == []
    assert len(fake.chat_requests()) - before == 1, "a permanent error is not retried"
    log = wait_until(lambda: "PermanentAgentError" in (text := model_double.log()) and text)
    assert "phase attempt failed: PermanentAgentError: The model answered 401" in log


def test_a_non_background_run_reports_the_real_cause(mclient: OpenAI, fake: FakeModel) -> None:
    fake.script.append(Behaviour(kind="drop", chunks=["cut"]))
    response = mclient.responses.create(model="m", input="Fragile", metadata=_phases(2))
    assert response.status == "failed" and response.error is not None
    assert response.error.message.startswith("The model connection failed"), response.error.message
    assert "worker running this response stopped" not in response.error.message


def test_cancel_during_a_model_stream_closes_the_model_stream(mclient: OpenAI, fake: FakeModel) -> None:
    fake.script.append(Behaviour(kind="slow", chunks=[f"w{i} " for i in range(100)], delay=0.05))
    created = mclient.responses.create(model="m", input="Long answer", metadata=_phases(2), background=True)
    wait_until(lambda: len(fake.chat_requests()) > 0
               and fake.chat_requests()[-1].body["messages"][-1].get("content") == "Long answer")
    cancelled = mclient.responses.cancel(created.id)
    assert cancelled.status == "cancelled"
    wait_until(lambda: len(fake.closed_early) > 0, timeout=30)
    assert 0 <= fake.closed_early[-1] < 100
    final = wait_until(lambda: (r := mclient.responses.retrieve(created.id)).output and r, timeout=30)
    assert final.status == "cancelled" and final.output[0].status == "incomplete"


def test_steering_during_a_model_stream_closes_it_and_the_next_turn_runs(mclient: OpenAI, fake: FakeModel) -> None:
    fake.script.append(Behaviour(kind="slow", chunks=[f"s{i} " for i in range(100)], delay=0.05))
    closed_before = len(fake.closed_early)
    first = mclient.responses.create(model="m", input="Talk for a while", metadata=_phases(2), background=True)
    wait_until(lambda: len(fake.chat_requests()) > 0
               and fake.chat_requests()[-1].body["messages"][-1].get("content") == "Talk for a while")
    second = mclient.responses.create(model="m", input="Actually, stop", previous_response_id=first.id,
                                      metadata=_phases(1), background=True)
    wait_until(lambda: len(fake.closed_early) > closed_before, timeout=30)
    one = wait_until(lambda: (r := mclient.responses.retrieve(first.id)).status == "completed" and r, timeout=30)
    assert one.output[0].status == "incomplete"
    two = wait_until(lambda: (r := mclient.responses.retrieve(second.id)).status == "completed" and r, timeout=30)
    assert _texts(two) == ["Model says hello."]


def test_tool_choice_none_is_passed_to_the_model(mclient: OpenAI, fake: FakeModel) -> None:
    mclient.responses.create(model="m", input="No tools please", tools=[WEATHER], tool_choice="none",  # type: ignore[list-item]
                             metadata=_phases(1))
    assert fake.chat_requests()[-1].body["tool_choice"] == "none"
    with pytest.raises(BadRequestError) as unknown:  # a name that is not among the tools (docs/CONTRACT.md, E11)
        mclient.responses.create(model="m", input="x", tool_choice={"type": "function", "name": "nope"},
                                 tools=[WEATHER], metadata=_phases(1))  # type: ignore[list-item]
    assert unknown.value.body["param"] == "tool_choice.name"  # type: ignore[index]


def test_a_chat_model_never_sees_reasoning_items_but_input_items_list_them(mclient: OpenAI, fake: FakeModel) -> None:
    developer = {"type": "message", "role": "developer", "content": [shapes.text("Read the chart."), shapes.IMAGE_URL]}
    turn = [developer, shapes.user(shapes.text("What is 2+2?")), shapes.reasoning("Add them.", "enc-client"),
            shapes.assistant("Four."), shapes.user(shapes.text("And times 3?"))]
    response = mclient.responses.create(model="m", input=turn, metadata=_phases(1))  # type: ignore[arg-type]
    assert response.status == "completed" and _texts(response) == ["Model says hello."]
    sent = fake.chat_requests()[-1].body
    assert "enc-client" not in json.dumps(sent) and "Add them." not in json.dumps(sent)
    assert sent["messages"][1:3] == [  # the developer message's image follows it (a system message takes text)
        {"role": "system", "content": "Read the chart."},
        {"role": "user", "content": [{"type": "text", "text": "(attachments of the developer message above)"},
                                     {"type": "image_url", "image_url": {"url": shapes.IMAGE_URL["image_url"],
                                                                         "detail": "high"}}]}]
    listed = [i for i in mclient.responses.input_items.list(response.id, order="asc") if i.type == "reasoning"]
    assert [(i.encrypted_content, i.summary[0].text) for i in listed] == [("enc-client", "Add them.")]
