"""The OpenAI-compatible surface: ``/v1`` routes, ``x-request-id``, ``GET /health`` and ``GET /``, driven
through the unmodified function_app.py under the host double (docs/CONTRACT.md, "Routes")."""

from __future__ import annotations

import os
import re
import secrets
from pathlib import Path

import httpx
import openai
import pytest
from openai import OpenAI

from tests.hostdouble.api import HostDouble
from tests.scenario.conftest import knobs, wait_until

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def v1(double: HostDouble) -> OpenAI:
    """The client as users configure it for the OpenAI API: ``base_url`` ending in ``/v1``."""
    return OpenAI(base_url=f"{double.base_url}/v1", api_key="local", max_retries=0,
                  _strict_response_validation=True, timeout=60.0)


def test_every_operation_works_under_v1(v1: OpenAI) -> None:
    created = v1.responses.create(model="m", input="via v1", background=True, metadata=knobs(phases=1, words=3))
    done = wait_until(lambda: (r := v1.responses.retrieve(created.id)).status == "completed" and r)
    assert done.output_text
    events = list(v1.responses.retrieve(created.id, stream=True, starting_after=-1))
    assert events[-1].type == "response.completed"
    assert [item.id for item in v1.responses.input_items.list(created.id)]
    with pytest.raises(openai.ConflictError):  # finished: the same refusal as without /v1
        v1.responses.cancel(created.id)
    with v1.responses.stream(model="m", input="streamed via v1", metadata=knobs(phases=1, words=2)) as stream:
        final = stream.get_final_response()
    assert final.status == "completed"
    v1.responses.delete(created.id)  # the client returns None for a 200
    with pytest.raises(openai.NotFoundError):
        v1.responses.retrieve(created.id)


def test_unknown_paths_under_v1_are_the_openai_404(http: httpx.Client) -> None:
    for method, path in (("GET", "/v1/models"), ("POST", "/v1/responses/resp_x/unknown"),
                         ("DELETE", "/v1/responses"), ("GET", "/v1/")):
        answer = http.request(method, path)
        assert answer.status_code == 404, (method, path, answer.text)
        assert answer.json()["error"]["code"] == "not_found"
        assert answer.headers["x-should-retry"] == "false"


def test_every_answer_carries_a_request_id(http: httpx.Client, client: OpenAI) -> None:
    minted = http.post("/responses", json={"model": "m", "input": "x", "background": True,
                                           "metadata": knobs(phases=1, words=1)})
    assert re.fullmatch(r"req_[0-9a-f]{32}", minted.headers["x-request-id"])
    echoed = http.get(f"/responses/{minted.json()['id']}", headers={"x-request-id": "gateway-7f3a.1"})
    assert echoed.headers["x-request-id"] == "gateway-7f3a.1"
    hostile = http.get("/responses/resp_nothing", headers={"x-request-id": "a b<script>" + "x" * 300})
    assert hostile.status_code == 404 and re.fullmatch(r"req_[0-9a-f]{32}", hostile.headers["x-request-id"])
    stream = http.get(f"/responses/{minted.json()['id']}", params={"stream": "true", "starting_after": "-1"})
    assert re.fullmatch(r"req_[0-9a-f]{32}", stream.headers["x-request-id"])
    raw = client.responses.with_raw_response.retrieve(minted.json()["id"])
    assert raw.headers["x-request-id"].startswith("req_")  # what the openai client reports as request_id
    assert re.fullmatch(r"req_[0-9a-f]{32}", http.get("/health").headers["x-request-id"])


def test_health_is_anonymous_and_reports_each_check(http: httpx.Client) -> None:
    answer = http.get("/health")
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"status": "ok", "checks": {"settings": {"status": "ok"}, "storage": {"status": "ok"}}}


def test_the_root_points_to_the_api(http: httpx.Client) -> None:
    answer = http.get("/")
    assert answer.status_code == 200
    body = answer.json()
    assert body["object"] == "service" and body["endpoints"]["responses"] == "/v1/responses"
    unknown = http.get("/nothing-here")
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "not_found"


def test_an_invalid_setting_is_one_start_up_line_a_503_health_and_a_500_in_the_openai_shape() -> None:
    env = {
        "AzureWebJobsStorage": os.environ.get("AzureWebJobsStorage", "UseDevelopmentStorage=true"),
        "RESILIENT_STORAGE_PREFIX": "v" + secrets.token_hex(4),
        "RESILIENT_APPEND_WINDOW_MS": "99999",  # out of range
    }
    with HostDouble(ROOT, env=env, settings=None) as double, httpx.Client(base_url=double.base_url,
                                                                          timeout=30) as http:
        lines = [line for line in double.log().splitlines() if "invalid app settings" in line]
        assert len(lines) == 1 and "RESILIENT_APPEND_WINDOW_MS" in lines[0], double.log()[-2000:]
        health = http.get("/health")
        assert health.status_code == 503
        assert "RESILIENT_APPEND_WINDOW_MS" in health.json()["checks"]["settings"]["reason"]
        answer = http.post("/v1/responses", json={"model": "m", "input": "x"})
        assert answer.status_code == 500 and answer.headers["x-request-id"].startswith("req_")
        error = answer.json()["error"]
        assert (error["type"], error["code"]) == ("server_error", "server_error")
        assert "RESILIENT" not in error["message"]  # the setting is named in the log and by /health only
        assert "Traceback" not in double.log()
