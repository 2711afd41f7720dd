"""``resilient.checkpoints.AzureCheckpointStorage`` on real Azurite: a workflow run elsewhere checkpoints into
it and a new workflow object resumes from its latest checkpoint; it decodes only allowed types. And what a
hosted workflow does with a checkpoint storage of its own."""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from agent_framework import FileCheckpointStorage, WorkflowBuilder, WorkflowCheckpointException

from resilient.agents.base import AgentRequest, NextStep, PhaseContext, SaveState
from resilient.agents.framework.workflow import FrameworkWorkflow
from resilient.checkpoints import AzureCheckpointStorage
from tests.frameworkagents import app_workflow
from tests.frameworkagents.test_workflow_steps import Unregistered, _asks_unregistered


@pytest.fixture()
async def storage() -> AsyncIterator[AzureCheckpointStorage]:
    name = "ckpt" + secrets.token_hex(4)
    async with AzureCheckpointStorage(os.environ["AzureWebJobsStorage"], table=name, container=name) as opened:
        yield opened


async def outputs_of(stream: Any) -> tuple[str, list[Any]]:
    text, requests = "", []
    async for event in stream:
        if event.type == "output":
            text += str(event.data)
        elif event.type == "request_info":
            requests.append(event)
    return text, requests


async def test_a_workflow_resumes_from_its_latest_checkpoint_in_table_and_blob_storage(
        storage: AzureCheckpointStorage, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SIDE_EFFECTS_FILE", str(tmp_path / "effects.jsonl"))
    text, requests = await outputs_of(app_workflow.build().run("both", checkpoint_storage=storage, stream=True))
    assert text == "Drafted from the outline of both. " and len(requests) == 2
    ids = await storage.list_checkpoint_ids(workflow_name="publishing")
    assert len(ids) >= 3 and len(await storage.list_checkpoints(workflow_name="publishing")) == len(ids)
    latest = await storage.get_latest(workflow_name="publishing")
    assert latest is not None and set(latest.pending_request_info_events) == {r.request_id for r in requests}

    resumed = app_workflow.build()  # a new object, as another process would build
    _, again = await outputs_of(resumed.run(checkpoint_id=latest.checkpoint_id, checkpoint_storage=storage,
                                            stream=True))
    answers = {r.request_id: "Dusk" if r.response_type is str else app_workflow.Decision(True, "fine") for r in again}
    text, _ = await outputs_of(resumed.run(responses=answers, checkpoint_storage=storage, stream=True))
    assert text == "Published as 'Dusk'. Published after approval (fine) of 3 words. "

    assert await storage.delete(latest.checkpoint_id) is True
    assert await storage.delete(latest.checkpoint_id) is False
    with pytest.raises(WorkflowCheckpointException, match="No checkpoint found"):
        await storage.load(latest.checkpoint_id)
    assert await storage.get_latest(workflow_name="nothing-here") is None


async def test_it_loads_only_the_types_it_allows(storage: AzureCheckpointStorage) -> None:
    name = "ckpt" + secrets.token_hex(4)
    allowing = AzureCheckpointStorage(os.environ["AzureWebJobsStorage"], table=name, container=name,
                                      allowed_checkpoint_types=[f"{Unregistered.__module__}:Unregistered"])
    async with allowing:
        await outputs_of(_asks_unregistered().run("hush", checkpoint_storage=allowing, stream=True))
        latest = await allowing.get_latest(workflow_name="unregistered")
        assert latest is not None and latest.pending_request_info_events
    strict = AzureCheckpointStorage(os.environ["AzureWebJobsStorage"], table=name, container=name)
    async with strict:
        with pytest.raises(WorkflowCheckpointException, match="blocked"):
            await strict.load(latest.checkpoint_id)
        with pytest.raises(WorkflowCheckpointException, match="Invalid checkpoint ID"):
            await strict.load("../../etc/passwd")


async def test_a_hosted_workflow_checkpoints_with_its_step_not_into_its_own_storage(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIDE_EFFECTS_FILE", str(tmp_path / "effects.jsonl"))
    own = tmp_path / "own-checkpoints"

    def build() -> Any:
        return (WorkflowBuilder(name="publishing", start_executor=app_workflow.outline,
                                checkpoint_storage=FileCheckpointStorage(own))
                .add_edge(app_workflow.outline, app_workflow.draft)
                .add_edge(app_workflow.draft, app_workflow.Publish(id="publish")).build())

    agent, state, text = FrameworkWorkflow(build), None, ""
    request = AgentRequest(response_id="resp_own", model="m", instructions=None, history=[], metadata={},
                           input_items=[{"type": "message", "role": "user", "content": "mine"}])
    for index in range(10):
        step = [o async for o in agent.run_phase(PhaseContext(request=request, plan=[], phase_index=index,
                                                              is_recovery=False, output_so_far=[], state=state))]
        text += "".join(o for o in step if isinstance(o, str))
        state = json.loads(json.dumps([o for o in step if isinstance(o, SaveState)][-1].value))
        if NextStep() not in step:
            break
    assert text == "Drafted from the outline of mine. Published."
    assert list(own.glob("*.json")) == []  # the service's storage took its place for every run
