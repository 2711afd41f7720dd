"""Framework-agent scenarios: the unmodified ``function_app.py`` under the host double on real Azurite,
with ``RESILIENT_AGENT`` naming an Agent Framework agent (``app_agents.py``) that talks to the fake model,
driven by the official ``openai`` client (strict validation, no automatic retries)."""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI

from tests.fakemodel.server import FakeModel
from tests.frameworkagents.model import ToolLoop
from tests.hostdouble.api import HostDouble
from tests.scenario.conftest import ROOT

AGENT = "tests.frameworkagents.app_agents:build"


@pytest.fixture(scope="session")
def fake_model() -> Iterator[FakeModel]:
    with FakeModel() as model:
        model.responder = ToolLoop()
        yield model


@pytest.fixture()
def model(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeModel]:
    """A fake model of the test's own, for an agent driven in this process (no host): the agent samples find
    it and their side-effects file through the environment."""
    with FakeModel() as fake:
        fake.responder = ToolLoop()
        monkeypatch.setenv("FAKE_MODEL_URL", fake.base)
        monkeypatch.setenv("SIDE_EFFECTS_FILE", str(tmp_path / "effects.jsonl"))
        yield fake


@pytest.fixture()
def policy(fake_model: FakeModel) -> Iterator[ToolLoop]:
    """The model's policy, reset after each test (tests slow parts of it down)."""
    loop = ToolLoop()
    fake_model.responder = loop
    yield loop
    fake_model.responder = ToolLoop()


@pytest.fixture(scope="session")
def effects_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("effects") / "effects.jsonl"


def framework_env(agent: str, model: FakeModel, effects: Path) -> dict[str, str]:
    return {
        "AzureWebJobsStorage": os.environ.get("AzureWebJobsStorage", "UseDevelopmentStorage=true"),
        "RESILIENT_STORAGE_PREFIX": "f" + secrets.token_hex(4),
        "RESILIENT_AGENT": agent,
        "FAKE_MODEL_URL": model.base,
        "SIDE_EFFECTS_FILE": str(effects),
        "RESILIENT_STEERABLE_CONVERSATIONS": "true",
        "RESILIENT_REPAIR_GRACE_SECONDS": "5",
    }


@pytest.fixture(scope="session")
def double(fake_model: FakeModel, effects_file: Path) -> Iterator[HostDouble]:
    with HostDouble(ROOT, env=framework_env(AGENT, fake_model, effects_file), settings=None) as running:
        yield running


@pytest.fixture(scope="session")
def client(double: HostDouble) -> OpenAI:
    return OpenAI(base_url=double.base_url, api_key="local", max_retries=0, _strict_response_validation=True,
                  timeout=60.0)


def effects_of(effects: Path, response_id: str) -> list[dict[str, Any]]:
    """The tool side effects of one response (keys start with its id)."""
    if not effects.exists():
        return []
    found = [json.loads(line) for line in effects.read_text().splitlines() if line.strip()]
    return [e for e in found if str(e.get("key", "")).startswith(response_id + "/")]
