"""The response object and items validate strictly against the installed ``openai`` types."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from openai._models import validate_type
from openai.types.responses import (
    EasyInputMessageParam,
    Response,
    ResponseInputItemParam,
    ResponseOutputMessage,
    ResponseUsage,
)
from pydantic import TypeAdapter

from resilient.protocol._strict import unexpected_fields
from resilient.protocol.items import (
    input_message,
    item_for_history,
    output_message,
    output_text_part,
    text_of,
    validate_history_item,
    validate_output_item,
    validate_stored_item,
)
from resilient.protocol.response import build_response, estimate_tokens, usage_for, validate_response


def make(status: str, **overrides: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "response_id": "resp_abc",
        "created_at": 1_700_000_000,
        "model": "research-agent",
        "status": status,
        "output": [],
        "background": True,
        "store": True,
        "instructions": None,
        "metadata": None,
        "previous_response_id": None,
        "conversation_id": None,
        "error": None,
        "incomplete_details": None,
        "usage": None,
        "completed_at": None,
    }
    fields.update(overrides)
    return build_response(**fields)


DONE = [output_message("msg_1", "Hello "), output_message("msg_2", "world")]

RESPONSES: dict[str, dict[str, Any]] = {
    "queued": make("queued", conversation_id="conv_1"),
    "in_progress": make("in_progress", output=[output_message("msg_1", "Hel", status="in_progress")]),
    "completed": make(
        "completed",
        output=DONE,
        usage=usage_for(10, 5),
        completed_at=1_700_000_009,
        metadata={"k": "v"},
        instructions="be brief",
        previous_response_id="resp_prev",
    ),
    "completed_steered": make(
        "completed",
        output=[output_message("msg_1", "partial", status="incomplete")],
        incomplete_details={"reason": "steered"},
        usage=usage_for(1, 2),
        completed_at=1_700_000_001,
    ),
    "failed": make(
        "failed", error={"code": "server_error", "message": "The worker crashed."}, background=False
    ),
    "cancelled": make("cancelled"),
    "incomplete": make(
        "incomplete",
        output=[output_message("msg_1", "cut", status="incomplete")],
        incomplete_details={"reason": "max_output_tokens"},
        usage=usage_for(3, 4),
    ),
}


@pytest.mark.parametrize("name", list(RESPONSES))
def test_response_validates_strictly_in_every_status(name: str) -> None:
    resp = RESPONSES[name]
    model = Response.model_validate(resp)
    assert model.status == resp["status"]
    assert model.object == "response"
    assert model.id == "resp_abc"
    # the client's own strict path
    assert isinstance(validate_type(type_=Response, value=resp), Response)
    # nothing silently dropped, nothing unknown except ``store`` and the two penalties (sent by OpenAI and
    # required by Open Responses, undeclared in the client's types)
    assert model.model_dump(exclude_unset=True) == resp
    assert unexpected_fields(model) == []
    assert model.model_extra == {"store": True, "presence_penalty": 0.0, "frequency_penalty": 0.0}
    validate_response(resp)


def test_response_fields_that_the_client_reads() -> None:
    resp = Response.model_validate(RESPONSES["completed"])
    assert resp.output_text == "Hello world"
    assert resp.usage is not None and resp.usage.total_tokens == 15
    assert resp.usage.input_tokens_details.cached_tokens == 0
    assert resp.usage.output_tokens_details.reasoning_tokens == 0
    assert resp.metadata == {"k": "v"}
    assert resp.previous_response_id == "resp_prev"
    assert resp.conversation is None
    assert resp.tools == [] and resp.tool_choice == "auto" and resp.parallel_tool_calls is True
    assert Response.model_validate(RESPONSES["queued"]).conversation is not None
    failed = Response.model_validate(RESPONSES["failed"])
    assert failed.error is not None and failed.error.code == "server_error"
    steered = Response.model_validate(RESPONSES["completed_steered"])
    assert steered.incomplete_details is not None and steered.incomplete_details.reason == "steered"


def test_metadata_none_is_an_empty_object_and_inputs_are_copied() -> None:
    output = [output_message("msg_1", "x")]
    metadata = {"a": "b"}
    resp = make("completed", output=output, metadata=metadata)
    output.append(output_message("msg_2", "y"))
    metadata["c"] = "d"
    assert len(resp["output"]) == 1 and resp["metadata"] == {"a": "b"}
    assert make("queued")["metadata"] == {}


def test_unknown_status_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="status"):
        make("done")


def test_validate_response_rejects_missing_and_misspelt_fields() -> None:
    broken = copy.deepcopy(RESPONSES["completed"])
    del broken["tools"]
    with pytest.raises(ValueError, match="tools"):
        validate_response(broken)
    typo = copy.deepcopy(RESPONSES["completed"])
    typo["output"][0]["content"][0]["annotatoins"] = []
    with pytest.raises(ValueError, match=r"output\[0\]\.content\[0\]\.annotatoins"):
        validate_response(typo)


def test_usage_matches_the_client_type() -> None:
    usage = usage_for(7, 3)
    model = ResponseUsage.model_validate(usage)
    assert (model.input_tokens, model.output_tokens, model.total_tokens) == (7, 3, 10)
    assert model.model_dump(exclude_unset=True) == usage
    assert unexpected_fields(model) == []


@pytest.mark.parametrize(("text", "tokens"), [("", 0), ("a", 1), ("abcd", 1), ("abcde", 2), ("x" * 400, 100)])
def test_estimate_tokens_is_ceil_len_over_4(text: str, tokens: int) -> None:
    assert estimate_tokens(text) == tokens


# --------------------------------------------------------------------------- items


@pytest.mark.parametrize("status", ["completed", "in_progress", "incomplete"])
def test_output_message_is_a_strict_output_message(status: Any) -> None:
    item = output_message("msg_1", "héllo\n", status=status)
    model = ResponseOutputMessage.model_validate(item)
    assert model.status == status and model.content[0].type == "output_text"
    assert model.model_dump(exclude_unset=True) == item
    validate_output_item(item)
    validate_stored_item(item)


def test_output_message_rejects_bad_status() -> None:
    with pytest.raises(ValueError):
        output_message("msg_1", "x", status="done")  # type: ignore[arg-type]


def test_output_text_part_shape() -> None:
    assert output_text_part("t") == {"type": "output_text", "text": "t", "annotations": [], "logprobs": []}


def test_text_of_concatenates_text_parts_only() -> None:
    item = {
        "content": [
            {"type": "input_text", "text": "a"},
            {"type": "input_image", "image_url": "x"},
            {"type": "output_text", "text": "b"},
            {"type": "refusal", "refusal": "no"},
        ]
    }
    assert text_of(item) == "ab"
    assert text_of({"role": "user", "content": "plain"}) == "plain"
    assert text_of({"type": "message"}) == ""
    assert text_of(output_message("msg_1", "out")) == "out"


def test_item_for_history_gives_valid_model_input() -> None:
    stored = [
        input_message("msg_1", "user", "question"),
        input_message("msg_2", "developer", "rules"),
        output_message("msg_3", "partial answer", status="incomplete"),
    ]
    history = [item_for_history(item) for item in stored]
    assert history == [
        {"type": "message", "role": "user", "content": "question"},
        {"type": "message", "role": "developer", "content": "rules"},
        {"type": "message", "role": "assistant", "content": "partial answer"},
    ]
    adapter: TypeAdapter[Any] = TypeAdapter(ResponseInputItemParam)
    for item in history:
        validate_history_item(item)
        assert TypeAdapter(EasyInputMessageParam).validate_python(item) == item
        assert adapter.validate_python(item) == item


def test_item_for_history_rejects_non_messages() -> None:
    with pytest.raises(ValueError):
        item_for_history({"type": "function_call", "id": "fc_1"})
    with pytest.raises(ValueError):
        item_for_history({"type": "message", "role": "robot", "content": "x"})


def test_input_message_is_a_strict_stored_item() -> None:
    validate_stored_item(input_message("msg_1", "system", "s"))
    with pytest.raises(ValueError):
        validate_stored_item({**input_message("msg_1", "user", "s"), "colour": "red"})
