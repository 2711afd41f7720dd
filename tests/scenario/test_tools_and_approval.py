"""Function tools and human approval across turns, with the offline sample agent, under the host double,
driven by the official ``openai`` client (strict validation, no retries)."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import httpx
import pytest
from openai import BadRequestError, OpenAI

from tests.hostdouble.api import HostDouble
from tests.scenario.conftest import knobs, rebuild
from tests.scenario.test_model_path import plain

pytestmark = pytest.mark.azurite

LOOKUP = {"type": "function", "name": "lookup", "description": "Look a question up.",
          "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}
NOTES = {"type": "function", "name": "notes", "parameters": {"type": "object", "properties": {}}}
QUESTION = "Why do checkpoints matter?"


def _texts(response: Any) -> list[str]:
    return [o.content[0].text for o in response.output if o.type == "message"]


def test_function_tool_loop(client: OpenAI) -> None:
    first = client.responses.create(model="m", input=QUESTION, tools=[LOOKUP, NOTES],  # type: ignore[list-item]
                                    metadata=knobs(phases=2, words=6))
    assert first.status == "completed"
    assert [o.type for o in first.output] == ["function_call"]
    call = first.output[0]
    assert call.name == "lookup" and json.loads(call.arguments) == {"query": QUESTION}
    assert call.call_id.startswith("call_") and call.status == "completed"
    assert [t.name for t in first.tools] == ["lookup", "notes"]  # type: ignore[union-attr]

    second = client.responses.create(
        model="m", previous_response_id=first.id, tools=[LOOKUP, NOTES],  # type: ignore[list-item]
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "Checkpoints bound lost work."}],
        metadata=knobs(phases=2, words=6))
    assert second.status == "completed" and len(second.output) == 2
    assert _texts(second)[-1].startswith("lookup returned: Checkpoints bound lost work.\n")
    assert QUESTION.split()[0] in _texts(second)[0], "the phases work on the chain's question"
    items = client.responses.input_items.list(second.id).data
    assert [i.type for i in items] == ["function_call_output"]


def test_streamed_tool_call_through_the_stream_helper(client: OpenAI) -> None:
    with client.responses.stream(model="m", input=QUESTION, tools=[LOOKUP],  # type: ignore[list-item]
                                 tool_choice={"type": "function", "name": "lookup"}, background=True,
                                 metadata=knobs(phases=2, words=6)) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    start = kinds.index("response.output_item.added")
    assert kinds[start:start + 4] == ["response.output_item.added", "response.function_call_arguments.delta",
                                      "response.function_call_arguments.done", "response.output_item.done"]
    assert final.output[0].type == "function_call"
    assert plain(final) == plain(client.responses.retrieve(final.id))


def test_named_tool_choice_calls_that_tool(client: OpenAI) -> None:
    response = client.responses.create(model="m", input=QUESTION, tools=[LOOKUP, NOTES],  # type: ignore[list-item]
                                       tool_choice={"type": "function", "name": "notes"}, metadata=knobs())
    assert [(o.type, o.name) for o in response.output] == [("function_call", "notes")]  # type: ignore[union-attr]
    assert response.tool_choice.name == "notes"  # type: ignore[union-attr]


def test_tool_choice_none_runs_the_phases_without_calling(client: OpenAI) -> None:
    response = client.responses.create(model="m", input=QUESTION, tools=[LOOKUP],  # type: ignore[list-item]
                                       tool_choice="none", metadata=knobs(phases=2, words=5))
    assert [o.type for o in response.output] == ["message", "message"]
    assert response.tool_choice == "none"


def test_unknown_call_id_and_unanswered_calls_are_400_as_openai_answers(client: OpenAI) -> None:
    first = client.responses.create(model="m", input=QUESTION, tools=[LOOKUP], metadata=knobs())  # type: ignore[list-item]
    with pytest.raises(BadRequestError) as unknown:
        client.responses.create(model="m", previous_response_id=first.id, input=[
            {"type": "function_call_output", "call_id": "call_never_issued", "output": "x"}])
    assert unknown.value.body["param"] == "input"  # type: ignore[index]
    assert unknown.value.body["message"] == (  # type: ignore[index]
        "No tool call found for function call output with call_id call_never_issued.")
    assert unknown.value.body["type"] == "invalid_request_error"  # type: ignore[index]
    with pytest.raises(BadRequestError) as unanswered:
        client.responses.create(model="m", previous_response_id=first.id, input="just chatting")
    call_id = first.output[0].call_id  # type: ignore[union-attr]
    assert unanswered.value.body["message"] == f"No tool output found for function call {call_id}."  # type: ignore[index]
    assert unanswered.value.body["param"] == "input"  # type: ignore[index]
    assert unanswered.value.body["code"] == "tool_output_required"  # type: ignore[index]
    # The refused turns left no trace: the chain still continues from the first turn.
    call = first.output[0]
    ok = client.responses.create(model="m", previous_response_id=first.id, metadata=knobs(phases=1), input=[
        {"type": "function_call_output", "call_id": call.call_id, "output": "fine"}])  # type: ignore[union-attr]
    assert ok.status == "completed"


@pytest.mark.parametrize(("tools", "param"), [
    ([{"type": "web_search"}], "tools[0].type"),
    ([{"type": "function", "name": "bad name"}], "tools[0].name"),
    ([{"type": "function", "name": "f", "parameters": {"type": "string"}}], "tools[0].parameters.type"),
])
def test_malformed_tools_are_400(http: httpx.Client, tools: list[dict[str, Any]], param: str) -> None:
    answer = http.post("/responses", json={"model": "m", "input": "x", "tools": tools})
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == param


def test_two_tools_with_one_name_are_400(http: httpx.Client) -> None:
    tools = [{"type": "function", "name": "f"}, {"type": "function", "name": "f", "description": "again"}]
    answer = http.post("/responses", json={"model": "m", "input": "x", "tools": tools})
    assert answer.status_code == 400
    assert (answer.json()["error"]["param"], answer.json()["error"]["code"]) == ("tools[1].name", "duplicate_tool_name")


def _approval(response: Any) -> Any:
    requests = [o for o in response.output if o.type == "mcp_approval_request"]
    assert len(requests) == 1
    return requests[0]


def test_approve_resumes_the_paused_plan_and_the_texts_join(client: OpenAI, double: HostDouble) -> None:
    reference = client.responses.create(model="m", input=QUESTION, metadata=knobs(phases=4, words=8))
    paused = client.responses.create(model="m", input=QUESTION,
                                     metadata={**knobs(phases=4, words=8), "require_approval": "true"})
    assert paused.status == "completed"
    assert [o.type for o in paused.output] == ["message"] * 3 + ["mcp_approval_request"]
    request = _approval(paused)
    assert request.server_label == "research-agent" and request.name == "synthesis"
    assert json.loads(request.arguments)["phase"] == "synthesis"

    # The paused plan lives in storage: it survives the worker dying between the turns.
    before = double.stats()["worker_restarts"]
    with contextlib.suppress(httpx.HTTPError):
        httpx.post(f"{double.base_url}/ops/crash", timeout=10)
    double.wait_for_worker_restarts(before + 1, timeout=60)

    resumed = client.responses.create(model="m", previous_response_id=paused.id, input=[
        {"type": "mcp_approval_response", "approval_request_id": request.id, "approve": True}])
    assert resumed.status == "completed"
    assert _texts(paused) + _texts(resumed) == _texts(reference)
    assert len(resumed.output) == 1, "earlier phases were not run again"


def test_deny_runs_no_further_phase(client: OpenAI) -> None:
    paused = client.responses.create(model="m", input=QUESTION,
                                     metadata={**knobs(phases=3, words=5), "require_approval": "true"})
    request = _approval(paused)
    denied = client.responses.create(model="m", previous_response_id=paused.id, input=[
        {"type": "mcp_approval_response", "approval_request_id": request.id, "approve": False,
         "reason": "not today"}])
    assert denied.status == "completed"
    assert request.name == "findings"  # the last phase of a 3-phase plan
    assert _texts(denied) == ["Not approved: findings was not run (not today)."]


def test_approval_stream_and_bad_answers(client: OpenAI) -> None:
    with client.responses.stream(model="m", input=QUESTION, background=True,
                                 metadata={**knobs(phases=2, words=5), "require_approval": "true"}) as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert final.output[-1].type == "mcp_approval_request"
    assert plain(final) == plain(client.responses.retrieve(final.id))
    assert [i["type"] for i in rebuild_any(events)] == ["message", "mcp_approval_request"]
    with pytest.raises(BadRequestError) as wrong:
        client.responses.create(model="m", previous_response_id=final.id, input=[
            {"type": "mcp_approval_response", "approval_request_id": "mcpr_unknown", "approve": True}])
    assert wrong.value.body["param"] == "input[0].approval_request_id"  # type: ignore[index]
    with pytest.raises(BadRequestError):
        client.responses.create(model="m", input=[
            {"type": "mcp_approval_response", "approval_request_id": "mcpr_x", "approve": True}])


def rebuild_any(events: list[Any]) -> list[dict[str, Any]]:
    """Item types in stream order (the raw consumer's view, any item type)."""
    items: dict[int, dict[str, Any]] = {}
    for event in events:
        if event.type == "response.output_item.added":
            items[event.output_index] = {"type": event.item.type}
    assert rebuild([e for e in events if getattr(getattr(e, "item", None), "type", "message") == "message"])
    return [items[i] for i in sorted(items)]


def _resent_history(paused: Any, request: Any, approve: bool, **extra: Any) -> list[dict[str, Any]]:
    """The second request of the Vercel AI SDK with ``store: true``: the whole history (the user's message,
    references to the stored output) and the answer, without ``previous_response_id``."""
    return [{"role": "user", "content": QUESTION},
            *({"type": "item_reference", "id": o.id} for o in paused.output),
            {"type": "mcp_approval_response", "approval_request_id": request.id, "approve": approve, **extra}]


def test_an_answer_to_a_stored_request_continues_its_response(client: OpenAI) -> None:
    reference = client.responses.create(model="m", input=QUESTION, metadata=knobs(phases=3, words=6))
    paused = client.responses.create(model="m", input=QUESTION,
                                     metadata={**knobs(phases=3, words=6), "require_approval": "true"})
    request = _approval(paused)
    resent = _resent_history(paused, request, True)
    resumed = client.responses.create(model="m", input=resent)  # type: ignore[arg-type]
    assert resumed.status == "completed" and resumed.previous_response_id is None  # as the client sent it
    assert _texts(paused) + _texts(resumed) == _texts(reference)
    assert len(resumed.output) == 1, "earlier phases were not run again"
    stored = client.responses.input_items.list(resumed.id, order="asc").data
    assert [i.type for i in stored] == ["message", "message", "message", "mcp_approval_request",
                                        "mcp_approval_response"]  # each reference stored as the item it names

    with pytest.raises(BadRequestError) as again:  # answered once: the response has a newer turn now
        client.responses.create(model="m", input=resent)  # type: ignore[arg-type]
    assert again.value.body["code"] == "approval_request_not_found"  # type: ignore[index]
    assert again.value.body["param"] == f"input[{len(resent) - 1}].approval_request_id"  # type: ignore[index]

    follow_up = client.responses.create(model="m", previous_response_id=resumed.id, input="And then?",
                                        metadata=knobs(phases=1, words=6))
    assert follow_up.status == "completed" and follow_up.previous_response_id == resumed.id


def test_a_denial_to_a_stored_request_runs_no_further_phase(client: OpenAI) -> None:
    paused = client.responses.create(model="m", input=QUESTION,
                                     metadata={**knobs(phases=2, words=5), "require_approval": "true"})
    request = _approval(paused)
    denied = client.responses.create(model="m", input=_resent_history(  # type: ignore[arg-type]
        paused, request, False, reason="not today"))
    assert _texts(denied) == [f"Not approved: {request.name} was not run (not today)."]


def test_an_answer_without_its_turn_must_name_a_stored_request(client: OpenAI) -> None:
    in_conversation = client.conversations.create()
    paused = client.responses.create(model="m", input=QUESTION, conversation=in_conversation.id,
                                     metadata={**knobs(phases=2, words=5), "require_approval": "true"})
    request = _approval(paused)
    answer = {"type": "mcp_approval_response", "approval_request_id": request.id, "approve": True}
    with pytest.raises(BadRequestError) as conversation:  # a conversation's turn is answered in it
        client.responses.create(model="m", input=[answer])  # type: ignore[list-item]
    assert "answer it with that conversation" in conversation.value.body["message"]  # type: ignore[index]
    unstored = client.responses.create(model="m", input=QUESTION, store=False,
                                       metadata={**knobs(phases=2, words=5), "require_approval": "true"})
    with pytest.raises(BadRequestError) as missing:
        client.responses.create(model="m", input=[{**answer, "approval_request_id": _approval(unstored).id}])  # type: ignore[list-item]
    assert missing.value.body["code"] == "approval_request_not_found"  # type: ignore[index]
