"""The first phase's activity plans the turn and the plan's last phase concludes the run (a Durable hop fewer
each), idempotently; a conclusion that fails is left to the orchestrator's finalize step. Against Azurite,
through the engine the activities call."""

from __future__ import annotations

import json
from typing import Any

import pytest

from resilient.agents.research import ResearchAgent
from resilient.engine.activities import Engine
from resilient.http.service import ResponsesService
from resilient.settings import Settings
from resilient.storage.factory import Storage
from tests.integration.conftest import NoDurable, rebuilt

STORAGE_ADAPTERS = ("memory",)  # the engine's decisions, not storage: see conftest


async def _created(storage: Storage, settings: Settings, phases: int) -> str:
    body = {"model": "m", "input": "Plan, please.", "background": True,
            "metadata": {"research_phases": str(phases), "words_per_phase": "4", "delta_delay_ms": "0"}}
    created = await ResponsesService(storage, NoDurable(), settings).create(json.dumps(body).encode())
    return str(created.body["id"])


async def _planned(storage: Storage, settings: Settings, phases: int = 2) -> tuple[str, Engine]:
    rid = await _created(storage, settings, phases)
    engine = Engine(storage, ResearchAgent(settings), settings)
    assert (await engine.plan(rid))["phases"] == phases
    return rid, engine


async def _kinds(storage: Storage, rid: str) -> list[str]:
    storage.feed.forget_log(rid)  # read what storage holds
    return [event.type for event in (await storage.events.read_after(rid, -1)).events]


async def test_the_last_phase_ends_the_run_with_one_terminal_event_even_when_delivered_twice(
        storage: Storage, settings: Settings) -> None:
    rid, engine = await _planned(storage, settings)
    assert "final" not in await engine.run_phase(rid, 0)  # not the last phase: nothing concluded
    assert (await storage.responses.get(rid)).status == "in_progress"
    summary = await engine.run_phase(rid, 1, finalize=True)
    assert summary["final"] == {"status": "completed"} and summary["stop"] is None
    assert (await storage.responses.get(rid)).status == "completed"
    # The activity is delivered again (its worker died before the host saw its result): same answer.
    again = await Engine(rebuilt(storage), ResearchAgent(settings), settings).run_phase(
        rid, 1, finalize=True)
    assert again["final"] == {"status": "completed"}
    kinds = await _kinds(storage, rid)
    assert kinds.count("response.completed") == 1 and kinds[-1] == "response.completed"
    assert kinds.count("response.output_item.done") == 2  # no phase ran twice


async def test_a_conclusion_that_fails_in_the_phase_is_left_to_the_finalize_step(
        storage: Storage, settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    rid, engine = await _planned(storage, settings, phases=1)

    async def unavailable(response_id: str, outcome: dict[str, Any]) -> dict[str, Any]:
        raise ConnectionError("storage went away")

    monkeypatch.setattr(engine, "finalize", unavailable)
    summary = await engine.run_phase(rid, 0, finalize=True)
    assert "final" not in summary and summary["stop"] is None  # the phase itself is done and checkpointed
    assert (await storage.responses.get(rid)).status == "in_progress"
    monkeypatch.undo()
    assert await engine.finalize(rid, {"status": "completed"}) == {"status": "completed"}
    assert (await _kinds(storage, rid))[-1] == "response.completed"


async def test_the_first_phase_plans_the_turn_once_even_when_delivered_twice(storage: Storage,
                                                                             settings: Settings) -> None:
    rid = await _created(storage, settings, phases=2)
    engine = Engine(storage, ResearchAgent(settings), settings)
    summary = await engine.run_phase(rid, 0, plan=True, finalize=True)
    assert summary["phases"] == 2 and summary["stop"] is None and "final" not in summary  # not the last one
    record = await storage.responses.get(rid)
    assert record.status == "in_progress" and len(record.doc["plan"]) == 2
    again = await Engine(rebuilt(storage), ResearchAgent(settings), settings).run_phase(
        rid, 0, plan=True, finalize=True)
    assert again["phases"] == 2 and again["chars"] == summary["chars"]  # its checkpoint, not a second run
    kinds = await _kinds(storage, rid)
    assert kinds.count("response.in_progress") == 1 and kinds.count("response.output_item.done") == 1


async def test_a_one_phase_turn_is_planned_run_and_concluded_by_one_activity(storage: Storage,
                                                                            settings: Settings) -> None:
    rid = await _created(storage, settings, phases=1)
    engine = Engine(storage, ResearchAgent(settings), settings)
    summary = await engine.run_phase(rid, 0, plan=True, finalize=True)
    assert summary["phases"] == 1 and summary["final"] == {"status": "completed"}
    kinds = await _kinds(storage, rid)
    assert kinds[0] == "response.created" and kinds[1] == "response.in_progress"
    assert kinds[-1] == "response.completed" and kinds.count("response.completed") == 1


async def test_a_first_phase_that_finds_the_response_cancelled_streams_nothing(storage: Storage,
                                                                               settings: Settings) -> None:
    rid = await _created(storage, settings, phases=2)
    await ResponsesService(storage, NoDurable(), settings).cancel(rid)
    summary = await Engine(storage, ResearchAgent(settings), settings).run_phase(rid, 0, plan=True, finalize=True)
    assert summary["stop"] == "cancelled" and "final" not in summary
    assert "response.output_item.added" not in await _kinds(storage, rid)
