"""Every create parameter the ``openai`` client can send: accepted, validated, stored under its OpenAI
name and echoed on the response object, which carries every field Open Responses' ``ResponseResource``
requires and still validates strictly as the client's ``Response``."""

from __future__ import annotations

import json
import typing
from typing import Any

import pytest
from openai.types.responses.response_create_params import ResponseCreateParamsBase

from resilient.engine.chain.snapshot import response_object
from resilient.protocol.create_params import CreateParams
from resilient.protocol.errors import ApiError
from resilient.protocol.request import CreateResponseRequest, parse_create_request
from resilient.protocol.response import validate_response
from resilient.protocol.response_params import MODEL_PARAM_NAMES
from resilient.storage.ports import ResponseRecord

# schema/components/schemas/ResponseResource.json of github.com/openresponses/openresponses, "required".
OPEN_RESPONSES_REQUIRED = (
    "id", "object", "created_at", "completed_at", "status", "incomplete_details", "model", "previous_response_id",
    "instructions", "output", "error", "tools", "tool_choice", "truncation", "parallel_tool_calls", "text", "top_p",
    "presence_penalty", "frequency_penalty", "top_logprobs", "temperature", "reasoning", "user", "usage",
    "max_output_tokens", "max_tool_calls", "store", "background", "service_tier", "metadata", "safety_identifier",
    "prompt_cache_key",
)

EVERY_PARAM: dict[str, Any] = {
    "temperature": 0.7, "top_p": 0.5, "presence_penalty": 1.5, "frequency_penalty": -1, "top_logprobs": 20,
    "max_output_tokens": 16, "max_tool_calls": 0, "parallel_tool_calls": False, "truncation": "auto",
    "service_tier": "priority", "user": "user-1", "safety_identifier": "hash-1", "prompt_cache_key": "key-1",
    "prompt_cache_retention": "24h", "include": ["reasoning.encrypted_content", "message.output_text.logprobs"],
    "reasoning": {"effort": "high", "summary": "detailed"},
    "text": {"format": {"type": "json_schema", "name": "answer", "schema": {"type": "object"}, "strict": True},
             "verbosity": "medium"},
    "prompt": {"id": "pmpt_1", "version": "2", "variables": {"city": "Paris"}},
    "context_management": [{"type": "compaction", "compact_threshold": 1000}],
    "access_programs": {"cyber": "standard"}, "background_options": {"completion_window": "2h"},
    "image": {"context_compression": "auto"}, "moderation": {"model": "omni-moderation-latest"},
    "prompt_cache_options": {"mode": "explicit", "ttl": "30m"},
}


def parse(**fields: Any) -> CreateResponseRequest:
    return parse_create_request(json.dumps({"input": "x", **fields}).encode())


def test_the_echo_names_are_the_request_models_fields() -> None:
    assert set(MODEL_PARAM_NAMES) == set(CreateParams.model_fields)
    assert set(EVERY_PARAM) == set(MODEL_PARAM_NAMES)


def test_every_parameter_of_the_clients_create_params_is_a_field() -> None:
    sent = set(typing.get_type_hints(ResponseCreateParamsBase)) | {"stream"}
    assert sent <= set(CreateResponseRequest.model_fields)


def test_every_parameter_is_accepted_stored_and_echoed() -> None:
    request = parse(**EVERY_PARAM)
    assert request.model_params() == EVERY_PARAM
    record = ResponseRecord("resp_1", "completed", {"created_at": 1, "model": "m", **request.model_params()}, "")
    response = response_object(record, [])
    not_fields = {"include", "context_management", "background_options", "image", "moderation"}
    for name in set(EVERY_PARAM) - not_fields:
        assert response[name] == EVERY_PARAM[name], name
    assert not_fields.isdisjoint(response)
    validate_response(response)


def test_a_response_without_parameters_reports_the_defaults_and_every_required_field() -> None:
    response = response_object(ResponseRecord("resp_1", "queued", {"created_at": 1}, ""), [])
    assert set(OPEN_RESPONSES_REQUIRED) <= set(response)
    assert (response["presence_penalty"], response["frequency_penalty"], response["temperature"],
            response["top_p"], response["top_logprobs"], response["service_tier"]) == (0.0, 0.0, 1.0, 1.0, 0, "default")
    validate_response(response)


def test_null_means_not_sent() -> None:
    assert parse(temperature=None, reasoning=None, include=None).model_params() == {}


BAD: list[tuple[dict[str, Any], tuple[str, str, str]]] = [
    ({"presence_penalty": 2.5}, ("invalid_value", "presence_penalty",
                                 "Invalid value for 'presence_penalty': expected a value <= 2, but got 2.5 instead.")),
    ({"frequency_penalty": -3}, ("invalid_value", "frequency_penalty",
                                 "Invalid value for 'frequency_penalty': expected a value >= -2, but got -3 instead.")),
    ({"temperature": 2.01}, ("invalid_value", "temperature",
                             "Invalid value for 'temperature': expected a value <= 2, but got 2.01 instead.")),
    ({"temperature": "1"}, ("invalid_type", "temperature",
                            "Invalid type for 'temperature': expected a number, but got a string instead.")),
    ({"top_p": 1.5}, ("invalid_value", "top_p",
                      "Invalid value for 'top_p': expected a value <= 1, but got 1.5 instead.")),
    ({"top_logprobs": 21}, ("invalid_value", "top_logprobs",
                            "Invalid value for 'top_logprobs': expected a value <= 20, but got 21 instead.")),
    ({"top_logprobs": 1.5}, ("invalid_type", "top_logprobs",
                             "Invalid type for 'top_logprobs': expected an integer, but got a number instead.")),
    ({"max_output_tokens": 15}, ("invalid_value", "max_output_tokens",
                                 "Invalid value for 'max_output_tokens': expected a value >= 16, but got 15 instead.")),
    ({"max_tool_calls": -1}, ("invalid_value", "max_tool_calls",
                              "Invalid value for 'max_tool_calls': expected a value >= 0, but got -1 instead.")),
    ({"parallel_tool_calls": "yes"}, ("invalid_type", "parallel_tool_calls",
                                      "Invalid type for 'parallel_tool_calls': expected a boolean, but got a string "
                                      "instead.")),
    ({"truncation": "middle"}, ("invalid_value", "truncation",
                                "Invalid value for 'truncation': 'middle'. Supported values are: auto, disabled.")),
    ({"service_tier": "gold"}, ("invalid_value", "service_tier", "Invalid value for 'service_tier': 'gold'. Supported "
                                "values are: auto, default, flex, scale, priority, fast, ultrafast.")),
    ({"safety_identifier": "s" * 65}, ("invalid_value", "safety_identifier",
                                       "Invalid value for 'safety_identifier': String should have at most 64 "
                                       "characters.")),
    ({"include": ["everything"]}, ("invalid_value", "include[0]", "Invalid value for 'include[0]': 'everything'. "
                                   "Supported values are: file_search_call.results, web_search_call.results, "
                                   "web_search_call.action.sources, message.input_image.image_url, "
                                   "computer_call_output.output.image_url, code_interpreter_call.outputs, "
                                   "reasoning.encrypted_content, message.output_text.logprobs.")),
    ({"reasoning": {"effort": "huge"}}, ("invalid_value", "reasoning.effort", "Invalid value for 'reasoning.effort': "
                                         "Input should be 'none', 'minimal', 'low', 'medium', 'high', 'xhigh' or "
                                         "'max'.")),
    ({"reasoning": {"effort": "low", "budget": 3}}, ("unknown_parameter", "reasoning.budget",
                                                     "Unknown parameter: 'reasoning.budget'.")),
    ({"text": {"format": {"type": "json_schema", "schema": {}}}},
     ("missing_required_parameter", "text.format.name", "Missing required parameter: 'text.format.name'.")),
    ({"prompt": {"version": "1"}}, ("missing_required_parameter", "prompt.id",
                                    "Missing required parameter: 'prompt.id'.")),
    ({"context_management": [{"type": "compaction", "compact_threshold": "big"}]},
     ("invalid_type", "context_management[0].compact_threshold", "Invalid type for "
      "'context_management[0].compact_threshold': expected an integer, but got a string instead.")),
    ({"stream_options": {"include_usage": True}}, ("unknown_parameter", "stream_options.include_usage",
                                                   "Unknown parameter: 'stream_options.include_usage'.")),
    ({"logit_bias": {}}, ("unknown_parameter", "logit_bias", "Unknown parameter: 'logit_bias'.")),
]


@pytest.mark.parametrize(("fields", "expected"), BAD, ids=[next(iter(f)) + str(i) for i, (f, _) in enumerate(BAD)])
def test_bad_values_are_refused_with_the_exact_message(fields: dict[str, Any], expected: tuple[str, str, str]) -> None:
    with pytest.raises(ApiError) as info:
        parse(**fields)
    assert info.value.status == 400
    assert (info.value.code, info.value.param, info.value.message) == expected
