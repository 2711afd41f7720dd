"""Error bodies and retry headers, checked against what the ``openai`` client does with them."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx2
import openai
import pytest

from resilient.protocol.errors import (
    ApiError,
    conflict,
    invalid_request,
    not_found,
    payload_too_large,
    service_unavailable,
)


def test_invalid_request() -> None:
    error = invalid_request("Bad thing.", param="input[0].role", code="invalid_value")
    assert (error.status, error.retryable, error.retry_after) == (400, False, None)
    assert error.body() == {
        "error": {
            "message": "Bad thing.",
            "type": "invalid_request_error",
            "code": "invalid_value",
            "param": "input[0].role",
        }
    }
    assert error.headers() == {"x-should-retry": "false"}
    assert isinstance(error, Exception) and str(error) == "Bad thing."


def test_body_always_has_all_four_keys() -> None:
    assert invalid_request("m", code="invalid_value").body() == {
        "error": {"message": "m", "type": "invalid_request_error", "code": "invalid_value", "param": None}
    }


def test_every_error_names_a_code() -> None:
    """A 4xx without a code tells a client nothing it can branch on: the constructor requires one."""
    with pytest.raises(TypeError):
        invalid_request("m")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        ApiError(400, "invalid_request_error", "m")  # type: ignore[call-arg]


def test_not_found_does_not_echo_hostile_ids_in_full() -> None:
    error = not_found("Response", "resp_" + "x" * 10_000 + "\n\x00")
    assert (error.status, error.type, error.code, error.param) == (
        404,
        "invalid_request_error",
        "not_found",
        None,
    )
    assert error.message.startswith("Response with id 'resp_xxx")
    assert len(error.message) < 120 and "\x00" not in error.message
    assert error.headers() == {"x-should-retry": "false"}


@pytest.mark.parametrize("code", ["conversation_locked", "conversation_fork_not_supported"])
def test_conflict(code: str) -> None:
    error = conflict(code, "busy")
    assert (error.status, error.code, error.type) == (409, code, "invalid_request_error")
    assert error.headers() == {"x-should-retry": "false"}


def test_service_unavailable_is_retryable_with_retry_after() -> None:
    error = service_unavailable(retry_after=5)
    assert (error.status, error.type, error.retryable) == (503, "server_error", True)
    assert error.headers() == {"Retry-After": "5"}
    assert service_unavailable().headers() == {"Retry-After": "2"}


def test_payload_too_large() -> None:
    error = payload_too_large(1_000_000)
    assert (error.status, error.code) == (413, "payload_too_large")
    assert "1000000" in error.message
    assert error.headers() == {"x-should-retry": "false"}


# --------------------------------------------------------------------------- through the real client


def client_for(respond: Callable[[httpx2.Request], httpx2.Response], max_retries: int) -> openai.OpenAI:
    transport = httpx2.MockTransport(respond)
    return openai.OpenAI(
        api_key="unused",
        base_url="http://test",
        http_client=httpx2.Client(transport=transport),
        max_retries=max_retries,
        _strict_response_validation=True,
    )


def serve(error: ApiError, calls: list[Any], extra_headers: dict[str, str] | None = None) -> Any:
    def respond(request: httpx2.Request) -> httpx2.Response:
        calls.append(request)
        headers = {**error.headers(), **(extra_headers or {})}
        return httpx2.Response(error.status, headers=headers, content=json.dumps(error.body()).encode())

    return respond


def test_client_exposes_code_param_and_type() -> None:
    calls: list[Any] = []
    error = invalid_request("Unknown parameter: 'foo'.", param="foo", code="unknown_parameter")
    with pytest.raises(openai.BadRequestError) as info:
        client_for(serve(error, calls), max_retries=2).responses.create(model="m", input="x")
    assert (info.value.code, info.value.param, info.value.type) == (
        "unknown_parameter",
        "foo",
        "invalid_request_error",
    )
    assert len(calls) == 1


def test_409_with_should_retry_false_is_not_retried_but_is_without_it() -> None:
    calls: list[Any] = []
    locked = conflict("conversation_locked", "busy")
    with pytest.raises(openai.ConflictError) as info:
        client_for(serve(locked, calls), max_retries=2).responses.retrieve("resp_1")
    assert info.value.code == "conversation_locked"
    assert len(calls) == 1
    # control: the same 409 without our header is retried by the client (fast, via retry-after-ms)
    calls.clear()
    bare = ApiError(409, "invalid_request_error", "busy", code="conversation_locked", retryable=True)
    with pytest.raises(openai.ConflictError):
        client_for(serve(bare, calls, {"retry-after-ms": "1"}), max_retries=2).responses.retrieve("resp_1")
    assert len(calls) == 3


def test_404_maps_to_not_found_error() -> None:
    calls: list[Any] = []
    with pytest.raises(openai.NotFoundError) as info:
        client_for(serve(not_found("Response", "resp_1"), calls), max_retries=2).responses.retrieve("resp_1")
    assert info.value.code == "not_found"
    assert len(calls) == 1


def test_503_is_retried_by_the_client() -> None:
    calls: list[Any] = []
    error = service_unavailable(retry_after=2)
    with pytest.raises(openai.InternalServerError):
        client_for(serve(error, calls, {"retry-after-ms": "1"}), max_retries=1).responses.retrieve("resp_1")
    assert len(calls) == 2
