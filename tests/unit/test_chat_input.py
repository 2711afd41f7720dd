"""How items and model parameters reach a Chat Completions model (the sample agent's model path): the
conversion on its own, then what the fake model server (a real HTTP server) received from a phase."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from resilient.agents.base import AgentRequest, PhaseContext
from resilient.agents.chat_input import chat_messages
from resilient.agents.chat_params import chat_params
from resilient.agents.research import BASE_PLAN, ResearchAgent
from resilient.settings import Settings
from tests import itemshapes as shapes
from tests.fakemodel.server import FakeModel


def test_a_users_images_and_files_become_content_parts() -> None:
    turn = [shapes.user(shapes.text("Look:"), shapes.IMAGE_URL, shapes.IMAGE_DATA, shapes.IMAGE_FILE_ID,
                        shapes.FILE_DATA, shapes.FILE_URL, shapes.FILE_ID)]
    messages = chat_messages("sys", [], turn, [])
    assert messages[1] == {"role": "user", "content": [
        {"type": "text", "text": "Look:"},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png", "detail": "high"}},
        {"type": "image_url", "image_url": {"url": shapes.PNG_DATA_URL, "detail": "auto"}},
        {"type": "file", "file": {"file_id": "file-img1"}},
        {"type": "file", "file": {"file_data": shapes.PDF_DATA_URL, "filename": "notes.pdf"}},
        {"type": "text", "text": "[file: https://example.com/report.pdf]"},
        {"type": "file", "file": {"file_id": "file-doc1", "filename": "doc.txt"}},
    ]}


def test_text_only_messages_keep_the_plain_form_and_refusals_their_field() -> None:
    history = [shapes.user(shapes.text("q")), shapes.assistant("", refusal="I cannot help with that."),
               {"type": "message", "role": "developer", "content": [shapes.text("be brief"), shapes.IMAGE_URL]}]
    assert chat_messages("sys", history, [], [])[1:] == [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": None, "refusal": "I cannot help with that."},
        {"role": "system", "content": "be brief"},  # a system message takes text only: its image follows it
        {"role": "user", "content": [
            {"type": "text", "text": "(attachments of the developer message above)"},
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.png", "detail": "high"}}]},
    ]


def test_a_stateless_tool_loop_becomes_tool_history_and_reasoning_is_not_sent() -> None:
    turn = [shapes.user(shapes.text("weather?")), shapes.reasoning(), shapes.assistant("Let me check."),
            shapes.call("call_1", "get_weather", '{"city": "Oslo"}'),
            shapes.call_output("call_1", [shapes.text("rain"), shapes.IMAGE_URL])]
    history = [shapes.call("call_0", "never_answered")]  # the client went on without running it
    messages = chat_messages("sys", history, turn, [])
    assert messages[1:] == [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": "Let me check.", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "rain"},
        {"role": "user", "content": [  # a tool message takes text only: the output's image follows it
            {"type": "text", "text": "(attachments of the tool output above)"},
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.png", "detail": "high"}}]},
    ]
    assert "reasoning" not in repr(messages) and "gAAAA" not in repr(messages)


def test_the_requests_parameters_in_chat_completions_names() -> None:
    params = {"temperature": 0.3, "top_p": 0.9, "presence_penalty": 0.1, "frequency_penalty": 0.2,
              "max_output_tokens": 256, "top_logprobs": 2, "parallel_tool_calls": False,
              "reasoning": {"effort": "low", "summary": "auto"}, "service_tier": "flex", "user": "u",
              "safety_identifier": "s", "prompt_cache_key": "k", "truncation": "auto", "max_tool_calls": 3,
              "include": ["reasoning.encrypted_content"],
              "text": {"format": {"type": "json_schema", "name": "answer", "schema": {"type": "object"},
                                  "strict": True}, "verbosity": "low"}}
    assert chat_params(params, has_tools=True) == {
        "temperature": 0.3, "top_p": 0.9, "presence_penalty": 0.1, "frequency_penalty": 0.2, "service_tier": "flex",
        "user": "u", "safety_identifier": "s", "prompt_cache_key": "k", "max_completion_tokens": 256,
        "logprobs": True, "top_logprobs": 2, "parallel_tool_calls": False, "reasoning_effort": "low",
        "response_format": {"type": "json_schema", "json_schema": {"name": "answer", "schema": {"type": "object"},
                                                                   "strict": True}},
        "verbosity": "low"}
    assert "parallel_tool_calls" not in chat_params(params, has_tools=False)
    assert chat_params({"text": {"format": {"type": "json_object"}}}, has_tools=False) == {
        "response_format": {"type": "json_object"}}


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeModel]:
    with FakeModel() as server:
        yield server


async def test_the_model_receives_the_images_files_tool_history_and_parameters(fake: FakeModel) -> None:
    settings = Settings.from_env({"AZURE_OPENAI_ENDPOINT": fake.base + "/v1", "AZURE_OPENAI_DEPLOYMENT": "dep",
                                  "AZURE_OPENAI_API_KEY": "k", "RESILIENT_MODEL_MAX_RETRIES": "0"})
    turn = [shapes.user(shapes.text("What is this?"), shapes.IMAGE_DATA, shapes.FILE_DATA),
            shapes.call("call_1", "lookup"), shapes.call_output("call_1", "found it")]
    tools = [{"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}}]
    request = AgentRequest(response_id="resp_1", model="m", instructions=None, input_items=turn, history=[],
                           metadata={}, tools=tools,
                           params={"temperature": 0.25, "max_output_tokens": 99, "reasoning": {"effort": "high"},
                                   "parallel_tool_calls": False, "user": "someone"})
    agent = ResearchAgent(settings)
    context = PhaseContext(request=request, plan=list(BASE_PLAN), phase_index=0, is_recovery=False, output_so_far=[])
    try:
        text = "".join([o async for o in agent.run_phase(context) if isinstance(o, str)])
    finally:
        await agent._model().close()
    assert text == "Model says hello."
    body: dict[str, Any] = fake.chat_requests()[-1].body
    assert (body["temperature"], body["max_completion_tokens"], body["reasoning_effort"],
            body["parallel_tool_calls"], body["user"]) == (0.25, 99, "high", False, "someone")
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["system", "user", "assistant", "tool"]
    assert [p["type"] for p in body["messages"][1]["content"]] == ["text", "image_url", "file"]
    assert body["messages"][1]["content"][2]["file"] == {"file_data": shapes.PDF_DATA_URL, "filename": "notes.pdf"}
    assert body["messages"][2]["tool_calls"][0]["function"]["name"] == "lookup"
    assert body["messages"][3] == {"role": "tool", "tool_call_id": "call_1", "content": "found it"}
