"""Every error case of the contract, over real HTTP: status, the OpenAI error shape, the param, and
``x-should-retry: false`` on 4xx that a retry cannot fix."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from tests.scenario.conftest import knobs, wait_until

pytestmark = pytest.mark.azurite


def _error(answer: httpx.Response, status: int, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"message", "type", "code", "param"} and error["message"]
    if param is not None:
        assert error["param"] == param
    if code is not None:
        assert error["code"] == code
    if 400 <= status < 500:
        assert answer.headers.get("x-should-retry") == "false"
    return dict(error)


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        (b"{not json", None, "invalid_json"),
        (b"[1, 2]", None, None),
        (json.dumps({"model": "m"}).encode(), "input", None),
        (json.dumps({"model": "m", "input": "x", "frobnicate": 1}).encode(), "frobnicate", "unknown_parameter"),
        (json.dumps({"model": "m", "input": 42}).encode(), "input", None),
        (json.dumps({"model": "m", "input": "x", "background": True, "store": False}).encode(), "background",
         "unsupported_parameter"),
        (json.dumps({"model": "m", "input": "x", "previous_response_id": "../etc"}).encode(),
         "previous_response_id", None),
        (json.dumps({"model": "m", "input": "x", "conversation": "conv_a'b"}).encode(), "conversation", None),
        (json.dumps({"model": "m", "input": "x", "metadata": {f"k{i}": "v" for i in range(17)}}).encode(),
         "metadata", None),
        (json.dumps({"model": "m", "input": [{"role": "robot", "content": "x"}]}).encode(), "input[0].role", None),
    ],
)
def test_bad_create_bodies_are_400_naming_the_param(http: httpx.Client, body: bytes, param: str | None,
                                                    code: str | None) -> None:
    answer = http.post("/responses", content=body, headers={"content-type": "application/json"})
    error = _error(answer, 400, param, code)
    assert error["type"] == "invalid_request_error"


def test_oversized_body_is_413(http: httpx.Client) -> None:
    huge = json.dumps({"model": "m", "input": "x" * (3 * 1024 * 1024)}).encode()
    _error(http.post("/responses", content=huge), 413)


def test_path_traversal_ids_never_match_a_route(http: httpx.Client) -> None:
    # %2F decodes to "/" before routing: no function matches, the host answers 404 itself.
    for answer in (http.get("/responses/resp_..%2F..%2Fx"), http.delete("/responses/..%2Fx"),
                   http.post("/responses/resp_..%2Fx/cancel")):
        assert answer.status_code == 404


@pytest.mark.parametrize("rid", ["resp_doesnotexist", "notaresponse", "resp_" + "a" * 200, "resp_a'b", "resp_a%20b",
                                 "resp_%C3%A9t%C3%A9"])
def test_unknown_or_hostile_ids_are_404(http: httpx.Client, rid: str) -> None:
    for answer in (http.get(f"/responses/{rid}"), http.delete(f"/responses/{rid}"),
                   http.post(f"/responses/{rid}/cancel"), http.get(f"/responses/{rid}/input_items"),
                   http.get(f"/responses/{rid}", params={"stream": "true"})):
        _error(answer, 404, code="not_found")


def test_unknown_previous_response_is_400_as_openai_answers(http: httpx.Client, client: OpenAI) -> None:
    answer = http.post("/responses", json={"model": "m", "input": "x", "previous_response_id": "resp_nope"})
    _error(answer, 400, "previous_response_id", "previous_response_not_found")
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model="m", input="x", previous_response_id="resp_nope")
    assert info.value.body["message"] == "Previous response with id 'resp_nope' not found."  # type: ignore[index]


def test_bad_stream_and_paging_parameters(http: httpx.Client, client: OpenAI) -> None:
    done = client.responses.create(model="m", input="x", background=True, metadata=knobs(phases=1, words=2))
    wait_until(lambda: client.responses.retrieve(done.id).status == "completed")
    _error(http.get(f"/responses/{done.id}", params={"stream": "true", "starting_after": "abc"}), 400,
           "starting_after")
    _error(http.get(f"/responses/{done.id}", params={"stream": "true", "starting_after": "-7"}), 400,
           "starting_after")
    _error(http.get(f"/responses/{done.id}/input_items", params={"limit": "0"}), 400, "limit")
    _error(http.get(f"/responses/{done.id}/input_items", params={"limit": "101"}), 400, "limit")
    _error(http.get(f"/responses/{done.id}/input_items", params={"order": "sideways"}), 400, "order")
    _error(http.get(f"/responses/{done.id}/input_items", params={"after": "msg_unknown"}), 404, "after", "not_found")
    _error(http.get(f"/responses/{done.id}/input_items", params={"after": "../x"}), 400, "after")
    # past the end is not an error: the replay is just empty up to the terminal event
    tail = http.get(f"/responses/{done.id}", params={"stream": "true", "starting_after": "100000"}, timeout=5)
    assert tail.status_code == 200


def test_include_obfuscation_is_accepted_and_ignored(client: OpenAI) -> None:
    done = client.responses.create(model="m", input="x", background=True, metadata=knobs(phases=1, words=2))
    events = list(client.responses.retrieve(done.id, stream=True, starting_after=-1, include_obfuscation=False))
    assert events[0].type == "response.created"


def test_client_raises_typed_errors(client: OpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve("resp_missing")
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model="m", input="x", background=True, store=False)
    assert info.value.body["code"] == "unsupported_parameter"  # type: ignore[index]


def test_crash_endpoint_is_off_by_default() -> None:
    from resilient.settings import Settings

    assert Settings.from_env({}).enable_crash_endpoint is False
