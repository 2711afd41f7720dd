"""A run driven by one process needs no storage reads between its activities; one advanced by another
process meanwhile is detected by the fenced append and read from storage. Against real Azurite.

"Another process" is an ``Engine`` over its own ``Storage`` object (its own kept writers), on the same
tables and containers.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import AsyncIterator
from typing import Any

import pytest

from resilient.agents.base import PhaseContext
from resilient.agents.research import ResearchAgent
from resilient.engine.activities import Engine
from resilient.http.service import ResponsesService
from resilient.protocol.events import TERMINAL_EVENT_TYPES, validate_event
from resilient.protocol.items import text_of
from resilient.protocol.response import estimate_tokens
from resilient.settings import Settings
from resilient.storage.controls import ControlBoard
from resilient.storage.factory import Storage, open_storage
from resilient.storage.feed import CommittedFeed
from tests.integration.conftest import NoDurable, new_conversation, rebuilt
from tests.memory_storage import MemoryBackend, build_memory_storage

pytestmark = pytest.mark.azurite


class CountingAgent(ResearchAgent):
    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.phases_run: list[int] = []

    async def run_phase(self, context: PhaseContext) -> AsyncIterator[str]:
        self.phases_run.append(context.phase_index)
        async for delta in super().run_phase(context):
            yield delta


@pytest.fixture(scope="module")
def settings() -> Settings:
    return Settings.from_env({
        "AzureWebJobsStorage": os.environ.get("AzureWebJobsStorage", "UseDevelopmentStorage=true"),
        "RESILIENT_STORAGE_PREFIX": "m" + secrets.token_hex(4),
        "RESILIENT_AGENT_DELTA_DELAY_MS": "0",
    })


# The tests that count storage round trips run on Azurite (its adapters' counts are the claim); the others
# exercise the engine's decisions and run in memory (see the conftest).
STORAGE_ADAPTERS = ("memory",)
COUNTS = pytest.mark.adapters("azurite")


@pytest.fixture(scope="module")
async def storage(settings: Settings, storage_adapter: str) -> AsyncIterator[Storage]:
    if storage_adapter == "memory":
        yield build_memory_storage(MemoryBackend(), feed=CommittedFeed(), controls=ControlBoard())
        return
    opened = await open_storage(settings, feed=CommittedFeed(), controls=ControlBoard())
    yield opened
    await opened.clients.delete_all()
    await opened.close()


async def _create(storage: Storage, settings: Settings, phases: int = 3, words: int = 6) -> str:
    body = {"model": "m", "input": "What does a process remember?", "background": True,
            "metadata": {"research_phases": str(phases), "words_per_phase": str(words), "delta_delay_ms": "0"}}
    result = await ResponsesService(storage, NoDurable(), settings).create(json.dumps(body).encode())
    return str(result.body["id"])


async def _events(storage: Storage, rid: str) -> list[dict[str, Any]]:
    return [e.json() for e in (await storage.events.read_after(rid, -1)).events]


def _assert_contiguous_and_valid(events: list[dict[str, Any]]) -> None:
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    for event in events:
        validate_event(event)
    assert sum(e["type"] in TERMINAL_EVENT_TYPES for e in events) == 1 == (events[-1]["type"] in TERMINAL_EVENT_TYPES)


def _calls(storage: Storage) -> dict[str, int]:
    """Round trips so far by store; the event log's own (opens, reads) apart from its writers' appends."""
    return {"responses": storage.responses.storage_calls, "items": storage.items.storage_calls,  # type: ignore[attr-defined]
            "log": storage.events.storage_calls + storage.events.reader.storage_calls}  # type: ignore[attr-defined]


def _delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {key: after[key] - before[key] for key in before}


@COUNTS
async def test_a_phase_after_the_first_reads_nothing_while_the_control_snapshot_is_fresh(
        storage: Storage, settings: Settings) -> None:
    engine = Engine(storage, ResearchAgent(settings), settings)
    rid = await _create(storage, settings)
    await engine.plan(rid)
    await engine.run_phase(rid, 0)
    writer = storage.events.take_writer(rid)
    assert writer is not None
    appends_before = writer.storage_calls
    storage.events.keep_writer(writer)
    before = _calls(storage)
    await engine.run_phase(rid, 1)
    # the checkpoint write only: no control read (the previous phase's snapshot is younger than the
    # control interval), no log open, no row or item read
    assert _delta(before, _calls(storage)) == {"responses": 0, "items": 1, "log": 0}
    writer = storage.events.take_writer(rid)
    assert writer is not None
    # the agent never waits (no delay): its whole phase and the closing events are one append, the claim
    assert writer.storage_calls - appends_before == 1
    storage.events.keep_writer(writer)
    await engine.run_phase(rid, 2)
    await engine.finalize(rid, {"status": "completed"})
    events = await _events(storage, rid)
    _assert_contiguous_and_valid(events)
    assert len(events[-1]["response"]["output"]) == 3
    assert [text_of(i) for i in await storage.items.list_output_items(rid)] == [
        text_of(i) for i in events[-1]["response"]["output"]]


@COUNTS
async def test_the_last_phase_concludes_without_reading_back_the_output_it_just_checkpointed(
        storage: Storage, settings: Settings) -> None:
    engine = Engine(storage, ResearchAgent(settings), settings)
    rid = await _create(storage, settings)
    await engine.run_phase(rid, 0, plan=True)
    await engine.run_phase(rid, 1)
    before = _calls(storage)
    summary = await engine.run_phase(rid, 2, finalize=True)
    assert summary["final"] == {"status": "completed"}
    # items: the checkpoint write only (the conclusion takes the output this call wrote, not a list query);
    # responses: the terminal CAS only
    assert _delta(before, _calls(storage))["items"] == 1
    assert _delta(before, _calls(storage))["responses"] == 1
    events = await _events(storage, rid)
    _assert_contiguous_and_valid(events)
    stored = await storage.items.list_output_items(rid)
    assert events[-1]["response"]["output"] == stored
    usage = (await storage.responses.get(rid)).doc["usage"]
    assert usage["output_tokens"] == sum(estimate_tokens(text_of(item)) for item in stored)


async def test_a_phase_run_elsewhere_meanwhile_is_found_and_not_streamed_again(storage: Storage,
                                                                             settings: Settings) -> None:
    here_agent = CountingAgent(settings)
    here = Engine(storage, here_agent, settings)
    elsewhere = Engine(rebuilt(storage), ResearchAgent(settings), settings)
    rid = await _create(storage, settings)
    await here.plan(rid)
    await here.run_phase(rid, 0)
    # phase 1 ran in another process (say our result was lost and the orchestrator retried it there)
    assert (await elsewhere.run_phase(rid, 1))["stop"] is None
    # here, the kept writer still ends after phase 0: its fenced append fails and storage is read instead
    summary = await here.run_phase(rid, 1)
    assert summary["stop"] is None and summary["index"] == 1
    # The agent may have started (its first output is what claims the log), but nothing of it was appended:
    # the log has one stream of phase 1 and no recovery reset (checked below).
    assert here_agent.phases_run[0] == 0 and set(here_agent.phases_run) <= {0, 1}
    await here.run_phase(rid, 2)
    await here.finalize(rid, {"status": "completed"})
    events = await _events(storage, rid)
    _assert_contiguous_and_valid(events)
    kinds = [e["type"] for e in events]
    assert kinds.count("response.output_item.added") == 3 and kinds.count("response.in_progress") == 1


async def test_finalize_after_a_phase_elsewhere_counts_every_checkpoint(storage: Storage, settings: Settings) -> None:
    here = Engine(storage, ResearchAgent(settings), settings)
    elsewhere = Engine(rebuilt(storage), ResearchAgent(settings), settings)
    rid = await _create(storage, settings, phases=2)
    await here.plan(rid)
    await here.run_phase(rid, 0)
    await elsewhere.run_phase(rid, 1)
    assert await here.finalize(rid, {"status": "completed"}) == {"status": "completed"}
    events = await _events(storage, rid)
    _assert_contiguous_and_valid(events)
    output = events[-1]["response"]["output"]
    assert len(output) == 2
    usage = (await storage.responses.get(rid)).doc["usage"]
    assert usage["output_tokens"] == sum(estimate_tokens(text_of(item)) for item in output)


async def test_a_cancel_between_phases_stops_the_next_one_before_it_appends(storage: Storage,
                                                                          settings: Settings) -> None:
    engine = Engine(storage, ResearchAgent(settings), settings)
    service = ResponsesService(storage, NoDurable(), settings)
    rid = await _create(storage, settings)
    await engine.plan(rid)
    await engine.run_phase(rid, 0)
    length = len(await _events(storage, rid))
    await service.cancel(rid)
    assert await engine.run_phase(rid, 1) == {"index": 1, "stop": "cancelled"}
    assert len(await _events(storage, rid)) == length
    assert await engine.finalize(rid, {"status": "cancelled"}) == {"status": "cancelled"}
    events = await _events(storage, rid)
    _assert_contiguous_and_valid(events)
    assert events[-1]["type"] == "response.failed" and events[-1]["response"]["status"] == "cancelled"
    assert len(events[-1]["response"]["output"]) == 1


@COUNTS
async def test_a_plan_after_a_create_in_this_process_reads_nothing_back(storage: Storage, settings: Settings) -> None:
    engine = Engine(storage, ResearchAgent(settings), settings)
    service = ResponsesService(storage, NoDurable(), settings, on_created=engine.remember_created)
    body = {"model": "m", "input": "Plan without reading back.", "background": True,
            "metadata": {"research_phases": "2", "words_per_phase": "3", "delta_delay_ms": "0"}}
    rid = str((await service.create(json.dumps(body).encode())).body["id"])
    before = _calls(storage)
    assert await engine.plan(rid) == {"phases": 2}
    assert _delta(before, _calls(storage)) == {"responses": 1, "items": 0, "log": 0}  # the CAS to in_progress
    await engine.run_phase(rid, 0)
    await engine.run_phase(rid, 1)
    await engine.finalize(rid, {"status": "completed"})
    events = await _events(storage, rid)
    _assert_contiguous_and_valid(events)
    assert events[1]["type"] == "response.in_progress" and events[1]["response"]["status"] == "in_progress"
    assert len((await storage.responses.get(rid)).doc["plan"]) == 2  # the plan was persisted by the CAS
    assert len(events[-1]["response"]["output"]) == 2


async def test_a_cancel_right_after_the_create_still_stops_a_remembered_plan(storage: Storage,
                                                                           settings: Settings) -> None:
    engine = Engine(storage, ResearchAgent(settings), settings)
    service = ResponsesService(storage, NoDurable(), settings, on_created=engine.remember_created)
    body = {"model": "m", "input": "Cancel me.", "background": True}
    rid = str((await service.create(json.dumps(body).encode())).body["id"])
    await service.cancel(rid)  # the remembered row is now stale: its CAS loses and the plan sees the cancel
    assert await engine.plan(rid) == {"stop": "cancelled"}
    assert (await storage.responses.get(rid)).status == "cancelled"


@COUNTS
async def test_a_turn_with_no_lock_to_wait_for_opens_its_log_in_progress_and_its_plan_appends_nothing(
        storage: Storage, settings: Settings) -> None:
    """A root turn (its chain's lock is its own) cannot be queued, so the create writes
    ``response.in_progress`` with ``response.created``; a turn on a conversation may wait for its lock, so
    it gets ``response.in_progress`` from its plan, once it holds the lock."""
    engine = Engine(storage, ResearchAgent(settings), settings)
    service = ResponsesService(storage, NoDurable(), settings, on_created=engine.remember_created)

    async def create(**extra: Any) -> str:
        body = {"model": "m", "input": "Open at once.", "background": True,
                "metadata": {"research_phases": "1", "words_per_phase": "3", "delta_delay_ms": "0"}, **extra}
        return str((await service.create(json.dumps(body).encode())).body["id"])

    async def kinds(rid: str) -> list[str]:
        return [e["type"] for e in await _events(storage, rid)]

    rid = await create()
    assert await kinds(rid) == ["response.created", "response.in_progress"]
    opened = (await _events(storage, rid))[1]
    assert opened["response"]["status"] == "in_progress" and opened["sequence_number"] == 1
    writer = storage.events.take_writer(rid)
    assert writer is not None
    appends = writer.storage_calls
    storage.events.keep_writer(writer)
    assert await engine.plan(rid) == {"phases": 1}
    kept = storage.events.take_writer(rid)
    assert kept is not None and kept.storage_calls == appends  # the plan appended nothing
    storage.events.keep_writer(kept)
    assert await kinds(rid) == ["response.created", "response.in_progress"]
    await engine.run_phase(rid, 0, finalize=True)
    events = await _events(storage, rid)
    _assert_contiguous_and_valid(events)
    assert [e["type"] for e in events].count("response.in_progress") == 1
    assert events[-1]["type"] == "response.completed"

    queued = await create(conversation=await new_conversation(storage))
    assert await kinds(queued) == ["response.created"]
    await engine.plan(queued)
    assert await kinds(queued) == ["response.created", "response.in_progress"]
