"""Every input item kind of the Responses API: accepted, stored as sent (with its id), and each bad value
refused with the exact message, ``param`` and ``code`` a client sees."""

from __future__ import annotations

import json
import typing
from typing import Any

import pytest
from openai.types.responses import ResponseItem
from openai.types.responses.response_input_item_param import ResponseInputItemParam
from pydantic import TypeAdapter

from resilient.ids import new_input_item_id, new_message_id
from resilient.protocol.errors import ApiError
from resilient.protocol.input_items import HOSTED_ITEM_TYPES
from resilient.protocol.items import validate_stored_item
from resilient.protocol.request import normalize_input_items, parse_create_request

PNG = "data:image/png;base64,iVBORw0KGgo="
CALL = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "lookup", "arguments": "{\"q\":1}"}
ANSWER = {"type": "function_call_output", "call_id": "call_1", "output": "42"}


def stored(*items: Any) -> list[dict[str, Any]]:
    request = parse_create_request(json.dumps({"input": list(items)}).encode())
    return normalize_input_items(request, new_message_id, new_input_item_id)


def reject(*items: Any) -> tuple[str, str | None, str]:
    with pytest.raises(ApiError) as info:
        parse_create_request(json.dumps({"input": list(items)}).encode())
    assert info.value.status == 400
    return info.value.code, info.value.param, info.value.message


def test_the_hosted_kinds_are_every_other_member_of_the_clients_input_item_union() -> None:
    kinds: set[str] = set()
    for member in typing.get_args(ResponseInputItemParam):
        kinds |= {k for k in typing.get_args(typing.get_type_hints(member)["type"]) if isinstance(k, str)}
    modelled = {"message", "function_call", "function_call_output", "reasoning", "item_reference",
                "mcp_approval_response"}
    assert set(HOSTED_ITEM_TYPES) == kinds - modelled


def test_user_message_with_image_and_file_parts_is_stored_with_its_data() -> None:
    parts = [{"type": "input_text", "text": "look"},
             {"type": "input_image", "image_url": PNG, "detail": "high"},
             {"type": "input_image", "file_id": "file-1"},
             {"type": "input_file", "file_data": "aGk=", "filename": "a.txt"},
             {"type": "input_file", "file_url": "https://example.com/a.pdf"},
             {"type": "input_file", "file_id": "file-2", "detail": "low"}]
    (item,) = stored({"role": "user", "content": parts})
    assert item["content"] == [parts[0], parts[1], {**parts[2], "detail": "auto"}, parts[3], parts[4], parts[5]]
    validate_stored_item(item)


@pytest.mark.parametrize("role", ["system", "developer"])
def test_system_and_developer_messages_take_input_parts_too(role: str) -> None:
    (item,) = stored({"role": role, "content": [{"type": "input_image", "image_url": "https://x.test/i.png"}]})
    assert item["role"] == role and item["content"][0]["image_url"] == "https://x.test/i.png"


def test_assistant_history_keeps_annotations_and_refusals() -> None:
    annotation = {"type": "file_citation", "file_id": "file-1", "filename": "a.txt", "index": 3}
    (item,) = stored({"role": "assistant", "phase": "final_answer", "content": [
        {"type": "output_text", "text": "x", "annotations": [annotation]}, {"type": "refusal", "refusal": "no"}]})
    assert item["content"] == [{"type": "output_text", "text": "x", "annotations": [annotation], "logprobs": []},
                               {"type": "refusal", "refusal": "no"}]
    assert item["phase"] == "final_answer"
    validate_stored_item(item)


def test_function_call_reasoning_and_outputs_are_stored_as_sent() -> None:
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "s"}],
                 "content": [{"type": "reasoning_text", "text": "t"}], "encrypted_content": "enc",
                 "status": "completed"}
    parts_answer = {"type": "function_call_output", "call_id": "call_2", "output": [
        {"type": "input_text", "text": "see"}, {"type": "input_image", "image_url": PNG, "detail": "auto"},
        {"type": "input_file", "file_data": "aGk=", "filename": "r.txt"}]}
    call2 = {**CALL, "id": "fc_2", "call_id": "call_2", "status": "completed"}
    items = stored(reasoning, CALL, ANSWER, call2, parts_answer)
    assert items[0] == reasoning
    assert items[1] == {**CALL, "status": "completed"}  # the listing type requires a status
    assert items[2]["id"].startswith("fco_") and items[2]["output"] == "42"
    assert items[4]["output"] == parts_answer["output"]
    for item in items:
        validate_stored_item(item)


def test_item_reference_with_or_without_its_type() -> None:
    assert stored({"type": "item_reference", "id": "msg_1"}) == [{"type": "item_reference", "id": "msg_1"}]
    assert stored({"id": "msg_2"}) == [{"type": "item_reference", "id": "msg_2"}]
    assert stored({"type": None, "id": "msg_3"}) == [{"type": "item_reference", "id": "msg_3"}]


HOSTED: list[dict[str, Any]] = [
    {"type": "mcp_call", "id": "mcp_1", "server_label": "s", "name": "n", "arguments": "{}", "output": "o",
     "status": "completed"},
    {"type": "mcp_list_tools", "id": "mcpl_1", "server_label": "s",
     "tools": [{"name": "t", "input_schema": {"type": "object"}}]},
    {"type": "mcp_approval_request", "id": "mcpr_1", "server_label": "s", "name": "n", "arguments": "{}"},
    {"type": "web_search_call", "id": "ws_1", "status": "completed",
     "action": {"type": "search", "query": "q"}},
    {"type": "image_generation_call", "id": "ig_1", "status": "completed", "result": None},
    {"type": "custom_tool_call", "call_id": "c1", "name": "n", "input": "i"},
    {"type": "custom_tool_call_output", "call_id": "c1", "output": "o"},
]


@pytest.mark.parametrize("item", HOSTED, ids=[i["type"] for i in HOSTED])
def test_hosted_tool_items_are_accepted_as_sent(item: dict[str, Any]) -> None:
    (kept,) = stored(item)
    assert {k: v for k, v in kept.items() if k != "id"} == {k: v for k, v in item.items() if k != "id"}
    assert kept["id"] == item.get("id", kept["id"])


BAD: list[tuple[str, Any, tuple[str, str | None, str]]] = [
    ("non-image data URL",
     {"role": "user", "content": [{"type": "input_image", "image_url": "data:text/plain;base64,aGk="}]},
     ("invalid_value", "input[0].content[0].image_url", "Invalid value for 'input[0].content[0].image_url': an "
      "input_image data URL must hold an image (data:image/...), got 'data:text/plain;base64'.")),
    ("image URL scheme", {"role": "user", "content": [{"type": "input_image", "image_url": "file:///etc/passwd"}]},
     ("invalid_value", "input[0].content[0].image_url", "Invalid value for 'input[0].content[0].image_url': "
      "expected an http(s) URL or a data URL of an image (data:image/png;base64,...).")),
    ("image without a source", {"role": "user", "content": [{"type": "input_image", "detail": "low"}]},
     ("missing_required_parameter", "input[0].content[0].image_url", "Missing required parameter: "
      "'input[0].content[0].image_url': an input_image needs image_url or file_id.")),
    ("image detail", {"role": "user", "content": [{"type": "input_image", "image_url": PNG, "detail": "max"}]},
     ("invalid_value", "input[0].content[0].detail", "Invalid value for 'input[0].content[0].detail': 'max'. "
      "Supported values are: low, high, auto, original.")),
    ("file without a source", {"role": "user", "content": [{"type": "input_file", "filename": "a"}]},
     ("missing_required_parameter", "input[0].content[0].file_data", "Missing required parameter: "
      "'input[0].content[0].file_data': an input_file needs file_data, file_url or file_id.")),
    ("file URL", {"role": "user", "content": [{"type": "input_file", "file_url": "ftp://x"}]},
     ("invalid_value", "input[0].content[0].file_url",
      "Invalid value for 'input[0].content[0].file_url': expected an http(s) URL.")),
    ("refusal from the user", {"role": "user", "content": [{"type": "refusal", "refusal": "no"}]},
     ("invalid_value", "input[0].content[0].type", "Invalid value for 'input[0].content[0].type': 'refusal'. "
      "Supported values for role 'user' are: 'input_text', 'input_image', 'input_file'.")),
    ("image in assistant history", {"role": "assistant", "content": [{"type": "input_image", "image_url": PNG}]},
     ("invalid_value", "input[0].content[0].type", "Invalid value for 'input[0].content[0].type': 'input_image'. "
      "Supported values for role 'assistant' are: 'output_text', 'refusal'.")),
    ("annotation field", {"role": "assistant", "content": [{"type": "output_text", "text": "x", "annotations": [
        {"type": "url_citation", "url": "u", "title": "t", "start_index": 0}]}]},
     ("missing_required_parameter", "input[0].content[0].annotations[0].end_index",
      "Missing required parameter: 'input[0].content[0].annotations[0].end_index'.")),
    ("annotation key", {"role": "assistant", "content": [{"type": "output_text", "text": "x", "annotations": [
        {"type": "file_path", "file_id": "f", "index": 0, "page": 2}]}]},
     ("unknown_parameter", "input[0].content[0].annotations[0].page",
      "Unknown parameter: 'input[0].content[0].annotations[0].page'.")),
    ("function_call without arguments", {"type": "function_call", "call_id": "c", "name": "f"},
     ("missing_required_parameter", "input[0].arguments", "Missing required parameter: 'input[0].arguments'.")),
    ("function_call arguments type", {"type": "function_call", "call_id": "c", "name": "f", "arguments": {}},
     ("invalid_type", "input[0].arguments",
      "Invalid type for 'input[0].arguments': expected a string, but got an object instead.")),
    ("function_call_output part", {"type": "function_call_output", "call_id": "c", "output": [
        {"type": "output_text", "text": "x"}]},
     ("invalid_value", "input[0].output[0].type", "Invalid value for 'input[0].output[0].type': 'output_text'. "
      "Supported values for a function_call_output are: 'input_text', 'input_image', 'input_file'.")),
    ("reasoning without id", {"type": "reasoning", "summary": []},
     ("missing_required_parameter", "input[0].id", "Missing required parameter: 'input[0].id'.")),
    ("reasoning summary type", {"type": "reasoning", "id": "rs_1", "summary": [{"type": "text", "text": "x"}]},
     ("invalid_value", "input[0].summary[0].type",
      "Invalid value for 'input[0].summary[0].type': 'text'. Supported values are: summary_text.")),
    ("item_reference id", {"type": "item_reference", "id": "../x"},
     ("invalid_value", "input[0].id",
      "Invalid value for 'input[0].id': '../x'. Expected 1-128 characters of [A-Za-z0-9_-].")),
    ("hosted item field", {"type": "mcp_call", "id": "mcp_1", "server_label": "s", "name": "n"},
     ("missing_required_parameter", "input[0].arguments", "Missing required parameter: 'input[0].arguments'.")),
    ("hosted item key", {"type": "mcp_call", "id": "mcp_1", "server_label": "s", "name": "n", "arguments": "{}",
                         "colour": "red"},
     ("unknown_parameter", "input[0].colour", "Unknown parameter: 'input[0].colour'.")),
    ("hosted item nested key", {"type": "mcp_list_tools", "id": "mcpl_1", "server_label": "s",
                                "tools": [{"name": "t", "input_schema": {}, "x": 1}]},
     ("unknown_parameter", "input[0].tools[0].x", "Unknown parameter: 'input[0].tools[0].x'.")),
    ("hosted item id", {"type": "mcp_call", "id": "a/b", "server_label": "s", "name": "n", "arguments": "{}"},
     ("invalid_value", "input[0].id", "Invalid value for 'input[0].id': 'a/b'. Expected 1-128 characters of "
      "[A-Za-z0-9_-].")),
    ("unknown item type", {"type": "telepathy"},
     ("invalid_value", "input[0].type", "Invalid value for 'input[0].type': 'telepathy'. Supported values are: "
      "message, function_call, function_call_output, reasoning, item_reference, mcp_approval_response, and the "
      "tool call items of the Responses API (mcp_call, ...).")),
]


@pytest.mark.parametrize(("item", "expected"), [(item, expected) for _, item, expected in BAD],
                         ids=[name for name, _, _ in BAD])
def test_bad_items_are_refused_with_the_exact_message(item: Any, expected: tuple[str, str | None, str]) -> None:
    assert reject(item) == expected


def test_two_items_with_one_id_are_refused() -> None:
    assert reject(CALL, ANSWER, {**CALL, "call_id": "call_9"}) == (
        "invalid_value", "input[2].id", "Invalid value for 'input[2].id': Duplicate item found with id 'fc_1'.")


def test_every_stored_item_but_references_validates_as_the_listing_type() -> None:
    items = stored({"role": "user", "content": [{"type": "input_image", "image_url": PNG}]}, CALL, ANSWER, *HOSTED[:4])
    adapter: TypeAdapter[Any] = TypeAdapter(ResponseItem)
    for item in items:
        assert adapter.validate_python(item).type == item["type"]
