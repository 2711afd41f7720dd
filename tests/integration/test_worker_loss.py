"""Worker loss as the real host reports it, and the time limits below functionTimeout, on real Azurite.

The real orchestrator runs over the real activities (:class:`tests.durable_standin.Durable`). A worker that
dies mid-phase is played exactly as the real Functions host leaves it: the activity stops where it stands
(its partial deltas are in the log) and the orchestrator gets ``TaskFailed`` with the host's reason text
("python exited with code 137 (0x89)"); nothing re-delivers it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from resilient.agents.research import ResearchAgent
from resilient.engine.activities import Engine, Tuning
from resilient.engine.orchestration import orchestrator as orch
from resilient.engine.run.liveness import Liveness
from resilient.http.service import STREAM_LIMIT_NOTE, ResponsesService
from resilient.protocol.events import TERMINAL_EVENT_TYPES, validate_event
from resilient.protocol.items import text_of
from resilient.settings import Settings
from resilient.storage.factory import Storage
from tests.durable_standin import WORKER_EXIT, Durable, Injected
from tests.integration.conftest import new_conversation, stores_for

WAIT_S = 60.0


@pytest.fixture(scope="module")
def settings() -> Settings:
    return Settings.from_env({
        "AzureWebJobsStorage": os.environ.get("AzureWebJobsStorage", "UseDevelopmentStorage=true"),
        "RESILIENT_STORAGE_PREFIX": "w" + secrets.token_hex(4),
        "RESILIENT_AGENT_DELTA_DELAY_MS": "0",
    })


# In memory by default: these tests exercise the engine and the service, and the storage contract tests hold the
# memory adapter to the Azurite one. The tests that prove a storage guarantee (the append fence, the row's ETag
# CAS) run on Azurite too: ``@pytest.mark.adapters("memory", "azurite")``.
STORAGE_ADAPTERS = ("memory",)


@pytest_asyncio.fixture(scope="module")
async def storage(storage_adapter: str, settings: Settings) -> AsyncIterator[Storage]:
    async with stores_for(storage_adapter, settings) as opened:
        yield opened


def _rig(storage: Storage, settings: Settings) -> tuple[Durable, ResponsesService]:
    engine = Engine(storage, ResearchAgent(settings), settings, Tuning(flush_interval_s=0.02, control_interval_s=0.05))
    # timers run at 1/100 of their time here: the crash retry comes 30 ms after a death, not 3 s
    engine.liveness = Liveness(quiet_s=0.1, poll_s=0.02)
    durable = Durable(engine, timer_scale=0.01)
    return durable, ResponsesService(storage, durable, settings)


async def _create(service: ResponsesService, *, phases: int = 3, words: int = 20, delay_ms: int = 10,
                  **body: Any) -> str:
    payload = {"model": "m", "input": "What does a dead worker cost?", "background": True,
               "metadata": {"research_phases": str(phases), "words_per_phase": str(words),
                            "delta_delay_ms": str(delay_ms)}, **body}
    result = await service.create(json.dumps(payload).encode())
    assert result.status == 200, result.body
    return str(result.body["id"])


async def _events(storage: Storage, rid: str) -> list[dict[str, Any]]:
    return [e.json() for e in (await storage.events.read_after(rid, -1)).events]


def _check_log(events: list[dict[str, Any]]) -> list[str]:
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    kinds = [e["type"] for e in events]
    assert kinds.count("response.created") == 1
    assert sum(k in TERMINAL_EVENT_TYPES for k in kinds) == 1 and kinds[-1] in TERMINAL_EVENT_TYPES
    for event in events:
        validate_event(event)
    return kinds


async def _texts(storage: Storage, rid: str) -> list[str]:
    return [text_of(item) for item in await storage.items.list_output_items(rid)]


@pytest.mark.adapters("memory", "azurite")
async def test_three_worker_deaths_inside_one_phase_complete_the_run(storage: Storage, settings: Settings) -> None:
    durable, service = _rig(storage, settings)
    clean = await _create(service, delay_ms=0)
    await durable.wait(clean, WAIT_S)
    rid = await _create(service)
    # Phase 0 runs clean; then the worker dies three times inside phase 1, each time after 4 deltas.
    durable.inject[(rid, "run_phase:1")] = [Injected(WORKER_EXIT, deltas=4) for _ in range(3)]
    assert await durable.wait(rid, WAIT_S) == {"status": "completed"}
    events = await _events(storage, rid)
    kinds = _check_log(events)
    assert kinds[-1] == "response.completed"
    # Four run_phase(1) calls: more than the ordinary attempts, so the crashes used their own budget.
    assert durable.activities[rid].count(orch.RUN_PHASE) == 3 + 3
    assert orch.PHASE_ATTEMPTS < 4
    resets = [e for e in events if e["type"] == "response.in_progress"][1:]
    assert len(resets) == 3 and all(len(r["response"]["output"]) == 1 for r in resets)
    assert await _texts(storage, rid) == await _texts(storage, clean)
    assert sum(e[2].startswith("Activity function 'run_phase' failed: python exited with code 137")
               for e in durable.activity_errors if e[0] == rid) == 3


async def test_a_run_that_keeps_killing_its_worker_ends_failed_once_and_frees_its_chain(
        storage: Storage, settings: Settings) -> None:
    durable, service = _rig(storage, settings)
    conv = await new_conversation(storage)
    rid = await _create(service, phases=2, conversation=conv)
    durable.inject[(rid, orch.RUN_PHASE)] = [Injected(WORKER_EXIT, deltas=2) for _ in range(20)]
    output = await durable.wait(rid, WAIT_S)
    assert output == {"status": "failed"}
    assert durable.activities[rid].count(orch.RUN_PHASE) == 1 + orch.CRASH_RETRIES_PER_STEP
    record = await storage.responses.get(rid)
    assert record.status == "failed" and "worker process stopped" in record.doc["error"]["message"]
    kinds = _check_log(await _events(storage, rid))
    assert kinds[-1] == "response.failed"
    assert durable.entity_state(conv) == {"active": None, "queue": []}
    follow_up = await _create(service, phases=1, words=3, delay_ms=0, conversation=conv)
    assert await durable.wait(follow_up, WAIT_S) == {"status": "completed"}


async def test_a_phase_past_its_deadline_ends_the_run_failed_instead_of_reaching_the_host_timeout(
        storage: Storage, settings: Settings) -> None:
    tight = dataclasses.replace(settings, phase_deadline_seconds=0.4)
    durable, service = _rig(storage, tight)
    rid = await _create(service, phases=2, words=200, delay_ms=20)  # 4 s per phase
    started = time.monotonic()
    assert await durable.wait(rid, WAIT_S) == {"status": "failed"}
    assert time.monotonic() - started < 10
    record = await storage.responses.get(rid)
    assert record.doc["error"]["message"].startswith("Phase 0 did not finish within 0 s")
    items = await storage.items.list_output_items(rid)
    assert len(items) == 1 and items[0]["status"] == "incomplete"  # the partial item is kept, like a steer
    kinds = _check_log(await _events(storage, rid))
    assert kinds[-1] == "response.failed" and durable.activities[rid].count(orch.RUN_PHASE) == 1


async def test_a_stream_ends_cleanly_before_the_time_limit_and_a_reconnect_continues(
        storage: Storage, settings: Settings) -> None:
    limited = dataclasses.replace(settings, stream_limit_seconds=0.6)
    durable, service = _rig(storage, limited)
    rid = await _create(service, phases=2, words=40, delay_ms=20)  # ~2 s of events
    seen: list[int] = []
    frames_total: list[bytes] = []
    for _ in range(20):
        result = await service.retrieve(rid, {"stream": "true", "starting_after": str(seen[-1] if seen else -1)}, {})
        assert result.stream is not None
        frames = [frame async for frame in result.stream]
        frames_total += frames
        seen += [int(line[4:]) for f in frames for line in f.split(b"\n") if line.startswith(b"id: ")]
        if any(b"event: response.completed" in f for f in frames):
            break
        assert frames[-1] == STREAM_LIMIT_NOTE  # ended by the limit, not by an error
    events = await _events(storage, rid)
    _check_log(events)
    assert seen == list(range(len(events)))  # across the reconnects: no gap, no duplicate
    assert frames_total.count(STREAM_LIMIT_NOTE) >= 2
    await durable.wait(rid, WAIT_S)


async def test_a_synchronous_request_answers_before_the_time_limit(storage: Storage, settings: Settings) -> None:
    limited = dataclasses.replace(settings, stream_limit_seconds=0.5)
    durable, service = _rig(storage, limited)
    body = {"model": "m", "input": "slow", "metadata": {"research_phases": "2", "words_per_phase": "60",
                                                        "delta_delay_ms": "20"}}
    started = time.monotonic()
    result = await service.create(json.dumps(body).encode())
    assert time.monotonic() - started < 5
    assert result.status == 200 and result.body["status"] == "in_progress"
    rid = str(result.body["id"])
    assert await durable.wait(rid, WAIT_S) == {"status": "completed"}  # the run itself goes on
