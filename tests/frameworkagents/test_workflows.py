"""An Agent Framework workflow hosted by the service: one step per superstep on a workflow built for that
step, resumed from its last superstep's checkpoint after a worker kill and after a whole-host restart;
overlapping and cancelled responses that do not touch each other; a workflow's ``request_info`` answered
with typed ``function_call_output`` items, a wrong type refused with a 400 while the workflow waits."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from openai import BadRequestError, OpenAI

from tests.fakemodel.server import COMPLETION_TOKENS, PROMPT_TOKENS, FakeModel
from tests.frameworkagents.conftest import effects_of, framework_env
from tests.hostdouble.api import HostDouble
from tests.reliability.conftest import follow, kill, read_events
from tests.scenario.conftest import ROOT, wait_until

pytestmark = pytest.mark.slow(seconds=120)  # about that long in all; see tests/conftest.py

WORKFLOW = "tests.frameworkagents.app_workflow:build"


@pytest.fixture(scope="module")
def workflow_double(fake_model: FakeModel, effects_file: Path) -> Iterator[HostDouble]:
    env = {**framework_env(WORKFLOW, fake_model, effects_file), "WORKFLOW_DRAFT_DELAY": "1.0",
           "WORKFLOW_DECIDE_DELAY": "1.0"}
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


def test_four_overlapping_workflow_responses_all_complete(wf_client: OpenAI, effects_file: Path) -> None:
    with ThreadPoolExecutor(4) as pool:
        done = list(pool.map(lambda n: wf_client.responses.create(model="wf", input=f"topic {n}"), range(4)))
    assert [r.status for r in done] == ["completed"] * 4, [r.error for r in done]
    assert [r.output_text for r in done] == [f"Drafted from the outline of topic {n}. Published." for n in range(4)]
    assert all(kinds(effects_of(effects_file, r.id)) == ["outline", "draft", "publish"] for r in done)


def test_the_response_after_a_cancelled_workflow_response_completes(wf_client: OpenAI,
                                                                    workflow_double: HostDouble) -> None:
    created = wf_client.responses.create(model="wf", input="doomed", background=True)
    wait_until(lambda: step_done(workflow_double, created.id, 0), timeout=20)  # draft is sleeping now
    assert wf_client.responses.cancel(created.id).status == "cancelled"
    after = wf_client.responses.create(model="wf", input="next")
    assert after.status == "completed", after.error
    assert after.output_text == "Drafted from the outline of next. Published."


def asked_calls(response: Any) -> list[Any]:
    return [i for i in response.output if i.type == "function_call"]


def test_a_title_and_a_decision_are_asked_and_answered_with_typed_outputs_across_a_kill(
        wf_client: OpenAI, workflow_double: HostDouble, effects_file: Path) -> None:
    asked = wf_client.responses.create(model="wf", input="both of them")
    assert asked.status == "completed", asked.error
    title, decision = asked_calls(asked)
    assert title.name == "request_info" and json.loads(title.arguments)["response_type"] == "str"
    assert json.loads(title.arguments)["data"] == "Title for outline of both of them?"
    assert decision.name == "publish_request"
    assert json.loads(decision.arguments)["data"] == {"draft": "outline of both of them", "words": 5}
    assert "publish" not in kinds(effects_of(effects_file, asked.id))
    kill(workflow_double)  # the paused workflow lives in storage, not in a worker
    answered = wf_client.responses.create(model="wf", previous_response_id=asked.id, input=[
        {"type": "function_call_output", "call_id": title.call_id, "output": "Owls at dusk"},
        {"type": "function_call_output", "call_id": decision.call_id, "output": '{"approved": true, "note": "ok"}'}])
    assert answered.status == "completed", answered.error
    assert answered.output_text == "Published as 'Owls at dusk'. Published after approval (ok) of 5 words. "
    assert kinds(effects_of(effects_file, answered.id)) == ["publish", "deciding", "publish"]


def test_a_wrong_typed_answer_is_a_400_naming_the_type_and_the_workflow_still_waits(
        wf_client: OpenAI, effects_file: Path) -> None:
    asked = wf_client.responses.create(model="wf", input="needs approval")
    (decision,) = asked_calls(asked)
    with pytest.raises(BadRequestError) as refused:
        wf_client.responses.create(model="wf", previous_response_id=asked.id, input=[
            {"type": "function_call_output", "call_id": decision.call_id, "output": "yes please"}])
    error = refused.value.body
    assert isinstance(error, dict) and error["code"] == "invalid_value" and error["param"] == "input[0].output"
    assert "expected Decision" in error["message"] and "still waiting" in error["message"]
    with pytest.raises(BadRequestError, match="'approved' is a required property"):
        wf_client.responses.create(model="wf", previous_response_id=asked.id, input=[
            {"type": "function_call_output", "call_id": decision.call_id, "output": '{"note": "sure"}'}])
    answered = wf_client.responses.create(model="wf", previous_response_id=asked.id, input=[
        {"type": "function_call_output", "call_id": decision.call_id, "output": '{"approved": false}'}])
    assert answered.status == "completed", answered.error
    assert answered.output_text == "Not published. "
    assert "publish" not in kinds(effects_of(effects_file, answered.id))


def test_a_kill_while_an_answer_is_applied_runs_only_that_superstep_again(
        wf_client: OpenAI, workflow_double: HostDouble, effects_file: Path) -> None:
    asked = wf_client.responses.create(model="wf", input="needs approval again")
    (decision,) = asked_calls(asked)
    answering = wf_client.responses.create(model="wf", previous_response_id=asked.id, background=True, input=[
        {"type": "function_call_output", "call_id": decision.call_id, "output": '{"approved": true, "note": "k"}'}])
    wait_until(lambda: "deciding" in kinds(effects_of(effects_file, answering.id)), timeout=30)
    kill(workflow_double)  # while the decision's handler sleeps, before its superstep's checkpoint
    done = wait_until(lambda: (r := wf_client.responses.retrieve(answering.id)).status == "completed" and r,
                      timeout=60)
    assert done.output_text == "Published after approval (k) of 5 words. "
    assert kinds(effects_of(effects_file, answering.id)) == ["deciding", "deciding", "publish"]


@pytest.fixture(scope="module")
def agents_double(fake_model: FakeModel, effects_file: Path) -> Iterator[HostDouble]:
    env = {**framework_env("tests.frameworkagents.app_workflow:build_with_agents", fake_model, effects_file),
           "WORKFLOW_ARCHIVE_DELAY": "2.0"}
    with HostDouble(ROOT, env=env, settings=None) as running:
        yield running


def model_calls(fake_model: FakeModel, marker: str) -> int:
    return sum(1 for r in fake_model.chat_requests() if marker in json.dumps(r.body["messages"]))


def test_a_workflow_with_agent_executors_reports_their_models_usage(agents_double: HostDouble) -> None:
    client = OpenAI(base_url=agents_double.base_url, api_key="local", max_retries=0, timeout=60.0)
    response = client.responses.create(model="wf", input="thanks")
    assert response.status == "completed", response.error
    assert response.usage is not None
    assert response.usage.input_tokens == 2 * PROMPT_TOKENS and response.usage.output_tokens == 2 * COMPLETION_TOKENS
    assert response.usage.total_tokens == 2 * (PROMPT_TOKENS + COMPLETION_TOKENS)


def test_a_superstep_run_again_after_a_kill_counts_its_usage_once(agents_double: HostDouble,
                                                                  fake_model: FakeModel) -> None:
    client = OpenAI(base_url=agents_double.base_url, api_key="local", max_retries=0, timeout=60.0)
    marker = "thanks, once counted"
    created = client.responses.create(model="wf", input=marker, background=True)
    wait_until(lambda: model_calls(fake_model, marker) == 2, timeout=20)  # both agents answered ...
    kill(agents_double)  # ... while archive still sleeps: the superstep is not checkpointed yet
    done = wait_until(lambda: (r := client.responses.retrieve(created.id)).status == "completed" and r, timeout=60)
    assert model_calls(fake_model, marker) == 4  # the superstep ran again, its models too
    assert done.usage is not None
    assert done.usage.input_tokens == 2 * PROMPT_TOKENS and done.usage.output_tokens == 2 * COMPLETION_TOKENS
