"""End to end through the official ``openai`` client (strict validation) over an in-memory transport:
our bytes in, the client's typed objects out."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Any

import httpx2
import openai
from openai.types.responses import ResponseInputMessageItem, ResponseOutputMessage

from resilient.protocol import events as ev
from resilient.protocol.items import output_message
from resilient.protocol.request import normalize_input_items, parse_create_request
from resilient.protocol.response import build_response, usage_for
from resilient.protocol.sse import KEEPALIVE, encode_frame


def client_for(respond: Callable[[httpx2.Request], httpx2.Response]) -> openai.OpenAI:
    return openai.OpenAI(
        api_key="unused",
        base_url="http://test",
        http_client=httpx2.Client(transport=httpx2.MockTransport(respond)),
        max_retries=0,
        _strict_response_validation=True,
    )


def snapshot(status: str, output: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "response_id": "resp_e2e",
        "created_at": 1000,
        "model": "research-agent",
        "status": status,
        "output": output,
        "background": True,
        "store": True,
        "instructions": None,
        "metadata": {"run": "1"},
        "previous_response_id": None,
        "conversation_id": "conv_c",
        "error": None,
        "incomplete_details": None,
        "usage": None,
        "completed_at": None,
    }
    fields.update(extra)
    return build_response(**fields)


PHASES = [("msg_p0", ["Plan", ": go"]), ("msg_p1", ["Ré", "sumé ✓"])]
FINAL = [output_message(item_id, "".join(chunks)) for item_id, chunks in PHASES]


def run_events() -> list[dict[str, Any]]:
    events = [
        ev.response_created(snapshot("queued", [])),
        ev.response_in_progress(snapshot("in_progress", [])),
    ]
    for index, (item_id, chunks) in enumerate(PHASES):
        events += ev.phase_opening_events(index, item_id)
        events += [ev.output_text_delta(item_id, index, 0, chunk) for chunk in chunks]
        events += ev.phase_closing_events(index, item_id, "".join(chunks), "completed")
    events.append(
        ev.response_completed(snapshot("completed", FINAL, usage=usage_for(4, 6), completed_at=1009))
    )
    for seq, event in enumerate(events):
        event["sequence_number"] = seq
    return events


def sse_server(
    events: list[dict[str, Any]], seen: list[httpx2.Request]
) -> Callable[[httpx2.Request], httpx2.Response]:
    def respond(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        after = int(request.url.params.get("starting_after", "-1"))
        body = b"".join(encode_frame(e) + KEEPALIVE for e in events if e["sequence_number"] > after)
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    return respond


def test_create_stream_yields_every_event_as_its_type() -> None:
    events = run_events()
    seen: list[httpx2.Request] = []
    stream = client_for(sse_server(events, seen)).responses.create(model="m", input="hi", stream=True)
    received = list(stream)
    assert [e.type for e in received] == [e["type"] for e in events]
    assert [e.sequence_number for e in received] == list(range(len(events)))
    assert "".join(e.delta for e in received if e.type == "response.output_text.delta") == "Plan: goRésumé ✓"
    assert received[-1].type == "response.completed"
    assert received[-1].response.output_text == "Plan: goRésumé ✓"


def test_stream_helper_accumulates_the_final_response() -> None:
    seen: list[httpx2.Request] = []
    with client_for(sse_server(run_events(), seen)).responses.stream(model="m", input="hi") as stream:
        snapshots = [e.snapshot for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert snapshots == ["Plan", "Plan: go", "Ré", "Résumé ✓"]
    assert final.output_text == "Plan: goRésumé ✓"
    assert final.usage is not None and final.usage.total_tokens == 10


def test_retrieve_stream_resumes_after_starting_after() -> None:
    events = run_events()
    seen: list[httpx2.Request] = []
    stream = client_for(sse_server(events, seen)).responses.retrieve(
        "resp_e2e", stream=True, starting_after=5
    )
    assert [e.sequence_number for e in stream] == list(range(6, len(events)))
    assert seen[0].url.params["stream"] == "true"


def test_retrieve_json_and_input_items_listing() -> None:
    req = parse_create_request(
        json.dumps(
            {"input": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}
        ).encode()
    )
    numbers = itertools.count()
    items = normalize_input_items(req, lambda: f"msg_{next(numbers)}")

    def respond(request: httpx2.Request) -> httpx2.Response:
        if request.url.path.endswith("/input_items"):
            page = {
                "object": "list",
                "data": items,
                "first_id": "msg_0",
                "last_id": "msg_1",
                "has_more": False,
            }
            return httpx2.Response(200, json=page)
        return httpx2.Response(
            200, json=snapshot("completed", FINAL, usage=usage_for(1, 2), completed_at=1001)
        )

    client = client_for(respond)
    resp = client.responses.retrieve("resp_e2e")
    assert resp.status == "completed" and resp.output_text == "Plan: goRésumé ✓"
    assert resp.conversation is not None and resp.conversation.id == "conv_c"
    listed = list(client.responses.input_items.list("resp_e2e"))
    assert [type(item) for item in listed] == [ResponseInputMessageItem, ResponseOutputMessage]
    assert [item.id for item in listed] == ["msg_0", "msg_1"]


def test_bodies_the_client_writes_for_create_validate() -> None:
    """What ``client.responses.create(...)`` sends: messages with and without ``type``, answer items,
    function tools with ``strict``, and each ``tool_choice`` form, all parse, and parse as sent."""
    sent: list[bytes] = []

    def respond(request: httpx2.Request) -> httpx2.Response:
        sent.append(request.content)
        return httpx2.Response(200, json=snapshot("completed", FINAL, usage=usage_for(1, 2), completed_at=1001))

    client = client_for(respond)
    tool: Any = {"type": "function", "name": "lookup", "description": "d", "strict": True,
                 "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"],
                                "additionalProperties": False}}
    client.responses.create(
        model="m", instructions="be brief", metadata={"k": "v"}, store=True, background=True, temperature=0.2,
        input=[
            {"role": "user", "content": "hi"},
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "d"}]},
            {"role": "assistant", "content": [{"type": "output_text", "text": "a", "annotations": []}]},
        ],
        tools=[tool, {**tool, "name": "loose", "strict": False}], tool_choice="required",
    )
    client.responses.create(
        model="m", previous_response_id="resp_1", tools=[tool], tool_choice={"type": "function", "name": "lookup"},
        input=[
            {"type": "function_call_output", "call_id": "call_1", "output": "out"},
            {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "o"}]},
            {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": True},
        ],
    )
    for mode in ("auto", "none"):
        client.responses.create(model="m", input="x", tools=[tool], tool_choice=mode)

    requests = [parse_create_request(raw) for raw in sent]
    assert [r.tool_choice for r in requests] == ["required", {"type": "function", "name": "lookup"}, "auto", "none"]
    assert [t.to_json() for t in requests[0].tools] == [tool, {**tool, "name": "loose", "strict": False}]
    numbers = itertools.count()
    first = normalize_input_items(requests[0], lambda: f"msg_{next(numbers)}")
    assert [(i["role"], i["content"][0]["type"]) for i in first] == [
        ("user", "input_text"), ("developer", "input_text"), ("assistant", "output_text")]
    answers = normalize_input_items(requests[1], lambda: f"msg_{next(numbers)}")
    assert [i["type"] for i in answers] == ["function_call_output", "function_call_output", "mcp_approval_response"]
    assert answers[1]["output"] == [{"type": "input_text", "text": "o"}]
