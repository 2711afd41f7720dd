"""Images, files and model parameters reach the agent through storage and the engine, without the protocol
layer: a turn is created with text input, then its stored input item and row are given what the protocol
stores for a rich request (items in the OpenAI Responses shape, create parameters under their OpenAI
names), and the engine runs its first phase. Against Azurite (a large data URL spills to a blob) and memory.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from resilient.agents.research import ResearchAgent
from resilient.engine.activities import Engine
from resilient.engine.run.agent_request import agent_request
from resilient.http.service import ResponsesService
from resilient.protocol.items import text_of
from resilient.settings import Settings
from resilient.storage.factory import Storage
from tests import itemshapes as shapes
from tests.fakemodel.server import FakeModel
from tests.integration.conftest import NoDurable

pytestmark = pytest.mark.azurite

STORAGE_ADAPTERS = ("azurite", "memory")
# About 150 KB of PDF as a data URL: larger than a table property, so Azurite stores it as a spilled blob.
BIG_PDF = "data:application/pdf;base64," + base64.b64encode(b"%PDF-1.4\n" + b"0" * 110_000).decode()


def _settings(**extra: str) -> Settings:
    return Settings.from_env({
        "AzureWebJobsStorage": os.environ.get("AzureWebJobsStorage", "UseDevelopmentStorage=true"),
        "RESILIENT_STORAGE_PREFIX": "m" + secrets.token_hex(4), "RESILIENT_AGENT_DELTA_DELAY_MS": "0", **extra})


async def _rich_turn(storage: Storage, settings: Settings, params: dict[str, Any]) -> str:
    body = {"model": "m", "input": "placeholder", "background": True,
            "metadata": {"research_phases": "2", "words_per_phase": "24"}}
    created = await ResponsesService(storage, NoDurable(), settings).create(json.dumps(body).encode())
    rid = str(created.body["id"])
    [stored] = (await storage.items.list_input_items(rid, after=None, limit=10, order="asc")).data
    rich = shapes.user(shapes.text("Summarise the chart and the report"), shapes.IMAGE_DATA,
                       {"type": "input_file", "filename": "report.pdf", "file_data": BIG_PDF}, item_id=stored["id"])
    await storage.items.put_input_items(rid, [rich])
    await storage.responses.replace(await storage.responses.get(rid), doc_changes=params)
    return rid


async def test_the_offline_agent_names_the_image_and_file_it_was_given(storage: Storage) -> None:
    settings = _settings()
    rid = await _rich_turn(storage, settings, {"temperature": 0.4, "top_p": None})
    request = await agent_request(storage, await storage.responses.get(rid))
    assert request.params == {"temperature": 0.4}
    await Engine(storage, ResearchAgent(settings), settings).run_phase(rid, 0, plan=True)
    first = text_of((await storage.items.list_output_items(rid))[0])
    assert first.startswith("[scope] Given 1 image, 1 file. On Summarise the chart and the report:")


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeModel]:
    with FakeModel() as server:
        yield server


async def test_the_model_gets_the_parts_whole_and_the_rows_parameters(storage: Storage, fake: FakeModel) -> None:
    settings = _settings(AZURE_OPENAI_ENDPOINT=fake.base + "/v1", AZURE_OPENAI_DEPLOYMENT="dep",
                         AZURE_OPENAI_API_KEY="k", RESILIENT_MODEL_MAX_RETRIES="0")
    rid = await _rich_turn(storage, settings, {"temperature": 0.4, "max_output_tokens": 64,
                                               "reasoning": {"effort": "minimal"}})
    agent = ResearchAgent(settings)
    try:
        await Engine(storage, agent, settings).run_phase(rid, 0, plan=True)
    finally:
        await agent._model().close()
    assert text_of((await storage.items.list_output_items(rid))[0]) == "Model says hello."
    body = fake.chat_requests()[-1].body
    assert (body["temperature"], body["max_completion_tokens"], body["reasoning_effort"]) == (0.4, 64, "minimal")
    user = body["messages"][1]
    assert user["content"][1] == {"type": "image_url", "image_url": {"url": shapes.PNG_DATA_URL, "detail": "auto"}}
    assert user["content"][2] == {"type": "file", "file": {"file_data": BIG_PDF, "filename": "report.pdf"}}
