"""Regression tests for what fuzzing ``docs/openapi.yaml`` against the app found, each as a plain request:
the spec and the server must agree (a body the spec allows is accepted, one it forbids is refused), and
what the server answers validates against the spec.

Found by schemathesis: SSE events described as a bare string (ST108), ``conversation`` with
``previous_response_id`` allowed by the schema but refused (ST202), state refusals answered 400 to
spec-valid requests in the stateful phase (ST202). Found by probing: ``background`` without ``store``,
role/part rules and extra part properties, unbounded ``Last-Event-ID``, Python-``int()`` parsing of
query and header integers, concurrent DELETEs all answering 200, ``code: null`` on a 4xx.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.contract.conftest import spec, valid, validator

pytestmark = pytest.mark.azurite

KNOBS = {"research_phases": "2", "words_per_phase": "4", "delta_delay_ms": "0"}
TERMINAL = {"completed", "failed", "cancelled", "incomplete"}


@pytest.fixture(scope="module")
def http(contract_base_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=contract_base_url, timeout=60.0) as session:
        yield session


def create(http: httpx.Client, **fields: Any) -> dict[str, Any]:
    answer = http.post("/responses", json={"model": "m", "input": "q", "metadata": KNOBS, **fields})
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    assert valid("Response", body), body
    return body


def finished(http: httpx.Client, rid: str) -> dict[str, Any]:
    """Wait until the run is over: its terminal event is in the log (the replay stream ends with it). The
    status turns terminal a moment before that event is written, and until then a DELETE is 409."""
    events = sse_events(http.get(f"/responses/{rid}", params={"stream": "true"}).text)
    assert json.loads(events[-1]["data"])["type"] in {"response.completed", "response.failed",
                                                      "response.incomplete"}, events[-1]
    body: dict[str, Any] = http.get(f"/responses/{rid}").json()
    assert body["status"] in TERMINAL, body
    return body


def refused(answer: httpx.Response, status: int, code: str, param: str | None) -> None:
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert valid("Error", body), body
    assert (body["error"]["code"], body["error"]["param"]) == (code, param), body
    assert answer.headers["x-should-retry"] == "false"


def sse_events(raw: str) -> list[dict[str, str]]:
    """The stream as an SSE client parses it: one ``{event, id, data}`` per blank-line-ended block."""
    events = []
    for block in raw.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.split("\n") if line and not line.startswith(":"))
        if fields:
            events.append(fields)
    return events


# --------------------------------------------------------------------------------------------- the stream
def test_every_sse_event_is_an_object_whose_data_is_a_stream_event(http: httpx.Client) -> None:
    """ST108: the spec described each event as a bare string. Now: ``{event, id, data}`` with ``data`` a
    ``StreamEvent`` (one schema per type), ``event`` its type and ``id`` its sequence number."""
    live = http.post("/responses", json={"model": "m", "input": "q", "metadata": KNOBS, "background": True,
                                         "stream": True})
    events = sse_events(live.text)
    rid = json.loads(events[0]["data"])["response"]["id"]
    finished(http, rid)
    replay = sse_events(http.get(f"/responses/{rid}", params={"stream": "true", "starting_after": "2"}).text)
    assert len(events) > 10 and replay == events[3:]
    tool = {"type": "function", "name": "lookup", "parameters": {"type": "object"}}
    events += sse_events(http.post("/responses", json={"model": "m", "input": "q", "metadata": KNOBS,
                                                       "tools": [tool], "stream": True}).text)
    for event in events:
        assert valid("ServerSentEvent", event), event
        data = json.loads(event["data"])
        problems = [e.message for e in validator("StreamEvent").iter_errors(data)]
        assert not problems, (data["type"], problems[:3])
        assert (event["event"], event["id"]) == (data["type"], str(data["sequence_number"]))
    types = {json.loads(e["data"])["type"] for e in events}
    assert types == set(spec()["components"]["schemas"]["StreamEvent"]["discriminator"]["mapping"]) - {
        "response.queued", "response.failed", "response.incomplete"}


def test_a_bare_string_is_not_an_event() -> None:
    assert not valid("ServerSentEvent", "event: response.created\nid: 0\ndata: {}")
    assert not valid("StreamEvent", {"type": "response.output_text.delta", "sequence_number": 0})
    assert not valid("StreamEvent", {"type": "response.unknown", "sequence_number": 0})


# ------------------------------------------------------------------------------------ request body rules
@pytest.mark.parametrize(("fields", "code", "param"), [
    ({"previous_response_id": "resp_x", "conversation": "conv_x"}, "mutually_exclusive_parameters",
     "previous_response_id"),
    ({"previous_response_id": "resp_x", "conversation": {"id": "conv_x"}}, "mutually_exclusive_parameters",
     "previous_response_id"),
    ({"background": True, "store": False}, "unsupported_parameter", "background"),
    ({"input": [{"role": "assistant", "content": [{"type": "input_text", "text": "a"}]}]}, "invalid_value",
     "input[0].content[0].type"),
    ({"input": [{"role": "user", "content": [{"type": "output_text", "text": "a"}]}]}, "invalid_value",
     "input[0].content[0].type"),
    ({"input": [{"role": "user", "content": [{"type": "input_text", "text": "a", "annotations": []}]}]},
     "unknown_parameter", "input[0].content[0].annotations"),
    ({"input": [{"role": "assistant", "content": [{"type": "output_text", "text": "a", "x": 1}]}]},
     "unknown_parameter", "input[0].content[0].x"),
    ({"input": [{"role": "assistant", "content": [{"type": "output_text", "text": "a", "annotations": 1}]}]},
     "invalid_type", "input[0].content[0].annotations"),
    ({"tool_choice": "required"}, "invalid_value", "tool_choice"),
    ({"input": [{"type": "mcp_approval_response", "approval_request_id": "i", "approve": False}]},
     "invalid_value", "input[0].approval_request_id"),  # ST202: an answer needs an earlier turn
    ({"presence_penalty": 2.5}, "invalid_value", "presence_penalty"),
    ({"top_logprobs": 21}, "invalid_value", "top_logprobs"),
    ({"truncation": "middle"}, "invalid_value", "truncation"),
    ({"reasoning": "high"}, "invalid_type", "reasoning"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "https://x.test/a.png",
                                              "detail": "huge"}]}]}, "invalid_value", "input[0].content[0].detail"),
    ({"input": [{"role": "user", "content": [{"type": "refusal", "refusal": "no"}]}]}, "invalid_value",
     "input[0].content[0].type"),
    ({"input": [{"type": "reasoning", "summary": []}]}, "missing_required_parameter", "input[0].id"),
    ({"input": [{"type": "item_reference", "id": "msg_1", "role": "user"}]}, "unknown_parameter", "input[0].role"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": {}}]}, "invalid_type",
     "input[0].arguments"),
    ({"previous_response_id": "resp_x", "input": [
        {"type": "mcp_approval_response", "approval_request_id": "a", "approve": True},
        {"type": "mcp_approval_response", "approval_request_id": "b", "approve": True}]},
     "invalid_value", "input[1].approval_request_id"),
    ({"tools": [{"type": "function", "name": "f", "parameters": {"type": "string"}}]}, "invalid_value",
     "tools[0].parameters.type"),
    # Found by schemathesis (the narrowed 400 check): the spec allowed what the openai types refuse.
    ({"background_options": {"x": 1}}, "unknown_parameter", "background_options.x"),
    ({"prompt_cache_options": {"x": 1}}, "unknown_parameter", "prompt_cache_options.x"),
    ({"text": {"x": 1}}, "unknown_parameter", "text.x"),
    ({"prompt": {"version": "1"}}, "missing_required_parameter", "prompt.id"),
    ({"context_management": [{"compact_threshold": 5}]}, "missing_required_parameter", "context_management[0].type"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}", "caller": {}},
                {"type": "function_call_output", "call_id": "c", "output": "r"}]},
     "missing_required_parameter", "input[0].caller.type"),
    ({"input": [{"role": "assistant", "content": [{"type": "output_text", "text": "a", "annotations": [
        {"type": "file_path", "index": 0}]}]}]},
     "missing_required_parameter", "input[0].content[0].annotations[0].file_id"),
    ({"input": [{"role": "assistant", "content": [{"type": "output_text", "text": "a", "logprobs": [
        {"token": "t", "bytes": {}, "logprob": 0.0, "top_logprobs": []}]}]}]},
     "invalid_type", "input[0].content[0].logprobs[0].bytes"),  # an object's keys are no array
    ({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c", "output": [
                    {"type": "input_image", "image_url": None, "file_id": None}]}]},
     "missing_required_parameter", "input[1].output[0].image_url"),
    ({"input": [{"role": "user", "content": [{"type": "input_file", "file_url": "http://a\x1c"}]}]},
     "invalid_value", "input[0].content[0].file_url"),  # Python's \s: \x1c is white space
])
def test_bodies_the_spec_forbids_are_refused(http: httpx.Client, fields: dict[str, Any], code: str,
                                             param: str) -> None:
    body = {"model": "m", "input": "q", **fields}
    assert not valid("CreateResponseRequest", body)
    refused(http.post("/responses", json=body), 400, code, param)


@pytest.mark.parametrize("fields", [
    {"previous_response_id": None, "conversation": "{conversation}"},
    {"background": False, "store": False},
    {"background": True, "store": None},
    # Found by schemathesis (ST202): a spec-valid tool whose parameters broke the JSON Schema meta-schema
    # ("else" an array) was a 400. The spec states only the type; the model gets the schema as it is.
    {"tools": [{"type": "function", "name": "f", "parameters": {"type": "object", "else": [1, "x"]}}],
     "tool_choice": "none"},
    {"input": [{"role": "assistant", "content": [{"type": "output_text", "text": "a", "annotations": [],
                                                  "logprobs": []}]},
               {"role": "developer", "content": [{"type": "input_text", "text": "b", "prompt_cache_breakpoint": {
                   "mode": "explicit", "ttl": "30m"}}]}]},
    # A stateless tool loop (the Agents SDK and the AI SDK resend the whole history), with store: false too.
    {"input": [{"role": "user", "content": "q"},
               {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f", "arguments": "{}"},
               {"type": "function_call_output", "call_id": "call_1", "output": [
                   {"type": "input_text", "text": "r"}, {"type": "input_image", "image_url": "https://x.test/i.png"}]}],
     "store": False},
    {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "data:image/png;base64,iVBO"},
                                            {"type": "input_file", "file_data": "aGk=", "filename": "a.txt"}]},
               {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "e"},
               {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]}]},
    {"text": {}, "reasoning": {}},  # found by schemathesis: an empty text config is echoed with its format
    {"temperature": 0, "top_p": 1, "presence_penalty": -2, "frequency_penalty": 2, "top_logprobs": 0,
     "max_output_tokens": 16, "max_tool_calls": 0, "parallel_tool_calls": True, "truncation": "disabled",
     "service_tier": "auto", "user": "u", "safety_identifier": "s", "prompt_cache_key": "k",
     "include": ["reasoning.encrypted_content"], "reasoning": {"effort": "low"}, "text": {"format": {"type": "text"}},
     "prompt_cache_retention": "24h"},
    {"background_options": {"completion_window": "soonest"}, "prompt_cache_options": {"mode": "implicit", "ttl": "30m"},
     "prompt": {"id": "p", "variables": {"a": "x", "b": {"type": "input_image", "detail": "auto"}}},
     "context_management": [{"type": "compaction"}],
     "moderation": {"model": "m", "policy": {"input": {"mode": "score"}}},
     "text": {"format": {"type": "json_schema", "name": "n", "schema": {}}, "verbosity": None}},
    {"input": [{"role": "assistant", "content": [{"type": "output_text", "text": "a", "annotations": [
        {"type": "url_citation", "url": "u", "title": "t", "start_index": 0, "end_index": 1}]}]}]},
])
def test_bodies_the_spec_allows_are_accepted(http: httpx.Client, fields: dict[str, Any]) -> None:
    if fields.get("conversation") == "{conversation}":  # a turn's conversation must exist
        fields = {**fields, "conversation": http.post("/conversations", json={}).json()["id"]}
    body = {"model": "m", "input": "q", "metadata": KNOBS, **fields}
    assert valid("CreateResponseRequest", body)
    answer = http.post("/responses", json=body)
    assert answer.status_code == 200
    assert valid("Response", answer.json()), answer.json()


def test_the_shortest_conversation_id_the_spec_allows_is_parsed_then_looked_up(http: httpx.Client) -> None:
    """``conv_`` is the shortest id both the spec and the parser take; no conversation has it: 404."""
    body = {"model": "m", "input": "q", "conversation": "conv_"}
    assert valid("CreateResponseRequest", body)
    refused(http.post("/responses", json=body), 404, "not_found", "conversation")


# ------------------------------------------------------------------- rules the schema cannot state: 400
def test_rules_the_schema_cannot_state_are_400_as_openai_answers(http: httpx.Client) -> None:
    """The schema cannot say "one of the request's tools", "a call_id this chain issued" or "names
    unique": a spec-valid body that breaks such a rule is a 400 ``invalid_request_error`` naming the field
    and the rule (the OpenAI API's status for these; tests/contract/schemathesis.toml allows it)."""
    tool = {"type": "function", "name": "lookup", "parameters": {"type": "object"}}
    body = {"model": "m", "input": "q", "tools": [tool], "tool_choice": {"type": "function", "name": "other"}}
    assert valid("CreateResponseRequest", body)
    refused(http.post("/responses", json=body), 400, "invalid_value", "tool_choice.name")
    called = create(http, tools=[tool])
    assert [item["type"] for item in called["output"]] == ["function_call"]
    answer = {"model": "m", "previous_response_id": called["id"], "input": [
        {"type": "function_call_output", "call_id": "call_never_issued", "output": "x"}]}
    assert valid("CreateResponseRequest", answer)
    refused(http.post("/responses", json=answer), 400, "tool_call_not_found", "input")
    empty = http.post("/conversations", json={}).json()["id"]
    conversation = {"model": "m", "conversation": empty, "input": [
        {"type": "mcp_approval_response", "approval_request_id": "mcpr_x", "approve": True}]}
    refused(http.post("/responses", json=conversation), 400, "approval_request_not_found",
            "input[0].approval_request_id")
    # Two tools named alike (found by schemathesis's stateful phase with 14 tools).
    twice = {"model": "m", "input": "q", "tools": [tool, {**tool, "description": "again"}]}
    assert valid("CreateResponseRequest", twice)
    refused(http.post("/responses", json=twice), 400, "duplicate_tool_name", "tools[1].name")
    # ContinueChain after a turn that ended with a call: the chain's state asks for the tool output.
    follow = {"model": "m", "previous_response_id": called["id"], "input": "and now?"}
    assert valid("CreateResponseRequest", follow)
    refused(http.post("/responses", json=follow), 400, "tool_output_required", "input")
    # A call in the input without its output; a reference to nothing; an image data URL that is no image.
    unanswered = {"model": "m", "input": [
        {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"}]}
    assert valid("CreateResponseRequest", unanswered)
    refused(http.post("/responses", json=unanswered), 400, "tool_output_required", "input")
    plain = create(http)
    nowhere = {"model": "m", "previous_response_id": plain["id"], "input": [{"type": "item_reference", "id": "x"}]}
    assert valid("CreateResponseRequest", nowhere)
    refused(http.post("/responses", json=nowhere), 400, "item_not_found", "input[0].id")
    not_an_image = {"model": "m", "input": [{"role": "user", "content": [
        {"type": "input_image", "image_url": "data:application/pdf;base64,JVBE"}]}]}
    assert not valid("CreateResponseRequest", not_an_image)  # the image_url pattern now states it too
    refused(http.post("/responses", json=not_an_image), 400, "invalid_value", "input[0].content[0].image_url")


def test_every_input_item_kind_is_listed_as_the_spec_says(http: httpx.Client) -> None:
    called = create(http, tools=[{"type": "function", "name": "f", "parameters": {"type": "object"}}])
    call = called["output"][0]
    items = [{"role": "user", "content": [{"type": "input_image", "image_url": "https://x.test/i.png"},
                                          {"type": "input_file", "file_url": "https://x.test/f.pdf"}]},
             {"type": "item_reference", "id": call["id"]},
             {"type": "function_call_output", "call_id": call["call_id"], "output": "r"},
             {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "s"}]},
             {"role": "assistant", "content": [{"type": "output_text", "text": "t", "annotations": [
                 {"type": "file_path", "file_id": "f", "index": 0}]}]},
             {"type": "mcp_call", "id": "mcp_1", "server_label": "s", "name": "n", "arguments": "{}"}]
    turn = create(http, previous_response_id=called["id"], input=items, presence_penalty=1, temperature=0.5)
    assert (turn["presence_penalty"], turn["temperature"], turn["frequency_penalty"]) == (1, 0.5, 0.0)
    listing = http.get(f"/responses/{turn['id']}/input_items", params={"order": "asc"}).json()
    assert valid("InputItemList", listing), listing
    assert [i["type"] for i in listing["data"]] == ["message", "function_call", "function_call_output",
                                                   "reasoning", "message", "mcp_call"]
    assert listing["data"][1] == call, "a reference is listed as the item it names"
    answer = turn["output"][0]  # an assistant message, referenced by a turn without a chain
    stateless = create(http, input=[{"type": "item_reference", "id": answer["id"]}, {"role": "user", "content": "q"}])
    listing = http.get(f"/responses/{stateless['id']}/input_items", params={"order": "asc"}).json()
    assert valid("InputItemList", listing), listing
    assert listing["data"][0] == answer


@pytest.mark.parametrize("path", ["/responses/compact", "/responses/input_tokens"])
def test_unserved_openai_endpoints_answer_501_in_the_error_shape(http: httpx.Client, path: str) -> None:
    answer = http.post(path, json={"model": "m", "input": "q"})
    assert answer.status_code == 501 and valid("Error", answer.json())
    assert answer.json()["error"]["code"] == "not_implemented"


def test_what_a_response_refuses_is_400_and_what_its_state_refuses_now_is_409(http: httpx.Client) -> None:
    """A non-background response can never be cancelled or streamed again: 400, as the OpenAI API answers.
    Delete of a running response and cancel of a finished one depend on the moment: 409 with a code."""
    foreground = create(http)
    refused(http.post(f"/responses/{foreground['id']}/cancel"), 400, "background_required", "response_id")
    refused(http.get(f"/responses/{foreground['id']}", params={"stream": "true"}), 400, "background_required",
            "stream")
    refused(http.post("/responses", json={"model": "m", "input": "q", "previous_response_id": "resp_nothing"}),
            400, "previous_response_not_found", "previous_response_id")
    running = create(http, background=True, metadata={**KNOBS, "words_per_phase": "400", "delta_delay_ms": "20"})
    refused(http.delete(f"/responses/{running['id']}"), 409, "response_in_progress", "response_id")
    assert http.post(f"/responses/{running['id']}/cancel").json()["status"] == "cancelled"
    done = create(http, background=True)
    finished(http, done["id"])
    refused(http.post(f"/responses/{done['id']}/cancel"), 409, "response_already_finished", "response_id")


def test_concurrent_deletes_answer_200_once_then_404(http: httpx.Client, contract_base_url: str) -> None:
    rid = create(http, background=True)["id"]
    finished(http, rid)
    with ThreadPoolExecutor(10) as pool:
        answers = list(pool.map(lambda _: httpx.delete(f"{contract_base_url}/responses/{rid}", timeout=30),
                                range(10)))
    statuses = sorted(a.status_code for a in answers)
    assert statuses == [200] + [404] * 9, [(a.status_code, a.text[:120]) for a in answers]
    assert [a.json() for a in answers if a.status_code == 200] == [
        {"id": rid, "object": "response.deleted", "deleted": True}]
    for answer in answers:
        if answer.status_code == 404:
            assert answer.json()["error"]["code"] == "not_found"
    refused(http.delete(f"/responses/{rid}"), 404, "not_found", None)


# ---------------------------------------------------------------------------- integers in query/headers
@pytest.mark.parametrize("raw", ["1_0", "+5", " 5", "5 ", "５", "٥", "1e1", "0x1", "", "-0.0"])
def test_query_and_header_integers_are_ascii_digits(http: httpx.Client, raw: str) -> None:
    done = create(http, background=True)
    rid = done["id"]
    finished(http, rid)
    refused(http.get(f"/responses/{rid}", params={"stream": "true", "starting_after": raw}), 400, "invalid_type",
            "starting_after")
    refused(http.get(f"/responses/{rid}/input_items", params={"limit": raw}), 400, "invalid_type", "limit")
    if raw and raw == raw.strip():  # HTTP trims header values: " 5" arrives as a valid "5"
        answer = http.get(f"/responses/{rid}", params={"stream": "true"}, headers={"Last-Event-ID": raw.encode()})
        refused(answer, 400, "invalid_type", "Last-Event-ID")


def test_last_event_id_is_bounded_like_starting_after(http: httpx.Client) -> None:
    parameters = spec()["components"]["parameters"]
    bounds = [(p["schema"]["minimum"], p["schema"]["maximum"]) for p in
              (parameters["LastEventId"], parameters["StartingAfter"])]
    assert bounds[0] == bounds[1] == (-1, 2**53)
    done = create(http, background=True)
    finished(http, done["id"])
    too_big = str(2**53 + 1)
    answer = http.get(f"/responses/{done['id']}", params={"stream": "true"}, headers={"Last-Event-ID": too_big})
    refused(answer, 400, "invalid_value", "Last-Event-ID")
    answer = http.get(f"/responses/{done['id']}", params={"stream": "true"}, headers={"Last-Event-ID": str(2**53)})
    assert answer.status_code == 200 and sse_events(answer.text) == []  # past the end: empty, closed


# ------------------------------------------------------------------------------------------------ links
def test_create_links_to_every_id_operation_and_to_the_next_turn() -> None:
    """Without links a stateful fuzzer cannot follow an id from create to the operations that take it."""
    document = spec()
    links = document["paths"]["/responses"]["post"]["responses"]["200"]["links"]
    targets = {document["components"]["links"][link["$ref"].rsplit("/", 1)[1]]["operationId"]
               for link in links.values()}
    id_operations = {op["operationId"] for path, item in document["paths"].items() if "{response_id}" in path
                     for key, op in item.items() if key != "parameters"}
    assert id_operations <= targets and "createResponse" in targets
    continue_chain = document["components"]["links"]["ContinueChain"]
    assert continue_chain["requestBody"] == {"previous_response_id": "$response.body#/id"}


def test_conversation_answers_validate_against_the_spec(http: httpx.Client) -> None:
    """A conversation with an added item and a turn: every answer is the schema the spec names."""
    created = http.post("/conversations", json={"items": [{"role": "user", "content": "hi"}],
                                                "metadata": {"k": "v"}}).json()
    assert valid("Conversation", created), created
    turn = http.post("/responses", json={"model": "m", "input": "q", "conversation": created["id"],
                                         "metadata": KNOBS})
    assert turn.status_code == 200, turn.text
    listed = http.get(f"/v1/conversations/{created['id']}/items", params={"order": "asc"}).json()
    assert valid("ConversationItemList", listed) and len(listed["data"]) >= 3, listed
    one = http.get(f"/conversations/{created['id']}/items/{listed['data'][0]['id']}").json()
    assert valid("ConversationItem", one) and one == listed["data"][0]
    assert valid("Conversation", http.delete(f"/conversations/{created['id']}/items/{one['id']}").json())
    assert valid("DeletedConversation", http.delete(f"/conversations/{created['id']}").json())
    refused(http.get(f"/conversations/{created['id']}"), 404, "not_found", None)


def test_two_conversation_items_with_one_id_are_400_not_500(http: httpx.Client) -> None:
    """Found by schemathesis: storage refused the repeated id (a 500); it is a rule between items, as in
    ``POST /responses``."""
    items = [{"type": "message", "role": "user", "content": "a", "id": "same"},
             {"type": "message", "role": "user", "content": "b", "id": "same"}]
    assert valid("CreateConversationRequest", {"items": items})
    refused(http.post("/conversations", json={"items": items}), 400, "invalid_value", "items[1].id")
    conversation = http.post("/conversations", json={}).json()["id"]
    refused(http.post(f"/conversations/{conversation}/items", json={"items": items}), 400, "invalid_value",
            "items[1].id")
