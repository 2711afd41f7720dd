"""Open plans in the engine, against real Azurite: steps decided at run time, each with any number of items
and its own state, re-delivered and crashed the way the Durable runtime does it (the same activity, called
again with the same input). The orchestrator's part (positions, step counts) is played by ``drive``."""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from resilient.agents.base import (
    AgentRequest,
    NextStep,
    Phase,
    PhaseContext,
    PhaseOutput,
    SaveProgress,
    SaveState,
    ToolRun,
)
from resilient.engine.activities import Engine
from resilient.http.service import ResponsesService
from resilient.settings import Settings
from resilient.storage.controls import ControlBoard
from resilient.storage.factory import Storage, open_storage
from resilient.storage.feed import CommittedFeed
from tests.integration.conftest import NoDurable

pytestmark = pytest.mark.azurite


@pytest.fixture(scope="module")
def settings() -> Settings:
    return Settings.from_env({
        "AzureWebJobsStorage": os.environ.get("AzureWebJobsStorage", "UseDevelopmentStorage=true"),
        "RESILIENT_STORAGE_PREFIX": "o" + secrets.token_hex(4),
    })


@pytest.fixture(scope="module")
async def storage(settings: Settings) -> AsyncIterator[Storage]:
    opened = await open_storage(settings, feed=CommittedFeed(), controls=ControlBoard())
    yield opened
    await opened.clients.delete_all()
    await opened.close()


class Counter:
    """Three steps: a tool run (one item), a quiet step (no item, state only), then the answer. Each step
    saves the count of steps it has seen in its state, so a step that starts from the wrong state shows."""

    open_plan = True

    def __init__(self, crash_in_step: int | None = None, resumable: bool = True) -> None:
        self.crash_in_step = crash_in_step
        self.resumable = resumable
        self.started: list[tuple[int, Any, bool]] = []

    async def plan(self, request: AgentRequest) -> Sequence[Phase]:
        return [Phase("step")]

    async def run_phase(self, context: PhaseContext) -> AsyncIterator[PhaseOutput]:
        index = context.phase_index
        self.started.append((index, context.state, context.is_recovery))
        seen = (context.state or {}).get("seen", 0)
        if index == 0:
            yield ToolRun("lookup", '{"q": "x"}', "found")
        elif index == 2:
            yield "the answer"
        if self.crash_in_step == index:
            self.crash_in_step = None
            raise RuntimeError("simulated worker crash")
        yield SaveState({"seen": seen + 1})
        if index < 2:
            yield NextStep()


async def create(storage: Storage, settings: Settings) -> str:
    body = {"model": "m", "input": "count", "background": True}
    result = await ResponsesService(storage, NoDurable(), settings).create(json.dumps(body).encode())
    return str(result.body["id"])


async def drive(engine: Engine, rid: str) -> list[dict[str, Any]]:
    """What the orchestrator does: step 0 plans; each result says how many steps and items there are."""
    results = [await engine.run_phase(rid, 0, plan=True, finalize=True)]
    position = int(results[0]["items"])
    index = 1
    while index < int(results[-1]["phases"]) and not results[-1].get("stop"):
        try:
            results.append(await engine.run_phase(rid, index, finalize=True, position=position))
        except RuntimeError:
            continue  # the worker "died": the same activity is called again with the same input
        position += int(results[-1]["items"])
        index += 1
    return results


async def test_steps_leave_any_number_of_items_and_pass_their_state_on(storage: Storage, settings: Settings) -> None:
    agent = Counter()
    rid = await create(storage, settings)
    results = await drive(Engine(storage, agent, settings), rid)
    assert [(r["phases"], r["items"], r["open"]) for r in results] == [(2, 1, True), (3, 0, True), (3, 1, True)]
    assert results[-1]["final"] == {"status": "completed"}
    assert [s for _, s, _ in agent.started] == [None, {"seen": 1}, {"seen": 2}]
    output = await storage.items.list_output_items(rid)
    assert [i["type"] for i in output] == ["mcp_call", "message"]
    record = await storage.responses.get(rid)
    assert record.status == "completed" and record.doc["agent_state"] == {"seen": 3}
    assert record.doc["usage"] is None  # no model reported any


async def test_a_step_that_dies_after_its_state_was_recorded_runs_again_from_its_own_input(
        storage: Storage, settings: Settings) -> None:
    agent = Counter(crash_in_step=2)  # dies after its item streamed, before its state and checkpoint
    rid = await create(storage, settings)
    engine = Engine(storage, agent, settings)
    results = await drive(engine, rid)
    assert results[-1]["final"] == {"status": "completed"}
    assert [(i, s) for i, s, _ in agent.started] == [(0, None), (1, {"seen": 1}), (2, {"seen": 2}), (2, {"seen": 2})]

    # The narrower window: the state record landed, the checkpoint did not. Replay it on a finished run's
    # row: step 2's record says it saved {"seen": 3}; a re-run of step 2 must still start from {"seen": 2}.
    from resilient.engine.run import phase_record

    doc = (await storage.responses.get(rid)).doc
    assert phase_record.input_state(doc, 2) == {"seen": 2} and phase_record.input_state(doc, 3) == {"seen": 3}


async def test_a_finished_step_delivered_again_answers_from_its_checkpoint(storage: Storage,
                                                                           settings: Settings) -> None:
    """The Durable runtime delivers an activity again while it is the run's current step (its worker was
    presumed dead): the step is not run again, and its answer is the one it gave."""
    agent = Counter()
    rid = await create(storage, settings)
    engine = Engine(storage, agent, settings)
    first = await engine.run_phase(rid, 0, plan=True, finalize=True)
    assert (await Engine(storage, agent, settings).run_phase(rid, 0))["items"] == first["items"] == 1
    quiet = await engine.run_phase(rid, 1, finalize=True, position=1)
    assert (quiet["phases"], quiet["items"]) == (3, 0)  # no item: its row record is its checkpoint
    before = len(agent.started)
    again = await Engine(storage, agent, settings).run_phase(rid, 1, finalize=True, position=1)
    assert (again["phases"], again["items"]) == (3, 0) and len(agent.started) == before
    last = await engine.run_phase(rid, 2, finalize=True, position=1)
    assert last["final"] == {"status": "completed"}
    again = await Engine(storage, agent, settings).run_phase(rid, 2, finalize=True, position=1)
    assert again["items"] == 1 and len(agent.started) == before + 1


class BigState(Counter):
    """Saves a state far over a Table property's 64 KiB: it is kept in a blob and comes back whole."""

    async def run_phase(self, context: PhaseContext) -> AsyncIterator[PhaseOutput]:
        self.started.append((context.phase_index, context.state, context.is_recovery))
        if context.phase_index == 0:
            yield SaveState({"notes": "n" * 300_000})
            yield NextStep()
        else:
            yield f"kept {len((context.state or {}).get('notes', ''))} characters"


async def test_a_large_state_is_kept_in_a_blob_and_handed_back_whole(storage: Storage, settings: Settings) -> None:
    agent = BigState()
    rid = await create(storage, settings)
    results = await drive(Engine(storage, agent, settings), rid)
    assert results[-1]["final"] == {"status": "completed"}
    output = await storage.items.list_output_items(rid)
    assert output[-1]["content"][0]["text"] == "kept 300000 characters"


class QuietFirst(Counter):
    """A first step that leaves no item (a workflow superstep that says nothing), then two with one each."""

    async def run_phase(self, context: PhaseContext) -> AsyncIterator[PhaseOutput]:
        index = context.phase_index
        self.started.append((index, context.state, context.is_recovery))
        if index == 1:
            yield ToolRun("lookup", '{"q": "x"}', "found")
        elif index == 2:
            yield "the answer"
        yield SaveState({"seen": index + 1})
        if index < 2:
            yield NextStep()


class Progressing(Counter):
    """Step 1 keeps progress before and between its two side effects, then dies the first time: its next
    attempt gets the progress, and the step after it does not."""

    def __init__(self) -> None:
        super().__init__()
        self.progress_seen: list[tuple[int, Any]] = []
        self.saved_before_next: list[bool] = []

    async def run_phase(self, context: PhaseContext) -> AsyncIterator[PhaseOutput]:
        index = context.phase_index
        self.progress_seen.append((index, context.progress))
        if index == 1:
            done = list((context.progress or {}).get("done", []))
            for effect in ("a", "b"):
                if effect in done:
                    continue
                done.append(effect)
                kept = SaveProgress({"done": done})
                yield kept
                self.saved_before_next.append(kept.saved.is_set())  # written before the next output is asked
                if effect == "a" and len(self.progress_seen) == 2:
                    raise RuntimeError("simulated worker crash")
        yield SaveState({"seen": index})
        if index < 2:
            yield NextStep()


async def test_a_run_driven_again_from_its_start_answers_each_step_with_its_own_items(
        storage: Storage, settings: Settings) -> None:
    """A repaired orchestration starts over at step 0 and re-delivers every step: a step that left no item
    must not answer with the later steps' items, or the next step's position is wrong and it runs again."""
    agent = QuietFirst()
    rid = await create(storage, settings)
    engine = Engine(storage, agent, settings)
    assert (await engine.run_phase(rid, 0, plan=True, finalize=True))["items"] == 0
    assert (await engine.run_phase(rid, 1, finalize=True, position=0))["items"] == 1
    # The orchestration dies here and is repaired: a new one drives the run from step 0 again.
    again = await drive(Engine(storage, agent, settings), rid)
    assert [r["items"] for r in again] == [0, 1, 1]
    assert again[-1]["final"] == {"status": "completed"}
    assert [i for i, _, _ in agent.started] == [0, 1, 2]  # no step ran twice
    assert [i["type"] for i in await storage.items.list_output_items(rid)] == ["mcp_call", "message"]


async def test_progress_kept_in_a_step_reaches_its_next_attempt_only(storage: Storage, settings: Settings) -> None:
    agent = Progressing()
    rid = await create(storage, settings)
    results = await drive(Engine(storage, agent, settings), rid)
    assert results[-1]["final"] == {"status": "completed"}
    assert agent.progress_seen == [(0, None), (1, None), (1, {"done": ["a"]}), (2, None)]
    assert agent.saved_before_next == [True, True]
