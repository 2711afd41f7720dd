"""Images, files and a stateless tool loop sent by the unmodified ``openai`` client reach the offline sample
agent, and the model of the model path with the request's parameters (the app under the host double, on
real Azurite; the model is the fake model server).

These need the protocol to accept ``input_image`` / ``input_file`` parts and a tool output in the same input
as its call: the module skips itself while the create parser refuses an image part, and runs once it accepts
one.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from openai import OpenAI

from resilient.protocol.errors import ApiError
from resilient.protocol.request import parse_create_request
from tests import itemshapes as shapes
from tests import live
from tests.fakemodel.server import FakeModel
from tests.hostdouble.api import HostDouble
from tests.scenario.conftest import ROOT, knobs


def _accepts_images() -> bool:
    body = {"model": "m", "input": [shapes.user(shapes.IMAGE_URL)]}
    try:
        parse_create_request(json.dumps(body).encode())
    except ApiError:
        return False
    return True


pytestmark = pytest.mark.skipif(not _accepts_images(), reason="the create parser refuses input_image parts")

WEATHER = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}


def test_an_image_and_a_file_reach_the_offline_agent(client: OpenAI) -> None:
    message: Any = shapes.user(shapes.text("What do these show?"), shapes.IMAGE_DATA, shapes.FILE_DATA)
    response = client.responses.create(model="m", input=[message], metadata=knobs(2, 24))
    assert response.status == "completed"
    assert response.output_text.startswith("[scope] Given 1 image, 1 file. On What do these show?:")


def test_a_stateless_tool_loop_reaches_the_offline_agent_with_the_functions_name(client: OpenAI) -> None:
    turn: Any = [shapes.user(shapes.text("Weather in Oslo?")), shapes.call("call_s1", "get_weather"),
                 shapes.call_output("call_s1", "sunny")]
    response = client.responses.create(model="m", input=turn, tools=[WEATHER], metadata=knobs(1, 12))
    assert response.status == "completed"
    assert response.output_text.startswith("get_weather returned: sunny\n")


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeModel]:
    with FakeModel() as server:
        yield server


@pytest.fixture(scope="module")
def model_client(fake: FakeModel) -> Iterator[OpenAI]:
    live.skip_if_live("a host whose model endpoint is this test's fake model")
    env = {"AzureWebJobsStorage": os.environ.get("AzureWebJobsStorage", "UseDevelopmentStorage=true"),
           "RESILIENT_STORAGE_PREFIX": "r" + secrets.token_hex(4), "AZURE_OPENAI_ENDPOINT": fake.base + "/v1",
           "AZURE_OPENAI_DEPLOYMENT": "dep", "AZURE_OPENAI_API_KEY": "fake-key", "RESILIENT_MODEL_MAX_RETRIES": "0"}
    with HostDouble(ROOT, env=env, settings=None) as running:
        yield OpenAI(base_url=running.base_url, api_key="local", max_retries=0, _strict_response_validation=True,
                     timeout=60.0)


def test_the_model_gets_the_image_the_file_and_the_requests_parameters(model_client: OpenAI,
                                                                        fake: FakeModel) -> None:
    message: Any = shapes.user(shapes.text("Compare them"), shapes.IMAGE_URL, shapes.FILE_DATA)
    response = model_client.responses.create(model="m", input=[message], metadata=knobs(1, 8), temperature=0.5,
                                             max_output_tokens=128, reasoning={"effort": "low"}, user="ana")
    assert response.status == "completed" and response.output_text == "Model says hello."
    body = fake.chat_requests()[-1].body
    assert (body["temperature"], body["max_completion_tokens"], body["reasoning_effort"], body["user"]) == (
        0.5, 128, "low", "ana")
    assert body["messages"][1]["content"] == [
        {"type": "text", "text": "Compare them"},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png", "detail": "high"}},
        {"type": "file", "file": {"file_data": shapes.PDF_DATA_URL, "filename": "notes.pdf"}}]
