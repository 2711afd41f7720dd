"""The checks of the Open Responses compliance CLI (``bin/compliance-test.ts`` of openresponses/openresponses,
run for real as ``scripts/compliance.sh`` describes), repeated in CI, where that repository cannot be cloned.

Each test sends what the CLI's test of the same id sends, raw over HTTP with its headers (its default
model ``gpt-4o-mini``: the service runs its configured agent whatever the model), and applies its checks:
status 200, the answer (or the ``response.completed`` of the stream) is a ``ResponseResource`` as the CLI's
schemas require (``open_responses_shapes``), every streamed event is one of its 24 event schemas, and its
validators (output present, ``completed``, a ``function_call`` where a tool is offered). The optional
``file-search`` and ``offline-web-search`` tests are skipped by the CLI without a vector store or its flag,
as here.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import pytest

from tests.clients.open_responses_shapes import event_problems, response_problems

pytestmark = pytest.mark.azurite

MODEL = "gpt-4o-mini"
HEADERS = {"Content-Type": "application/json", "Authorization": "Bearer local"}
WEATHER = {"type": "function", "name": "get_weather", "description": "Get the current weather for a location",
           "parameters": {"type": "object", "properties": {"location": {"type": "string"}},
                          "required": ["location"]}}
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
PDF = base64.b64encode(b"%PDF-1.1\n1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj\ntrailer << /Root 1 0 R >>\n"
                       b"%%EOF\n").decode()
SINGLE_REQUEST = {  # the CLI's tests of one non-streamed request, by id
    "basic-response": [{"type": "message", "role": "user", "content": "Say hello in exactly 3 words."}],
    "system-prompt": [{"type": "message", "role": "system", "content": "You are a pirate."},
                      {"type": "message", "role": "user", "content": "Say hello."}],
    "image-input": [{"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "What do you see in this image?"},
        {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}"}]}],
    "file-input": [{"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "Read the attached file and answer with its title only."},
        {"type": "input_file", "filename": "fixture.pdf", "file_data": f"data:application/pdf;base64,{PDF}"}]}],
    "multi-turn": [{"type": "message", "role": "user", "content": "My name is Alice."},
                   {"type": "message", "role": "assistant", "content": "Hello Alice! How can I help you?"},
                   {"type": "message", "role": "user", "content": "What is my name?"}],
}


def create(api_base: str, body: dict[str, Any]) -> dict[str, Any]:
    """One request as the CLI's makeRequest sends it (``stream: false``), checked as its parseResponse does."""
    answer = httpx.post(f"{api_base}/responses", headers=HEADERS, json={"model": MODEL, **body, "stream": False},
                        timeout=120)
    assert answer.status_code == 200, answer.text
    response: dict[str, Any] = answer.json()
    assert response_problems(response) == []
    return response


def completed_with_output(response: dict[str, Any]) -> None:
    assert response["output"], "Response has no output items"
    assert response["status"] == "completed"


@pytest.mark.parametrize("test_id", sorted(SINGLE_REQUEST))
def test_single_request(api_base: str, test_id: str) -> None:
    completed_with_output(create(api_base, {"input": SINGLE_REQUEST[test_id]}))


def test_tool_calling(api_base: str) -> None:
    response = create(api_base, {"input": [{"type": "message", "role": "user",
                                            "content": "What's the weather like in San Francisco?"}],
                                 "tools": [WEATHER]})
    assert any(item["type"] == "function_call" for item in response["output"])


def test_function_call_roundtrip(api_base: str) -> None:
    first = create(api_base, {"input": "Use the weather tool to get the temperature in San Francisco.",
                              "tools": [WEATHER], "tool_choice": {"type": "function", "name": "get_weather"}})
    call = next(item for item in first["output"] if item["type"] == "function_call")
    second = create(api_base, {"previous_response_id": first["id"], "input": [
        {"type": "function_call_output", "call_id": call["call_id"], "output": "64 degrees and clear"}]})
    completed_with_output(second)


def test_previous_response_id(api_base: str) -> None:
    first = create(api_base, {"input": "Remember this code word: papaya. Reply with only OK."})
    completed_with_output(create(api_base, {"previous_response_id": first["id"],
                                            "input": "What code word did I ask you to remember?"}))


def test_streaming_response(api_base: str) -> None:
    body = {"model": MODEL, "input": [{"type": "message", "role": "user", "content": "Count from 1 to 5."}],
            "stream": True}
    events: list[dict[str, Any]] = []
    with httpx.stream("POST", f"{api_base}/responses", headers=HEADERS, json=body, timeout=120) as answer:
        assert answer.status_code == 200
        for line in answer.iter_lines():
            if line.startswith("data:") and line[5:].strip() != "[DONE]":
                events.append(json.loads(line[5:]))
    assert events, "No streaming events received"
    assert [problem for event in events for problem in event_problems(event)] == []
    final = [e["response"] for e in events if e["type"] in ("response.completed", "response.failed")]
    assert len(final) == 1 and final[0]["status"] == "completed"


def test_the_tables_refuse_what_the_cli_refuses() -> None:
    """The checks above can fail: a field the CLI requires, a tool without ``strict``, an event it lacks."""
    response = {name: None for name in ("completed_at", "incomplete_details", "previous_response_id", "instructions",
                                        "error", "reasoning", "usage", "max_output_tokens", "max_tool_calls",
                                        "safety_identifier", "prompt_cache_key")}
    response.update(id="resp_1", created_at=1, status="completed", model="m", output=[], tools=[],
                    tool_choice="auto", truncation="disabled", parallel_tool_calls=True,
                    text={"format": {"type": "text"}}, top_p=1.0, presence_penalty=0, frequency_penalty=0.0,
                    top_logprobs=0, temperature=1.0, store=True, background=False, service_tier="default")
    assert response_problems(response) == []
    assert response_problems({k: v for k, v in response.items() if k != "presence_penalty"}) == [
        "response.presence_penalty: required"]
    loose_tool = {**response, "tools": [{"type": "function", "name": "f", "description": None, "parameters": {}}]}
    assert response_problems(loose_tool) == ["response.tools.0.strict: required"]
    assert event_problems({"type": "response.mcp_call.in_progress", "sequence_number": 1}) != []
    assert event_problems({"type": "response.output_text.delta", "sequence_number": 2, "item_id": "msg_1",
                           "output_index": 0, "content_index": 0, "delta": "x"}) == [
        "response.output_text.delta.logprobs: required"]
