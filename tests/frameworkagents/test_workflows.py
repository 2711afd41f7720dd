"""An Agent Framework workflow hosted by the service: one step per superstep, resumed from its last
superstep's checkpoint after a worker kill and after a whole-host restart; a workflow's request for a
person's input answered through the approval loop."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI

from tests.fakemodel.server import FakeModel
from tests.frameworkagents.conftest import effects_of, framework_env
from tests.hostdouble.api import HostDouble
from tests.reliability.conftest import follow, kill, read_events
from tests.scenario.conftest import ROOT, wait_until

pytestmark = pytest.mark.slow  # runs first on the parallel test workers (tests/conftest.py)

WORKFLOW = "tests.frameworkagents.app_workflow:build"


@pytest.fixture(scope="module")
def workflow_double(fake_model: FakeModel, effects_file: Path) -> Iterator[HostDouble]:
    env = {**framework_env(WORKFLOW, fake_model, effects_file), "WORKFLOW_DRAFT_DELAY": "1.0"}
    with HostDouble(ROOT, env=env, settings=None) as running:
        yield running


@pytest.fixture(scope="module")
def wf_client(workflow_double: HostDouble) -> OpenAI:
    return OpenAI(base_url=workflow_double.base_url, api_key="local", max_retries=0,
                  _strict_response_validation=True, timeout=60.0)


def kinds(effects: list[dict[str, Any]]) -> list[str]:
    return [e["effect"] for e in effects]


def step_done(double: HostDouble, response_id: str, phase: int) -> bool:
    return bool(re.search(rf"phase done \| response_id={re.escape(response_id)} phase={phase}(?!\d)", double.log()))


def test_a_workflow_runs_superstep_by_superstep(wf_client: OpenAI, workflow_double: HostDouble,
                                                effects_file: Path) -> None:
    response = wf_client.responses.create(model="wf", input="cats")
    assert response.status == "completed", response.error
    assert response.output_text == "Drafted from the outline of cats. Published."
    assert kinds(effects_of(effects_file, response.id)) == ["outline", "draft", "publish"]
    assert [e["key"].split("/")[1] for e in effects_of(effects_file, response.id)] == ["step-0", "step-1", "step-2"]
    assert response.usage is None  # no model counted anything


def test_a_workflow_killed_mid_superstep_resumes_from_the_last_one(wf_client: OpenAI, workflow_double: HostDouble,
                                                                   effects_file: Path) -> None:
    stream = wf_client.responses.create(model="wf", input="dogs", stream=True, background=True)
    with stream:
        seen, _ = read_events(stream, stop=lambda event, _: event.type == "response.in_progress")
        response_id = seen[0].response.id
        wait_until(lambda: step_done(workflow_double, response_id, 0), timeout=20)  # outline checkpointed
        kill(workflow_double)  # while draft sleeps before its side effect
    more, notes = follow(wf_client, response_id, seen[-1].sequence_number)
    assert more and more[-1].type == "response.completed", notes
    assert kinds(effects_of(effects_file, response_id)) == ["outline", "draft", "publish"]
    assert wf_client.responses.retrieve(response_id).output_text == "Drafted from the outline of dogs. Published."


def test_a_workflow_survives_a_whole_host_restart(wf_client: OpenAI, workflow_double: HostDouble,
                                                  effects_file: Path) -> None:
    created = wf_client.responses.create(model="wf", input="owls", background=True)
    wait_until(lambda: step_done(workflow_double, created.id, 0), timeout=20)
    workflow_double.kill_host()  # the host and its worker go down together (SIGKILL) ...
    workflow_double.restart()  # ... and a new host starts on the same task hub
    client = OpenAI(base_url=workflow_double.base_url, api_key="local", max_retries=0, timeout=60.0)
    done = wait_until(lambda: (r := client.responses.retrieve(created.id)).status == "completed" and r, timeout=90)
    assert done.output_text == "Drafted from the outline of owls. Published."
    assert kinds(effects_of(effects_file, created.id))[0] == "outline"
    assert kinds(effects_of(effects_file, created.id)).count("outline") == 1  # the finished superstep stayed done


def test_a_workflow_asking_a_person_pauses_for_approval(wf_client: OpenAI, effects_file: Path) -> None:
    asked = wf_client.responses.create(model="wf", input="publish with approval")
    assert asked.status == "completed" and [i.type for i in asked.output][-1] == "mcp_approval_request"
    request = asked.output[-1]
    assert request.server_label == "workflow" and request.name == "publish"
    assert "publish" not in kinds(effects_of(effects_file, asked.id))
    answered = wf_client.responses.create(
        model="wf", previous_response_id=asked.id,
        input=[{"type": "mcp_approval_response", "approval_request_id": request.id, "approve": True}])
    assert answered.status == "completed", answered.error
    assert answered.output_text == "Published after approval."
    assert kinds(effects_of(effects_file, answered.id)) == ["publish"]
