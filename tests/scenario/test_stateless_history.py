"""Clients that resend the whole history (the OpenAI Agents SDK's and the Vercel AI SDK's default tool
loops): the model's ``function_call`` item then the ``function_call_output``, with and without
``previous_response_id``, with ``store: false`` too; images, files, reasoning and ``item_reference`` items in
the input; every create parameter echoed. Driven by the official ``openai`` client against the host double."""

from __future__ import annotations

import base64
from typing import Any

import httpx
import pytest
from openai import BadRequestError, OpenAI

from tests.scenario.conftest import knobs
from tests.scenario.test_tools_and_approval import LOOKUP, QUESTION

pytestmark = pytest.mark.azurite

PNG = "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 64).decode()


def _texts(response: Any) -> list[str]:
    return [o.content[0].text for o in response.output if o.type == "message"]


def _call(client: OpenAI, *, store: bool = True) -> tuple[Any, dict[str, Any]]:
    """A first turn that ends with the model's function call, and that call as a client resends it."""
    first = client.responses.create(model="m", input=QUESTION, tools=[LOOKUP], store=store,  # type: ignore[list-item]
                                    metadata=knobs(phases=2, words=5))
    assert [o.type for o in first.output] == ["function_call"]
    return first, first.output[0].model_dump(exclude_unset=True)


def _answer(call: dict[str, Any], output: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call["call_id"], "output": output}


def test_whole_history_without_previous_response_id_is_a_fresh_turn(client: OpenAI) -> None:
    _, call = _call(client)
    history = [{"role": "user", "content": QUESTION}, call, _answer(call, "Checkpoints bound lost work.")]
    second = client.responses.create(model="m", input=history, tools=[LOOKUP],  # type: ignore[arg-type, list-item]
                                     metadata=knobs(phases=2, words=5))
    assert second.status == "completed" and second.previous_response_id is None
    assert [o.type for o in second.output] == ["message", "message"]
    assert "returned: Checkpoints bound lost work.\n" in _texts(second)[-1]
    listed = client.responses.input_items.list(second.id, order="asc").data
    assert [i.type for i in listed] == ["message", "function_call", "function_call_output"]
    assert listed[1].model_dump(exclude_unset=True) == call, "the function_call is listed as sent, with its id"


def test_whole_history_with_previous_response_id(client: OpenAI) -> None:
    first, call = _call(client)
    second = client.responses.create(model="m", previous_response_id=first.id, tools=[LOOKUP],  # type: ignore[list-item]
                                     input=[call, _answer(call, "fine")], metadata=knobs(phases=1, words=4))
    assert second.status == "completed"
    assert "returned: fine\n" in _texts(second)[-1]


def test_stateless_tool_loop_with_store_false(client: OpenAI) -> None:
    _, call = _call(client, store=False)
    history = [{"role": "user", "content": QUESTION}, call, _answer(call, "unstored answer")]
    second = client.responses.create(model="m", input=history, store=False, tools=[LOOKUP],  # type: ignore[arg-type, list-item]
                                     metadata=knobs(phases=1, words=4))
    assert second.status == "completed" and second.store is False
    assert "returned: unstored answer\n" in _texts(second)[-1]


def test_a_call_id_neither_the_input_nor_the_chain_issued_stays_400(client: OpenAI) -> None:
    with pytest.raises(BadRequestError) as unknown:
        client.responses.create(model="m", input=[{"role": "user", "content": "q"},
                                                  {"type": "function_call_output", "call_id": "call_nowhere",
                                                   "output": "x"}])
    assert unknown.value.body == {"message": "No tool call found for function call output with call_id call_nowhere.",  # type: ignore[comparison-overlap]
                                  "type": "invalid_request_error", "code": "tool_call_not_found", "param": "input"}
    _, call = _call(client)
    with pytest.raises(BadRequestError) as unanswered:
        client.responses.create(model="m", input=[{"role": "user", "content": "q"}, call])
    assert unanswered.value.body["code"] == "tool_output_required"  # type: ignore[index]
    assert unanswered.value.body["message"] == f"No tool output found for function call {call['call_id']}."  # type: ignore[index]


def test_item_reference_is_listed_as_sent_and_must_name_an_item_of_the_chain(client: OpenAI,
                                                                             http: httpx.Client) -> None:
    first, call = _call(client)
    reference = {"type": "item_reference", "id": call["id"]}
    second = client.responses.create(model="m", previous_response_id=first.id, tools=[LOOKUP],  # type: ignore[list-item]
                                     input=[reference, _answer(call, "by reference")],  # type: ignore[list-item]
                                     metadata=knobs(phases=1, words=4))
    assert second.status == "completed"
    # Raw JSON: the client's ``ResponseItem`` union has no ``item_reference`` member (its default, non-strict
    # parsing keeps the item as it is).
    listed = http.get(f"/responses/{second.id}/input_items", params={"order": "asc"}).json()["data"]
    assert listed[0] == reference
    with pytest.raises(BadRequestError) as nowhere:
        client.responses.create(model="m", previous_response_id=first.id, input=[
            {"type": "item_reference", "id": "fc_nowhere"}, _answer(call, "x")])  # type: ignore[list-item]
    assert nowhere.value.body["code"] == "item_not_found"  # type: ignore[index]
    assert nowhere.value.body["param"] == "input[0].id"  # type: ignore[index]


def test_images_files_reasoning_and_assistant_parts_are_accepted_and_listed_as_sent(client: OpenAI) -> None:
    user = {"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": QUESTION},
        {"type": "input_image", "image_url": PNG, "detail": "low"},
        {"type": "input_file", "filename": "notes.txt", "file_data": base64.b64encode(b"notes").decode()},
        {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "auto"}]}
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "thought"}],
                 "encrypted_content": "opaque"}
    assistant = {"type": "message", "role": "assistant", "content": [
        {"type": "output_text", "text": "Earlier.", "annotations": [
            {"type": "url_citation", "url": "https://example.com", "title": "t", "start_index": 0, "end_index": 7}]},
        {"type": "refusal", "refusal": "Not that."}]}
    response = client.responses.create(model="m", input=[user, reasoning, assistant, {"role": "user", "content": "go"}],  # type: ignore[list-item]
                                       metadata=knobs(phases=1, words=4))
    assert response.status == "completed"
    listed = [i.model_dump(exclude_unset=True) for i in
              client.responses.input_items.list(response.id, order="asc").data]
    assert listed[0]["content"] == user["content"]
    assert listed[1] == reasoning
    assert listed[2]["content"][0]["annotations"] == assistant["content"][0]["annotations"]  # type: ignore[index]
    assert listed[2]["content"][1] == {"type": "refusal", "refusal": "Not that."}


PARAMS: dict[str, Any] = {
    "temperature": 0.3, "top_p": 0.8, "presence_penalty": 0.5, "frequency_penalty": -0.5, "top_logprobs": 3,
    "max_output_tokens": 500, "max_tool_calls": 2, "parallel_tool_calls": False, "truncation": "auto",
    "service_tier": "flex", "user": "u-1", "safety_identifier": "s-1", "prompt_cache_key": "k-1",
    "reasoning": {"effort": "low", "summary": "auto"}, "text": {"format": {"type": "text"}, "verbosity": "low"},
    "include": ["reasoning.encrypted_content"], "context_management": [{"type": "compaction"}],
    "stream_options": {"include_obfuscation": False},
}


def test_every_create_parameter_is_accepted_and_echoed(http: httpx.Client, client: OpenAI) -> None:
    answer = http.post("/v1/responses", json={"model": "m", "input": "q", "metadata": knobs(phases=1, words=3),
                                              "background": True, **PARAMS})
    assert answer.status_code == 200, answer.text
    echoed = {"include", "context_management", "stream_options"}  # not fields of the response object
    for name, value in PARAMS.items():
        if name not in echoed:
            assert answer.json()[name] == value, name
    # The typed client reads the same object (the penalties are fields it does not declare).
    again = client.responses.retrieve(answer.json()["id"])
    assert (again.temperature, again.top_logprobs, again.service_tier) == (0.3, 3, "flex")
    assert again.model_extra == {"store": True, "presence_penalty": 0.5, "frequency_penalty": -0.5}


def test_unset_parameters_report_the_defaults_open_responses_requires(http: httpx.Client) -> None:
    body = http.post("/responses", json={"input": "q", "metadata": knobs(phases=1, words=3)}).json()
    assert {k: body[k] for k in ("presence_penalty", "frequency_penalty", "temperature", "top_p", "top_logprobs",
                                 "truncation", "service_tier")} == {
        "presence_penalty": 0.0, "frequency_penalty": 0.0, "temperature": 1.0, "top_p": 1.0, "top_logprobs": 0,
        "truncation": "disabled", "service_tier": "default"}


@pytest.mark.parametrize("path", ["/responses/compact", "/v1/responses/compact", "/responses/input_tokens",
                                  "/v1/responses/input_tokens"])
def test_compact_and_input_tokens_answer_501_saying_why(http: httpx.Client, path: str) -> None:
    answer = http.post(path, json={"model": "m", "input": "q"})
    assert answer.status_code == 501
    error = answer.json()["error"]
    assert (error["type"], error["code"], error["param"]) == ("server_error", "not_implemented", None)
    endpoint = path.rsplit("/", 1)[-1]
    assert error["message"].startswith(f"POST /responses/{endpoint} is not implemented by this service: ")
    assert answer.headers["x-should-retry"] == "false"
