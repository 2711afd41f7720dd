"""POST /responses body validation: good bodies parse, bad bodies give a 400 naming the exact param."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from openai.types.responses import ResponseInputMessageItem, ResponseItem, ResponseOutputMessage
from openai.types.responses.response_item_list import ResponseItemList
from pydantic import TypeAdapter, ValidationError

from resilient.ids import is_safe_id, new_message_id
from resilient.protocol.errors import ApiError
from resilient.protocol.items import validate_stored_item
from resilient.protocol.request import (
    MAX_INPUT_ITEMS,
    CreateResponseRequest,
    normalize_input_items,
    parse_create_request,
)


def body(**fields: Any) -> bytes:
    return json.dumps(fields).encode()


def reject(raw: bytes) -> ApiError:
    with pytest.raises(ApiError) as info:
        parse_create_request(raw)
    return info.value


# --------------------------------------------------------------------------- good bodies


def test_minimal_body_gets_defaults() -> None:
    req = parse_create_request(b'{"input": "hello"}')
    assert req.input == "hello"
    assert req.model is None
    assert (req.background, req.stream, req.store) == (False, False, True)
    assert req.previous_response_id is None and req.conversation is None
    assert req.metadata is None and req.stream_options is None and req.instructions is None


def test_full_body_is_kept_and_conversation_object_is_normalized() -> None:
    req = parse_create_request(
        body(
            model="gpt-test",
            input=[
                {"role": "developer", "content": "be brief"},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"}]},
                {"role": "assistant", "content": [{"type": "output_text", "text": "b", "annotations": []}]},
            ],
            instructions="sys",
            background=True,
            stream=True,
            store=True,
            conversation={"id": "conv_abc"},
            metadata={"k": "v"},
            stream_options={"include_obfuscation": False},
        )
    )
    assert req.model == "gpt-test"
    assert req.conversation == "conv_abc"
    assert req.background and req.stream and req.store
    assert req.metadata == {"k": "v"}
    assert req.stream_options is not None and req.stream_options.include_obfuscation is False
    assert isinstance(req.input, list)
    assert [(m.role, [(p.type, p.text) for p in m.content]) for m in req.input] == [
        ("developer", [("input_text", "be brief")]),
        ("user", [("input_text", "a")]),
        ("assistant", [("output_text", "b")]),
    ]


def test_conversation_string_and_previous_response_id_are_accepted() -> None:
    assert parse_create_request(body(input="x", conversation="conv_a-B_9")).conversation == "conv_a-B_9"
    assert (
        parse_create_request(body(input="x", previous_response_id="resp_abc")).previous_response_id
        == "resp_abc"
    )


def test_nulls_mean_defaults() -> None:
    req = parse_create_request(
        body(input="x", model=None, store=None, background=None, stream=None, metadata=None, tools=None)
    )
    assert (req.model, req.store, req.background, req.stream, req.metadata) == (
        None,
        True,
        False,
        False,
        None,
    )


def test_metadata_at_the_limits_is_accepted() -> None:
    metadata = {f"{i:02d}" + "k" * 62: "v" * 512 for i in range(16)}
    assert all(len(k) == 64 for k in metadata)
    assert parse_create_request(body(input="x", metadata=metadata)).metadata == metadata


def test_id_at_128_chars_is_accepted() -> None:
    rid = "resp_" + "a" * 123
    assert parse_create_request(body(input="x", previous_response_id=rid)).previous_response_id == rid


def test_direct_model_validation_enforces_the_same_rules() -> None:
    with pytest.raises(ValidationError):
        CreateResponseRequest.model_validate({"input": "x", "background": True, "store": False})
    with pytest.raises(ValidationError):
        CreateResponseRequest.model_validate({"input": "x", "background": "true"})


# --------------------------------------------------------------------------- bad bodies

LONG = "a" * 200

BAD_BODIES: list[tuple[str, bytes, str, str | None]] = [
    # (case, raw body, code, param)
    ("bad json", b'{"input": ', "invalid_json", None),
    ("empty body", b"", "invalid_json", None),
    ("json array body", b'[{"input": "x"}]', "invalid_json", None),
    ("json string body", b'"hello"', "invalid_json", None),
    ("json null body", b"null", "invalid_json", None),
    ("invalid utf-8", b'{"input": "\xff\xfe"}', "invalid_json", None),
    ("absurd nesting", b"[" * 200_000, "invalid_json", None),
    ("unknown field", body(input="x", foo=1), "unknown_parameter", "foo"),
    ("unknown field wins over bad type", body(input=5, zzz=1), "unknown_parameter", "zzz"),
    ("unknown null field", body(input="x", foo=None), "unknown_parameter", "foo"),
    (
        "unknown huge key is truncated",
        body(input="x", **{"k" * 500: 1}),
        "unknown_parameter",
        "k" * 64 + "...",
    ),
    (
        "unknown stream option",
        body(input="x", stream_options={"x": 1}),
        "unknown_parameter",
        "stream_options.x",
    ),
    ("missing input", body(model="m"), "missing_required_parameter", "input"),
    ("null input", body(input=None), "invalid_type", "input"),
    ("number input", body(input=5), "invalid_type", "input"),
    ("object input", body(input={"role": "user"}), "invalid_type", "input"),
    ("empty string input", body(input=""), "invalid_value", "input"),
    ("empty list input", body(input=[]), "invalid_value", "input"),
    ("string bool", body(input="x", background="true"), "invalid_type", "background"),
    ("int bool", body(input="x", store=1), "invalid_type", "store"),
    ("stream wrong type", body(input="x", stream="yes"), "invalid_type", "stream"),
    ("model number", body(input="x", model=5), "invalid_type", "model"),
    ("model empty", body(input="x", model=""), "invalid_value", "model"),
    ("model too long", body(input="x", model="m" * 300), "invalid_value", "model"),
    ("instructions list", body(input="x", instructions=["x"]), "invalid_type", "instructions"),
    (
        "stream option wrong type",
        body(input="x", stream_options={"include_obfuscation": "no"}),
        "invalid_type",
        "stream_options.include_obfuscation",
    ),
    ("stream options not object", body(input="x", stream_options=True), "invalid_type", "stream_options"),
    ("metadata not object", body(input="x", metadata="x"), "invalid_type", "metadata"),
    ("metadata value not string", body(input="x", metadata={"a": 1}), "invalid_type", "metadata.a"),
    (
        "metadata too many pairs",
        body(input="x", metadata={str(i): "v" for i in range(17)}),
        "invalid_value",
        "metadata",
    ),
    ("metadata key too long", body(input="x", metadata={"k" * 65: "v"}), "invalid_value", "metadata"),
    ("metadata value too long", body(input="x", metadata={"k": "v" * 513}), "invalid_value", "metadata.k"),
    (
        "background without store",
        body(input="x", background=True, store=False),
        "unsupported_parameter",
        "background",
    ),
    (
        "previous_response_id with conversation",
        body(input="x", previous_response_id="resp_a", conversation="conv_b"),
        "mutually_exclusive_parameters",
        "previous_response_id",
    ),
    (
        "previous id traversal",
        body(input="x", previous_response_id="../x"),
        "invalid_value",
        "previous_response_id",
    ),
    (
        "previous id quote",
        body(input="x", previous_response_id="resp_a'b"),
        "invalid_value",
        "previous_response_id",
    ),
    (
        "previous id 200 chars",
        body(input="x", previous_response_id="resp_" + LONG),
        "invalid_value",
        "previous_response_id",
    ),
    (
        "previous id wrong prefix",
        body(input="x", previous_response_id="conv_a"),
        "invalid_value",
        "previous_response_id",
    ),
    ("previous id empty", body(input="x", previous_response_id=""), "invalid_value", "previous_response_id"),
    (
        "previous id hash",
        body(input="x", previous_response_id="resp_a#b"),
        "invalid_value",
        "previous_response_id",
    ),
    ("previous id number", body(input="x", previous_response_id=5), "invalid_type", "previous_response_id"),
    ("conversation traversal", body(input="x", conversation="../x"), "invalid_value", "conversation"),
    ("conversation quote", body(input="x", conversation="conv_a'b"), "invalid_value", "conversation"),
    ("conversation 200 chars", body(input="x", conversation="conv_" + LONG), "invalid_value", "conversation"),
    (
        "conversation wrong prefix",
        body(input="x", conversation={"id": "resp_x"}),
        "invalid_value",
        "conversation.id",
    ),
    ("conversation id number", body(input="x", conversation={"id": 5}), "invalid_type", "conversation.id"),
    (
        "conversation unknown key",
        body(input="x", conversation={"idx": "conv_a"}),
        "unknown_parameter",
        "conversation.idx",
    ),
    (
        "conversation empty object",
        body(input="x", conversation={}),
        "missing_required_parameter",
        "conversation.id",
    ),
    ("conversation number", body(input="x", conversation=5), "invalid_type", "conversation"),
    (
        "tool of another type",
        body(input="x", tools=[{"type": "web_search"}]),
        "unsupported_value",
        "tools[0].type",
    ),
    ("tools not a list", body(input="x", tools="x"), "invalid_type", "tools"),
    ("item not object", body(input=[5]), "invalid_type", "input[0]"),
    (
        "second item bad role",
        body(input=[{"role": "user", "content": "a"}, {"role": "robot", "content": "b"}]),
        "invalid_value",
        "input[1].role",
    ),
    ("role not string", body(input=[{"role": 1, "content": "a"}]), "invalid_type", "input[0].role"),
    ("missing role", body(input=[{"content": "a"}]), "missing_required_parameter", "input[0].role"),
    ("missing content", body(input=[{"role": "user"}]), "missing_required_parameter", "input[0].content"),
    ("content number", body(input=[{"role": "user", "content": 5}]), "invalid_type", "input[0].content"),
    (
        "content empty list",
        body(input=[{"role": "user", "content": []}]),
        "invalid_value",
        "input[0].content",
    ),
    (
        "unsupported item type",
        body(input=[{"type": "web_search", "id": "ws_1"}]),
        "invalid_value",
        "input[0].type",
    ),
    (
        "approval answer without a previous turn",
        body(input=[{"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": True}]),
        "invalid_value",
        "input[0].approval_request_id",
    ),
    (
        "unknown item key",
        body(input=[{"role": "user", "content": "x", "name": "bob"}]),
        "unknown_parameter",
        "input[0].name",
    ),
    (
        "bad item status",
        body(input=[{"role": "user", "content": "x", "status": "done"}]),
        "invalid_value",
        "input[0].status",
    ),
    (
        "part not object",
        body(input=[{"role": "user", "content": ["x"]}]),
        "invalid_type",
        "input[0].content[0]",
    ),
    (
        "image part in assistant history",
        body(input=[{"role": "assistant", "content": [{"type": "input_image", "image_url": "http://x"}]}]),
        "invalid_value",
        "input[0].content[0].type",
    ),
    (
        "assistant with input_text",
        body(input=[{"role": "assistant", "content": [{"type": "input_text", "text": "x"}]}]),
        "invalid_value",
        "input[0].content[0].type",
    ),
    (
        "user with output_text",
        body(input=[{"role": "user", "content": [{"type": "output_text", "text": "x", "annotations": []}]}]),
        "invalid_value",
        "input[0].content[0].type",
    ),
    (
        "part missing type",
        body(input=[{"role": "user", "content": [{"text": "x"}]}]),
        "missing_required_parameter",
        "input[0].content[0].type",
    ),
    (
        "second part text not string",
        body(
            input=[
                {
                    "role": "user",
                    "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": 5}],
                }
            ]
        ),
        "invalid_type",
        "input[0].content[1].text",
    ),
    (
        "part missing text",
        body(input=[{"role": "user", "content": [{"type": "input_text"}]}]),
        "missing_required_parameter",
        "input[0].content[0].text",
    ),
    (
        "part unknown key",
        body(input=[{"role": "user", "content": [{"type": "input_text", "text": "x", "bogus": 1}]}]),
        "unknown_parameter",
        "input[0].content[0].bogus",
    ),
    (
        "ignored annotations still an array",
        body(input=[{"role": "assistant", "content": [{"type": "output_text", "text": "x", "annotations": {}}]}]),
        "invalid_type",
        "input[0].content[0].annotations",
    ),
    (
        "ignored logprobs not null",
        body(input=[{"role": "assistant", "content": [{"type": "output_text", "text": "x", "logprobs": None}]}]),
        "invalid_type",
        "input[0].content[0].logprobs",
    ),
    (
        "cache breakpoint without mode",
        body(input=[{"role": "user", "content": [{"type": "input_text", "text": "x", "prompt_cache_breakpoint": {}}]}]),
        "missing_required_parameter",
        "input[0].content[0].prompt_cache_breakpoint.mode",
    ),
    (
        "cache breakpoint bad ttl",
        body(input=[{"role": "user", "content": [{"type": "input_text", "text": "x", "prompt_cache_breakpoint": {
            "mode": "explicit", "ttl": "1h"}}]}]),
        "invalid_value",
        "input[0].content[0].prompt_cache_breakpoint.ttl",
    ),
    (
        "cache breakpoint unknown key",
        body(input=[{"role": "user", "content": [{"type": "input_text", "text": "x", "prompt_cache_breakpoint": {
            "mode": "explicit", "x": 1}}]}]),
        "unknown_parameter",
        "input[0].content[0].prompt_cache_breakpoint.x",
    ),
]


def test_ignored_part_fields_of_the_right_type_are_accepted() -> None:
    request = parse_create_request(body(input=[
        {"role": "user", "content": [{"type": "input_text", "text": "q", "prompt_cache_breakpoint": {
            "mode": "explicit", "ttl": "12h"}}]},
        {"role": "assistant", "content": [{"type": "output_text", "text": "a", "annotations": [], "logprobs": []}]},
    ]))
    assert isinstance(request.input, list) and [m.content[0].text for m in request.input] == ["q", "a"]


@pytest.mark.parametrize(
    ("raw", "code", "param"), [case[1:] for case in BAD_BODIES], ids=[c[0] for c in BAD_BODIES]
)
def test_bad_body_is_a_400_naming_the_param(raw: bytes, code: str, param: str | None) -> None:
    error = reject(raw)
    assert (error.status, error.type, error.code, error.param) == (400, "invalid_request_error", code, param)
    assert error.body() == {
        "error": {"message": error.message, "type": "invalid_request_error", "code": code, "param": param}
    }
    assert error.headers() == {"x-should-retry": "false"}
    assert error.message
    assert len(error.message) < 400, "messages must not echo large client input"


def test_hostile_id_is_not_echoed_in_full() -> None:
    error = reject(body(input="x", previous_response_id="resp_" + "z" * 5000))
    assert "z" * 100 not in error.message


# --------------------------------------------------------------------------- normalized input items


def _counter() -> Any:
    numbers = itertools.count(1)
    return lambda: f"msg_{next(numbers)}"


def test_string_input_becomes_one_user_message() -> None:
    items = normalize_input_items(parse_create_request(body(input="hi")), _counter())
    assert items == [
        {
            "id": "msg_1",
            "type": "message",
            "role": "user",
            "status": "completed",
            "content": [{"type": "input_text", "text": "hi"}],
        }
    ]


def test_list_input_items_validate_as_the_listing_types() -> None:
    req = parse_create_request(
        body(
            input=[
                {"role": "system", "content": "s"},
                {
                    "role": "user",
                    "content": [{"type": "input_text", "text": "u1"}, {"type": "input_text", "text": "u2"}],
                },
                {"role": "assistant", "content": "a"},
                {
                    "type": "message",
                    "role": "developer",
                    "content": "d",
                    "id": "whatever",
                    "status": "completed",
                },
            ]
        )
    )
    items = normalize_input_items(req, _counter())
    assert [item["id"] for item in items] == ["msg_1", "msg_2", "msg_3", "whatever"]  # a sent id is kept
    adapter: TypeAdapter[Any] = TypeAdapter(ResponseItem)
    classes = [type(adapter.validate_python(item)) for item in items]
    assert classes == [
        ResponseInputMessageItem,
        ResponseInputMessageItem,
        ResponseOutputMessage,
        ResponseInputMessageItem,
    ]
    for item in items:
        validate_stored_item(item)  # strict: no key is an unknown extra
        assert adapter.validate_python(item).model_dump(exclude_unset=True) == item
    assert items[1]["content"] == [{"type": "input_text", "text": "u1"}, {"type": "input_text", "text": "u2"}]
    assert items[2]["content"] == [{"type": "output_text", "text": "a", "annotations": [], "logprobs": []}]
    listing = ResponseItemList.model_validate(
        {
            "object": "list",
            "data": items,
            "first_id": items[0]["id"],
            "last_id": items[-1]["id"],
            "has_more": False,
        }
    )
    assert [item.id for item in listing.data] == ["msg_1", "msg_2", "msg_3", "whatever"]


def test_real_message_ids_are_fresh_and_safe() -> None:
    req = parse_create_request(
        body(input=[{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    )
    ids = [item["id"] for item in normalize_input_items(req, new_message_id)]
    assert len(set(ids)) == 2
    assert all(i.startswith("msg_") and is_safe_id(i) for i in ids)


# --------------------------------------------------------------------------- bounded input


def test_input_item_count_is_bounded_and_refused_before_items_are_parsed() -> None:
    message = {"role": "user", "content": "w"}
    assert len(parse_create_request(body(input=[message] * MAX_INPUT_ITEMS)).items()) == MAX_INPUT_ITEMS
    error = reject(body(input=[message] * (MAX_INPUT_ITEMS + 1)))
    assert (error.status, error.code, error.param) == (400, "invalid_value", "input")
    # Items past the bound are not even looked at: the count is refused, not the malformed item.
    error = reject(body(input=[message] * MAX_INPUT_ITEMS + [{"type": "nonsense"}] * 20_000))
    assert (error.code, error.param) == ("invalid_value", "input") and "22048" in error.message


@pytest.mark.parametrize(("raw", "param"), [
    (body(input="x", metadata={"message": 1}), "metadata.message"),
    (body(input=[{"role": "user", "content": "x", "message": 1}]), "input[0].message"),
    (body(input=[{"role": "user", "content": [{"type": "input_text", "text": "x", "input_text": 1}]}]),
     "input[0].content[0].input_text"),
    (body(input="x", conversation={"id": "conv_a", "object": 1}), "conversation.object"),
    (body(input="x", tools=[{"type": "function", "name": "f", "function": 1}]), "tools[0].function"),
    (body(input="x", tools=[{"type": "function", "name": "f"}], tool_choice={"type": "function", "name": "f",
                                                                              "mode": 1}), "tool_choice.mode"),
])
def test_a_client_key_named_like_a_union_member_stays_in_the_param(raw: bytes, param: str) -> None:
    """pydantic puts the chosen union member's tag into an error's location; only that tag is dropped
    from the param, never a key the client wrote."""
    assert reject(raw).param == param
