"""Images, files and a stateless tool loop sent by the unmodified ``openai`` client reach the offline sample
agent (the app under the host double, on real Azurite).

These need the protocol to accept ``input_image`` / ``input_file`` parts and a tool output in the same input
as its call: the module skips itself while the create parser refuses an image part, and runs once it accepts
one.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai import OpenAI

from resilient.protocol.errors import ApiError
from resilient.protocol.request import parse_create_request
from tests import itemshapes as shapes
from tests.scenario.conftest import knobs


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
