"""A running phase learns of a cancel handled by its own process at once, without reading the row; the next
phase of a run this process drives starts without a control read while its snapshot is fresh. Against
Azurite, through the engine the activities call."""

from __future__ import annotations

import asyncio
import json

import pytest

from resilient.agents.research import ResearchAgent
from resilient.engine.activities import Engine
from resilient.engine.run.batching import Tuning
from resilient.http.service import ResponsesService
from resilient.settings import Settings
from resilient.storage.factory import Storage
from tests.integration.conftest import NoDurable

pytestmark = pytest.mark.azurite


async def _created(service: ResponsesService, phases: int, words: int, delay_ms: int) -> str:
    body = {"model": "m", "input": "Plan, please.", "background": True,
            "metadata": {"research_phases": str(phases), "words_per_phase": str(words),
                         "delta_delay_ms": str(delay_ms)}}
    return str((await service.create(json.dumps(body).encode())).body["id"])


async def test_the_next_phase_reads_no_control_while_the_snapshot_is_fresh(storage: Storage,
                                                                           settings: Settings) -> None:
    service = ResponsesService(storage, NoDurable(), settings)
    rid = await _created(service, phases=3, words=4, delay_ms=0)
    engine = Engine(storage, ResearchAgent(settings), settings, Tuning(control_interval_s=30.0))
    await engine.run_phase(rid, 0, plan=True)
    calls = storage.responses.storage_calls
    assert (await engine.run_phase(rid, 1))["stop"] is None
    assert storage.responses.storage_calls == calls  # the plan's CAS a moment ago is the snapshot

    storage.controls.forget(rid)  # nothing known here (as after a long pause): the phase reads the row first
    calls = storage.responses.storage_calls
    assert (await engine.run_phase(rid, 2))["stop"] is None
    assert storage.responses.storage_calls == calls + 1


async def test_a_cancel_handled_in_the_same_process_stops_a_running_phase_without_a_control_read(
        storage: Storage, settings: Settings) -> None:
    service = ResponsesService(storage, NoDurable(), settings)
    rid = await _created(service, phases=1, words=400, delay_ms=10)  # ~4 s of deltas
    # A 30 s interval: a phase that relied on reading the row would stream all its words first.
    engine = Engine(storage, ResearchAgent(settings), settings, Tuning(control_interval_s=30.0))
    await engine.plan(rid)
    phase = asyncio.create_task(engine.run_phase(rid, 0))
    await asyncio.sleep(0.3)
    reads = storage.responses.storage_calls
    cancelled = await service.cancel(rid)
    summary = await asyncio.wait_for(phase, 10.0)
    assert summary["stop"] == "cancelled"
    assert cancelled.status == 200 and cancelled.body["status"] == "cancelled"
    item = cancelled.body["output"][0]
    assert item["status"] == "incomplete" and len(item["content"][0]["text"].split()) < 400
    # The service's own reads and writes of the row (the cancel, its settle wait, the answer) and the
    # phase's settle: none is the poller's.
    assert storage.responses.storage_calls - reads < 20
