"""What ``RESILIENT_AGENT`` does with a setting it cannot honour, and with an agent that is not resumable."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from tests.fakemodel.server import FakeModel
from tests.frameworkagents.conftest import framework_env
from tests.hostdouble.api import HostDouble
from tests.reliability.conftest import follow, kill, read_events
from tests.scenario.conftest import ROOT


def start(agent: str, model: FakeModel, effects: Path) -> HostDouble:
    return HostDouble(ROOT, env=framework_env(agent, model, effects), settings=None)


def test_a_setting_naming_a_missing_module_answers_a_clear_500(fake_model: FakeModel, effects_file: Path) -> None:
    with start("no_such_agent_module:build", fake_model, effects_file) as double:
        answer = httpx.post(f"{double.base_url}/responses", json={"model": "m", "input": "hi"}, timeout=30)
        assert answer.status_code == 500
        error = answer.json()["error"]
        assert error["type"] == "server_error" and error["code"] == "server_error"
        assert "RESILIENT_AGENT" in error["message"] and "no_such_agent_module" in error["message"]
        again = httpx.post(f"{double.base_url}/responses", json={"model": "m", "input": "hi"}, timeout=30)
        assert again.status_code == 500
        assert double.log().count("module 'no_such_agent_module' could not be imported") == 1  # logged once


@pytest.fixture(scope="module")
def fragile(fake_model: FakeModel, effects_file: Path) -> Iterator[HostDouble]:
    with start("tests.frameworkagents.app_agents:build_not_resumable", fake_model, effects_file) as double:
        yield double


def test_an_agent_that_is_not_resumable_fails_cleanly_after_a_crash(fragile: HostDouble) -> None:
    client = OpenAI(base_url=fragile.base_url, api_key="local", max_retries=0, timeout=60.0)
    stream = client.responses.create(model="m", input="once", stream=True, background=True)
    with stream:
        seen, _ = read_events(stream, stop=lambda event, _: event.type == "response.output_text.delta")
        response_id = seen[0].response.id
        kill(fragile)
    more, notes = follow(client, response_id, seen[-1].sequence_number)
    assert more and more[-1].type == "response.failed", notes
    failed = client.responses.retrieve(response_id)
    assert failed.status == "failed" and failed.error is not None and failed.error.code == "server_error"
    assert "not resumable" in failed.error.message and "interrupted" in failed.error.message
