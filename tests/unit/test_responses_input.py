"""The sample agent's Responses API path: items as Responses input (checked strictly against the ``openai``
param types), parameters as ``responses.create`` arguments, the setting that chooses the path, and a model's
streamed events (from the fake model, through the real ``openai`` client) as phase outputs."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

import pytest
from openai.resources.responses.responses import AsyncResponses
from openai.types.responses import ResponseFailedEvent, ResponseInputItemParam

from resilient.agents import model
from resilient.agents.base import (
    AgentRequest,
    FunctionCallDelta,
    PermanentAgentError,
    Reasoning,
    TransientAgentError,
    Usage,
)
from resilient.agents.model_calls import ChatCall, ResponsesCall, model_call
from resilient.agents.responses_input import responses_input
from resilient.agents.responses_params import responses_params
from resilient.engine.run.phase_items import PhaseItems
from resilient.protocol.events import validate_event
from resilient.protocol.items import validate_output_item
from resilient.protocol.typed_check import check_typed
from resilient.settings import Settings
from tests import itemshapes as shapes
from tests.fakemodel.responses_stream import REASONING_TOKENS, encrypted
from tests.fakemodel.server import CACHED_TOKENS, COMPLETION_TOKENS, PROMPT_TOKENS, Behaviour, FakeModel


def _typed(items: list[Any]) -> list[Any]:
    for index, item in enumerate(items):
        check_typed(ResponseInputItemParam, item, at=f"input[{index}]")  # strict: no coercion, no unknown key
    return items


def test_each_item_keeps_its_own_form() -> None:
    developer = {"type": "message", "role": "developer", "content": [shapes.text("be brief"), shapes.IMAGE_URL]}
    history = [shapes.user(shapes.text("Look"), shapes.IMAGE_DATA, shapes.FILE_DATA, shapes.FILE_URL),
               shapes.reasoning("Think about the chart.", "enc-1"), shapes.assistant("A chart."), developer,
               shapes.call("call_0", "never_answered")]
    turn = [shapes.user(shapes.text("weather?")), shapes.call("call_1", "get_weather", '{"city": "Oslo"}'),
            shapes.call_output("call_1", [shapes.text("rain"), shapes.IMAGE_FILE_ID]),
            {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": True}]
    assert _typed(responses_input([*history, *turn])) == [
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "Look"},
            {"type": "input_image", "detail": "auto", "image_url": shapes.PNG_DATA_URL},
            {"type": "input_file", "file_data": shapes.PDF_DATA_URL, "filename": "notes.pdf"},
            {"type": "input_file", "file_url": "https://example.com/report.pdf"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Think about the chart."}],
         "encrypted_content": "enc-1"},
        {"type": "message", "role": "assistant", "content": "A chart."},
        {"type": "message", "role": "developer", "content": [  # a developer message's image goes as it is
            {"type": "input_text", "text": "be brief"},
            {"type": "input_image", "detail": "high", "image_url": "https://example.com/cat.png"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "weather?"}]},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Oslo"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": [
            {"type": "input_text", "text": "rain"}, {"type": "input_image", "detail": "low", "file_id": "file-img1"}]},
        {"role": "user", "content": "(approved)"},
    ]


def test_reasoning_without_encrypted_content_or_what_it_led_to_is_left_out() -> None:
    bare = {"type": "reasoning", "id": "rs_2", "summary": [{"type": "summary_text", "text": "stored elsewhere"}]}
    refused = shapes.assistant("", refusal="I cannot help with that.")
    cut_short = shapes.reasoning("A phase stopped while the model reasoned.", "enc-cut")
    led_to_unsent_call = shapes.reasoning("Call a tool.", "enc-call")
    items = [bare, refused, cut_short, shapes.user(shapes.text("next")), led_to_unsent_call,
             shapes.call("call_8", "never_answered"), shapes.call_output("call_9", "done")]
    assert _typed(responses_input(items)) == [
        {"type": "message", "role": "assistant", "id": "msg_a1", "status": "completed",
         "content": [{"type": "refusal", "refusal": "I cannot help with that."}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "next"}]},
        {"type": "function_call_output", "call_id": "call_9", "output": "done"},
    ]


def test_parameters_keep_their_responses_names() -> None:
    params = {"temperature": 0.2, "top_p": 0.9, "presence_penalty": 0.5, "frequency_penalty": 0.1,
              "max_output_tokens": 64, "top_logprobs": 3, "parallel_tool_calls": False,
              "reasoning": {"effort": "high", "summary": "auto"}, "truncation": "auto", "max_tool_calls": 2,
              "text": {"format": {"type": "json_object"}, "verbosity": "low"}, "prompt_cache_key": "k",
              "prompt_cache_retention": "24h", "safety_identifier": "s", "service_tier": "flex", "user": "u",
              "include": ["message.output_text.logprobs"]}
    found = responses_params(params)
    assert set(found) <= set(inspect.signature(AsyncResponses.create).parameters)  # every name is an argument
    expected = {k: v for k, v in params.items() if k not in ("presence_penalty", "frequency_penalty", "include")}
    assert found == {**expected, "store": False,
                     "include": ["message.output_text.logprobs", "reasoning.encrypted_content"]}
    assert responses_params({"include": ["reasoning.encrypted_content"]})["include"] == ["reasoning.encrypted_content"]


def test_one_setting_chooses_the_api() -> None:
    assert Settings.from_env({}).model_api == "chat"
    assert Settings.from_env({"RESILIENT_MODEL_API": "Responses"}).model_api == "responses"
    with pytest.raises(ValueError, match="RESILIENT_MODEL_API must be one of chat, responses"):
        Settings.from_env({"RESILIENT_MODEL_API": "assistants"})
    request = AgentRequest("resp_1", "m", None, [], [], {})
    assert isinstance(model_call("chat", request, "sys", []), ChatCall)
    assert isinstance(model_call("responses", request, "sys", []), ResponsesCall)


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeModel]:
    with FakeModel() as server:
        yield server


async def _outputs(fake: FakeModel, request: AgentRequest, earlier: list[dict[str, Any]]) -> list[Any]:
    client = model.create_client(Settings.from_env({"AZURE_OPENAI_ENDPOINT": fake.base + "/v1",
                                                    "AZURE_OPENAI_DEPLOYMENT": "dep", "AZURE_OPENAI_API_KEY": "k",
                                                    "RESILIENT_MODEL_MAX_RETRIES": "0"}))
    call = ResponsesCall(request, "Be brief.", earlier)
    try:
        stream = await call.open(client, "dep")
        return [output async for event in stream for output in call.outputs(event)]
    finally:
        await client.close()


async def test_streamed_events_become_text_calls_reasoning_and_usage(fake: FakeModel) -> None:
    tool = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}
    request = AgentRequest("resp_1", "m", None, [shapes.user(shapes.text("Weather?"))], [], {}, tools=[tool],
                           params={"temperature": 0.3})
    fake.script.append(Behaviour(kind="tool_call", tool="get_weather", chunks=['{"city":', ' "Oslo"}'],
                                 reasoning="Oslo needs a lookup."))
    outputs = await _outputs(fake, request, [shapes.assistant("An earlier phase.")])
    assert outputs == [Reasoning(("Oslo needs a lookup.",), encrypted("Oslo needs a lookup.")),
                       FunctionCallDelta(key=1, name="get_weather", arguments=""),
                       FunctionCallDelta(key=1, arguments='{"city":'), FunctionCallDelta(key=1, arguments=' "Oslo"}'),
                       Usage(PROMPT_TOKENS, COMPLETION_TOKENS, CACHED_TOKENS, REASONING_TOKENS)]
    sent = fake.responses_requests()[-1]
    assert sent.path == "/v1/responses"
    assert (sent.body["stream"], sent.body["store"], sent.body["instructions"]) == (True, False, "Be brief.")
    assert sent.body["include"] == ["reasoning.encrypted_content"] and sent.body["temperature"] == 0.3
    assert sent.body["tools"] == [tool] and sent.body["tool_choice"] == "auto"
    assert sent.body["input"][-1] == {"type": "message", "role": "assistant", "content": "An earlier phase."}

    fake.script.append(Behaviour(chunks=["Rain ", "in Oslo."]))
    texts = await _outputs(fake, request, [])
    assert texts[:2] == ["Rain ", "in Oslo."] and isinstance(texts[2], Usage)


@pytest.mark.parametrize(("code", "kind"), [("invalid_prompt", PermanentAgentError),
                                              ("server_error", TransientAgentError),
                                              ("rate_limit_exceeded", TransientAgentError)])
def test_a_failed_response_is_an_agent_error_of_its_kind(code: str, kind: type[Exception]) -> None:
    call = ResponsesCall(AgentRequest("resp_1", "m", None, [], [], {}), "sys", [])
    failed = ResponseFailedEvent.model_validate({
        "type": "response.failed", "sequence_number": 3,
        "response": {"id": "resp_x", "object": "response", "created_at": 1, "model": "m", "output": [],
                     "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "status": "failed",
                     "error": {"code": code, "message": "It went wrong."}}})
    with pytest.raises(kind, match=rf"failed \({code}\): It went wrong") as raised:
        list(call.outputs(failed))
    assert model.agent_error(raised.value) is raised.value, "an error event is not classified again"


def test_a_models_reasoning_becomes_a_reasoning_output_item_before_its_answer() -> None:
    rid = "resp_" + "ab" * 24
    items = PhaseItems(2, set(), "auto", response_id=rid)
    events = items.feed(Reasoning(("Look it up.",), "enc-7")) + items.feed("Answer.")
    events += items.close("completed", ensure_item=True)
    for number, event in enumerate(events):
        validate_event({**event, "sequence_number": number})  # the client's own event types, strictly
    reasoning, message = items.items
    validate_output_item(reasoning)
    assert reasoning["id"].startswith("rs_" + "ab" * 24) and reasoning["encrypted_content"] == "enc-7"
    assert reasoning["summary"] == [{"type": "summary_text", "text": "Look it up."}]
    assert [(e["type"], e["output_index"]) for e in events[:2]] == [("response.output_item.added", 2),
                                                                    ("response.output_item.done", 2)]
    assert events[0]["item"] == events[1]["item"] == reasoning, "it opens and closes whole"
    assert message["type"] == "message" and events[2]["output_index"] == 3
    # sent back next turn, the item reaches a Responses model as it is
    assert responses_input([reasoning, message])[0] == {"type": "reasoning", "id": reasoning["id"],
                                                        "summary": reasoning["summary"], "encrypted_content": "enc-7"}
