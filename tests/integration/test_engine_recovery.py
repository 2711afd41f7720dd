"""The activities' recovery rules, against real Azurite (no storage mocks).

Each test plays the Durable runtime by calling the activities the way the orchestrator would, including
the way a crashed worker's activity is re-delivered: the same activity, called again with the same input.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from resilient.agents.base import AgentRequest, Phase, PhaseContext
from resilient.agents.research import BASE_PLAN, ResearchAgent, offline_words
from resilient.engine.activities import Engine, Tuning
from resilient.engine.run.liveness import Liveness
from resilient.http.service import ResponsesService
from resilient.protocol.events import TERMINAL_EVENT_TYPES, validate_event
from resilient.protocol.items import text_of
from resilient.settings import Settings
from resilient.storage.errors import LostOwnership
from resilient.storage.factory import Storage
from tests.integration.conftest import stores_for
from tests.streamcheck import helper_final, rebuild_items


class _Runtime:
    def __init__(self) -> None:
        self.started: list[tuple[str, dict[str, Any]]] = []
        self.events: list[tuple[str, str]] = []

    async def start(self, instance_id: str, payload: dict[str, Any]) -> None:
        self.started.append((instance_id, payload))

    async def raise_event(self, instance_id: str, name: str, data: Any) -> None:
        self.events.append((instance_id, name))


@pytest.fixture(scope="module")
def settings() -> Settings:
    return Settings.from_env({
        "AzureWebJobsStorage": os.environ.get("AzureWebJobsStorage", "UseDevelopmentStorage=true"),
        "RESILIENT_STORAGE_PREFIX": "e" + secrets.token_hex(4),
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


class CrashingAgent(ResearchAgent):
    """The research agent, except that it raises (a simulated crash) at delta ``at`` of phase ``phase``
    the first ``times`` times it runs that phase. The crash comes while the agent waits (as for a model's
    next chunk), so what it yielded before is in the log: the phase claims the log when its agent waits."""

    def __init__(self, settings: Settings, phase: int, at: int, times: int = 1) -> None:
        super().__init__(settings)
        self.phase, self.at, self.left = phase, at, times
        self.runs: list[tuple[int, bool]] = []

    async def run_phase(self, context: PhaseContext) -> AsyncIterator[str]:
        self.runs.append((context.phase_index, context.is_recovery))
        n = 0
        async for delta in super().run_phase(context):
            if context.phase_index == self.phase and n == self.at and self.left > 0:
                self.left -= 1
                await asyncio.sleep(0.01)
                raise RuntimeError("simulated worker crash")
            n += 1
            yield delta


async def _create(storage: Storage, settings: Settings, *, background: bool = True, phases: int = 3,
                  words: int = 6, delay_ms: int = 0) -> str:
    body = {"model": "m", "input": "What makes a run crash-resilient?", "background": background,
            "metadata": {"research_phases": str(phases), "words_per_phase": str(words),
                         "delta_delay_ms": str(delay_ms)}}
    service = ResponsesService(storage, _Runtime(), settings)
    result = await service.create(json.dumps(body).encode())
    if background:
        return str(result.body["id"])
    raise AssertionError("use background responses here")


async def _events(storage: Storage, rid: str) -> list[dict[str, Any]]:
    result = await storage.events.read_after(rid, -1)
    return [e.json() for e in result.events]


async def _run_all(engine: Engine, rid: str) -> list[dict[str, Any]]:
    plan = await engine.plan(rid)
    summaries = []
    for i in range(plan["phases"]):
        summaries.append(await engine.run_phase(rid, i))
    await engine.finalize(rid, {"status": "completed"})
    return summaries


def _assert_contiguous_and_valid(events: list[dict[str, Any]]) -> None:
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    for e in events:
        validate_event(e)
    assert sum(e["type"] in TERMINAL_EVENT_TYPES for e in events) == 1
    assert events[-1]["type"] in TERMINAL_EVENT_TYPES


def _texts(events: list[dict[str, Any]]) -> list[str]:
    final = events[-1]["response"]["output"]
    return [text_of(item) for item in final]

async def _die_mid_phase_1(
        storage: Storage, settings: Settings) -> tuple[CrashingAgent, Engine, str, list[dict[str, Any]]]:
    """A 3-phase run whose worker "dies" at the 3rd delta of phase 1: the agent, the engine, the response id
    and the events written so far (phase 0 checkpointed, phase 1's item left open)."""
    agent = CrashingAgent(settings, phase=1, at=3)
    engine = Engine(storage, agent, settings)
    rid = await _create(storage, settings)
    await engine.plan(rid)
    await engine.run_phase(rid, 0)
    with pytest.raises(RuntimeError, match="simulated"):
        await engine.run_phase(rid, 1)
    return agent, engine, rid, await _events(storage, rid)



async def test_fault_free_run_has_the_contract_event_order(storage: Storage, settings: Settings) -> None:
    engine = Engine(storage, ResearchAgent(settings), settings)
    rid = await _create(storage, settings)
    await _run_all(engine, rid)
    events = await _events(storage, rid)
    _assert_contiguous_and_valid(events)
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    per_phase = kinds[2:-1]
    one = (["response.output_item.added", "response.content_part.added"] + ["response.output_text.delta"] * 6
           + ["response.output_text.done", "response.content_part.done", "response.output_item.done"])
    assert per_phase == one * 3
    assert kinds[-1] == "response.completed"
    record = await storage.responses.get(rid)
    assert record.status == "completed"
    stored = await storage.items.list_output_items(rid)
    assert [text_of(i) for i in stored] == _texts(events)


async def test_redelivered_finished_phase_returns_checkpoint_without_streaming(storage: Storage,
                                                                               settings: Settings) -> None:
    engine = Engine(storage, ResearchAgent(settings), settings)
    rid = await _create(storage, settings)
    await engine.plan(rid)
    first = await engine.run_phase(rid, 0)
    count = len(await _events(storage, rid))
    again = await engine.run_phase(rid, 0)
    assert again == first
    assert len(await _events(storage, rid)) == count


async def test_a_duplicate_that_reads_the_checkpoints_just_before_the_live_attempt_writes_them_streams_nothing(
        storage: Storage, settings: Settings) -> None:
    """Two deliveries of one phase at once (the Durable backend re-ran an episode whose checkpoint failed):
    the duplicate finds no checkpoint yet but the log ending after the live attempt's item. It waits for that
    attempt's checkpoint and returns it, instead of taking the item for a crashed attempt's and streaming the
    phase again behind a reset."""
    live, duplicate = (Engine(storage, ResearchAgent(settings), settings) for _ in range(2))
    # A quiet window far longer than the test needs: on a slow machine the duplicate must not take the log
    # over before the live attempt's checkpoint lands (Last-Modified's 1 s resolution makes a log look older).
    duplicate.liveness = Liveness(quiet_s=8.0, poll_s=0.1)
    rid = await _create(storage, settings)
    await live.plan(rid)
    real_put = storage.items.put_output_item
    closed, release = asyncio.Event(), asyncio.Event()

    async def slow_put(*args: Any, **kwargs: Any) -> None:
        closed.set()  # the item's closing events are in the log; its checkpoint is not written yet
        await release.wait()
        await real_put(*args, **kwargs)

    storage.items.put_output_item = slow_put  # type: ignore[method-assign]
    try:
        running = asyncio.create_task(live.run_phase(rid, 0))
        await asyncio.wait_for(closed.wait(), 10)
        storage.items.put_output_item = real_put  # type: ignore[method-assign]
        count = len(await _events(storage, rid))
        assert count and (await _events(storage, rid))[-1]["type"] == "response.output_item.done"
        second = asyncio.create_task(duplicate.run_phase(rid, 0))
        await asyncio.sleep(0.5)  # it has read the checkpoints (none) and the log, and waits
        assert not second.done()
        release.set()
        first = await asyncio.wait_for(running, 10)
        again = await asyncio.wait_for(second, 10)
    finally:
        storage.items.put_output_item = real_put  # type: ignore[method-assign]
        release.set()
    assert again == first
    assert len(await _events(storage, rid)) == count  # the duplicate appended nothing


async def test_redelivered_plan_appends_in_progress_once(storage: Storage, settings: Settings) -> None:
    engine = Engine(storage, ResearchAgent(settings), settings)
    rid = await _create(storage, settings)
    assert await engine.plan(rid) == await engine.plan(rid)
    kinds = [e["type"] for e in await _events(storage, rid)]
    assert kinds == ["response.created", "response.in_progress"]


async def test_crash_mid_phase_recovers_with_reset_and_repeats_only_that_phase(storage: Storage,
                                                                                 settings: Settings) -> None:
    reference = Engine(storage, ResearchAgent(settings), settings)
    ref_id = await _create(storage, settings)
    await _run_all(reference, ref_id)
    ref_events = await _events(storage, ref_id)

    agent, engine, rid, before = await _die_mid_phase_1(storage, settings)
    await engine.run_phase(rid, 1)  # re-delivery
    await engine.run_phase(rid, 2)
    await engine.finalize(rid, {"status": "completed"})
    events = await _events(storage, rid)
    _assert_contiguous_and_valid(events)
    # The recovered attempt first closes the item the crash left open, with what it had streamed ...
    partial = "".join(e["delta"] for e in before if e["type"] == "response.output_text.delta"
                      and e["output_index"] == 1)
    closing = events[len(before):len(before) + 3]
    assert [e["type"] for e in closing] == ["response.output_text.done", "response.content_part.done",
                                            "response.output_item.done"]
    assert closing[-1]["item"]["status"] == "incomplete" and text_of(closing[-1]["item"]) == partial != ""
    # ... then resets to the last checkpoint (R4) ...
    reset = events[len(before) + 3]
    assert reset["type"] == "response.in_progress"
    assert [text_of(i) for i in reset["response"]["output"]] == _texts(ref_events)[:1]
    # ... and streams the phase again at output indexes the stream never used.
    reopened = [e for e in events[len(before):] if e["type"] == "response.output_item.added"]
    assert [e["output_index"] for e in reopened] == [2, 3]
    added = [e["output_index"] for e in events if e["type"] == "response.output_item.added"]
    assert len(added) == len(set(added)), "an output index was opened twice"
    assert agent.runs == [(0, False), (1, False), (1, True), (2, False)]  # only phase 1 repeated
    assert _texts(events) == _texts(ref_events)
    # Both readers rebuild the fault-free output: the client's stream helper and a raw consumer.
    assert [text_of(o.to_dict()) for o in helper_final(events).output] == _texts(ref_events)
    assert [i["text"] for i in rebuild_items(events)] == _texts(ref_events)


async def test_crash_after_phase_events_before_checkpoint_reruns_that_phase(storage: Storage,
                                                                             settings: Settings) -> None:
    engine = Engine(storage, ResearchAgent(settings), settings)
    rid = await _create(storage, settings)
    await engine.plan(rid)
    real_put = storage.items.put_output_item

    async def crash_put(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("worker died before the checkpoint")

    storage.items.put_output_item = crash_put  # type: ignore[method-assign]
    try:
        with pytest.raises(RuntimeError):
            await engine.run_phase(rid, 0)
    finally:
        storage.items.put_output_item = real_put  # type: ignore[method-assign]
    await engine.run_phase(rid, 0)
    await engine.finalize(rid, {"status": "completed"})
    events = await _events(storage, rid)
    _assert_contiguous_and_valid(events)
    kinds = [e["type"] for e in events]
    assert kinds.count("response.output_item.done") == 2  # phase 0 twice: before and after the reset
    assert kinds.count("response.in_progress") == 2
    assert len(events[-1]["response"]["output"]) == 1
    assert helper_final(events).output[0].id == events[-1]["response"]["output"][0]["id"]
    assert [i["text"] for i in rebuild_items(events)] == _texts(events)


async def test_double_crash_in_one_phase_resets_once_per_recovery(storage: Storage, settings: Settings) -> None:
    agent = CrashingAgent(settings, phase=0, at=2, times=2)
    engine = Engine(storage, agent, settings)
    rid = await _create(storage, settings, phases=2)
    await engine.plan(rid)
    for _ in range(2):
        with pytest.raises(RuntimeError):
            await engine.run_phase(rid, 0)
    await engine.run_phase(rid, 0)
    await engine.run_phase(rid, 1)
    await engine.finalize(rid, {"status": "completed"})
    events = await _events(storage, rid)
    _assert_contiguous_and_valid(events)
    assert [k["type"] for k in events].count("response.in_progress") == 3
    assert len(events[-1]["response"]["output"]) == 2
    assert [text_of(o.to_dict()) for o in helper_final(events).output] == _texts(events)
    assert [i["text"] for i in rebuild_items(events)] == _texts(events)


@pytest.mark.parametrize("ended_by", ["steered", "cancelled", "crash budget"])
async def test_a_run_ending_right_after_a_crash_closes_the_dead_attempts_item_before_its_terminal_event(
        storage: Storage, settings: Settings, ended_by: str) -> None:
    """The worker dies mid-phase; the run then ends without another phase attempt streaming: its retry
    finds a follow-up turn waiting (steered) or a cancel, or the orchestrator's crash budget is spent. The
    item the dead attempt left open is closed ``incomplete`` and a reset to the last checkpoint follows
    (R4), so a client rebuilding the stream gets exactly the terminal event's (and GET's) output."""
    agent, engine, rid, before = await _die_mid_phase_1(storage, settings)
    assert before[-1]["type"] == "response.output_text.delta"  # the dead attempt's item is open
    if ended_by == "crash budget":
        outcome = {"status": "failed", "error": {"code": "server_error", "message": "worker kept dying"}}
    else:
        if ended_by == "steered":
            await storage.responses.add_pending_input(rid, 1)
        else:
            record = await storage.responses.get(rid)
            await storage.responses.replace(record, cancel_requested=True)
        assert (await engine.run_phase(rid, 1))["stop"] == ended_by  # the retry returns at once
        outcome = {"status": "completed", "steered": True} if ended_by == "steered" else {"status": "completed"}
    await engine.finalize(rid, outcome)
    events = await _events(storage, rid)
    _assert_contiguous_and_valid(events)
    added = events[len(before):]
    assert [e["type"] for e in added][:-1] == ["response.output_text.done", "response.content_part.done",
                                               "response.output_item.done", "response.in_progress"]
    assert added[2]["item"]["status"] == "incomplete"
    assert len(added[3]["response"]["output"]) == 1  # the reset carries phase 0's checkpoint only
    final = events[-1]["response"]["output"]
    assert len(final) == 1
    assert [i["text"] for i in rebuild_items(events)] == _texts(events)
    if events[-1]["type"] == "response.completed":  # the client's stream helper only returns completed ones
        assert [o.id for o in helper_final(events).output] == [item["id"] for item in final]
    assert agent.runs == [(0, False), (1, False)]  # nothing streamed again
    await engine.finalize(rid, outcome)  # idempotent: nothing more appended
    assert len(await _events(storage, rid)) == len(events)


async def test_non_background_crash_is_failed_not_rerun(storage: Storage, settings: Settings) -> None:
    agent = CrashingAgent(settings, phase=0, at=1)
    engine = Engine(storage, agent, settings)
    rid = await _create(storage, settings)
    record = await storage.responses.get(rid)
    await storage.responses.replace(record, doc_changes={"background": False})
    await engine.plan(rid)
    with pytest.raises(RuntimeError):
        await engine.run_phase(rid, 0)
    summary = await engine.run_phase(rid, 0)
    assert summary["stop"] == "failed" and summary["error"]["code"] == "server_error"
    assert agent.runs == [(0, False)]
    await engine.finalize(rid, {"status": "failed", "error": summary["error"]})
    events = await _events(storage, rid)
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["error"]["code"] == "server_error"
    assert (await storage.responses.get(rid)).status == "failed"


class StallingAgent(ResearchAgent):
    """The research agent, except that its first run stalls after ``after`` deltas until ``resume`` is set:
    a zombie (a worker presumed dead, e.g. paused or cut off) that wakes up after its work was re-delivered."""

    def __init__(self, settings: Settings, after: int) -> None:
        super().__init__(settings)
        self.after = after
        self.stalled = asyncio.Event()
        self.resume = asyncio.Event()

    async def run_phase(self, context: PhaseContext) -> AsyncIterator[str]:
        n = 0
        async for delta in super().run_phase(context):
            if n == self.after and not self.stalled.is_set():
                self.stalled.set()
                await self.resume.wait()
            n += 1
            yield delta


@pytest.mark.adapters("memory", "azurite")
async def test_zombie_writer_is_fenced_off(storage: Storage, settings: Settings) -> None:
    """A re-delivered phase and its original, which wakes up after the re-delivery took over: the original's
    next append is refused. (The original stalls instead of streaming on: a re-delivery only wins the end of
    the log when no append lands between its look and its claim, which a timed race cannot promise on a
    loaded machine; a stalled zombie is also the case fencing exists for.)"""
    stalling = StallingAgent(settings, after=5)
    engine = Engine(storage, stalling, settings, Tuning(flush_interval_s=0.0, flush_max_events=1))
    rid = await _create(storage, settings, phases=1, words=40, delay_ms=0)
    await engine.plan(rid)
    zombie = asyncio.create_task(engine.run_phase(rid, 0))
    await asyncio.wait_for(stalling.stalled.wait(), 30)  # the original appended its opening and some deltas
    fresh = Engine(storage, ResearchAgent(settings), settings)
    summary = await fresh.run_phase(rid, 0)  # the re-delivery takes over the end of the log and streams
    stalling.resume.set()
    with pytest.raises(LostOwnership):
        await zombie
    assert summary["stop"] is None
    await fresh.finalize(rid, {"status": "completed"})
    events = await _events(storage, rid)
    _assert_contiguous_and_valid(events)
    assert [e["type"] for e in events].count("response.in_progress") == 2  # the re-delivery was a recovery
    assert len(events[-1]["response"]["output"]) == 1
    assert [text_of(o.to_dict()) for o in helper_final(events).output] == _texts(events)
    assert [i["text"] for i in rebuild_items(events)] == _texts(events)


async def test_cancel_stops_the_phase_and_keeps_partial_output(storage: Storage, settings: Settings) -> None:
    runtime = _Runtime()
    engine = Engine(storage, ResearchAgent(settings), settings, Tuning(control_interval_s=0.02))
    rid = await _create(storage, settings, phases=3, words=200, delay_ms=5)
    await engine.plan(rid)
    running = asyncio.create_task(engine.run_phase(rid, 0))
    await asyncio.sleep(0.3)
    cancelled = await ResponsesService(storage, runtime, settings).cancel(rid)
    assert cancelled.body["status"] == "cancelled"
    assert runtime.events == [(rid, "cancel")]
    assert running.done()  # the cancel answered only once the phase had stopped and checkpointed
    [answered] = cancelled.body["output"]  # the answer carries the partial item
    assert answered["status"] == "incomplete" and answered["content"][0]["text"]
    summary = await running
    assert summary["stop"] == "cancelled"
    full = " ".join(offline_words("What makes a run crash-resilient?", BASE_PLAN[0], 0, 200))
    assert 0 < summary["chars"] < len(full)
    final = await engine.finalize(rid, {"status": "cancelled"})
    assert final == {"status": "cancelled"}
    events = await _events(storage, rid)
    _assert_contiguous_and_valid(events)
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["status"] == "cancelled"
    partial = events[-1]["response"]["output"]
    assert len(partial) == 1 and partial[0]["status"] == "incomplete"
    assert partial == [answered]


async def test_cancel_with_no_run_reacting_is_set_after_the_bound(storage: Storage, settings: Settings) -> None:
    """A running response whose run does not react (its worker is gone) is still cancelled, by the
    cancel itself once ``cancel_settle_seconds`` has passed; a later finalize keeps that status."""
    engine = Engine(storage, ResearchAgent(settings), settings)
    rid = await _create(storage, settings, phases=2, words=5)
    await engine.plan(rid)
    service = ResponsesService(storage, _Runtime(), settings)
    service.cancel_settle_seconds = 0.3
    answer = await service.cancel(rid)
    assert answer.body["status"] == "cancelled" and answer.body["output"] == []
    assert await engine.finalize(rid, {"status": "completed"}) == {"status": "cancelled"}


async def test_cancel_flag_turns_a_later_finalize_into_cancelled(storage: Storage, settings: Settings) -> None:
    """R5 with the flag first: a run that finished its last phase before it saw the flag still ends
    ``cancelled`` (finalize honours the flag), and the waiting cancel answers with the full output."""
    engine = Engine(storage, ResearchAgent(settings), settings)
    rid = await _create(storage, settings, phases=1, words=3)
    await engine.plan(rid)
    await engine.run_phase(rid, 0)
    service = ResponsesService(storage, _Runtime(), settings)
    cancelling = asyncio.create_task(service.cancel(rid))
    for _ in range(500):
        if (await storage.responses.get_control(rid)).cancel_requested:
            break
        await asyncio.sleep(0.01)
    assert not cancelling.done()  # it waits for the run to settle
    final = await engine.finalize(rid, {"status": "completed"})
    answer = await cancelling
    assert final == {"status": "cancelled"} and answer.body["status"] == "cancelled"
    assert [item["status"] for item in answer.body["output"]] == ["completed"]


@pytest.mark.adapters("memory", "azurite")
async def test_cancel_racing_completion_has_exactly_one_terminal(storage: Storage, settings: Settings) -> None:
    for _ in range(5):
        engine = Engine(storage, ResearchAgent(settings), settings)
        rid = await _create(storage, settings, phases=1, words=3)
        await engine.plan(rid)
        await engine.run_phase(rid, 0)
        service = ResponsesService(storage, _Runtime(), settings)
        results = await asyncio.gather(engine.finalize(rid, {"status": "completed"}), service.cancel(rid),
                                       return_exceptions=True)
        status = (await storage.responses.get(rid)).status
        assert status in ("completed", "cancelled")
        assert results[0] == {"status": status}
        events = await _events(storage, rid)
        _assert_contiguous_and_valid(events)
        assert events[-1]["response"]["status"] == status


async def test_steering_stops_the_phase_at_a_delta_boundary(storage: Storage, settings: Settings) -> None:
    engine = Engine(storage, ResearchAgent(settings), settings, Tuning(control_interval_s=0.02))
    rid = await _create(storage, settings, phases=2, words=300, delay_ms=5)
    await engine.plan(rid)
    running = asyncio.create_task(engine.run_phase(rid, 0))
    await asyncio.sleep(0.3)
    await storage.responses.add_pending_input(rid, 1)
    summary = await running
    assert summary["stop"] == "steered"
    await engine.finalize(rid, {"status": "completed", "steered": True})
    events = await _events(storage, rid)
    _assert_contiguous_and_valid(events)
    assert events[-1]["type"] == "response.completed"
    assert events[-1]["response"]["output"][0]["status"] == "incomplete"


@pytest.mark.adapters("memory", "azurite")
async def test_finalize_is_idempotent(storage: Storage, settings: Settings) -> None:
    engine = Engine(storage, ResearchAgent(settings), settings)
    rid = await _create(storage, settings, phases=1, words=2)
    await engine.plan(rid)
    await engine.run_phase(rid, 0)
    assert await engine.finalize(rid, {"status": "completed"}) == {"status": "completed"}
    assert await engine.finalize(rid, {"status": "completed"}) == {"status": "completed"}
    _assert_contiguous_and_valid(await _events(storage, rid))


async def test_phase_context_exposes_history_and_output_so_far(storage: Storage, settings: Settings) -> None:
    seen: list[PhaseContext] = []

    class Recorder(ResearchAgent):
        async def plan(self, request: AgentRequest) -> list[Phase]:
            return [Phase("a"), Phase("b")]

        async def run_phase(self, context: PhaseContext) -> AsyncIterator[str]:
            seen.append(context)
            yield f"phase {context.phase_index}"

    engine = Engine(storage, Recorder(settings), settings)
    rid = await _create(storage, settings)
    await _run_all(engine, rid)
    assert [c.phase.name for c in seen] == ["a", "b"]
    assert [text_of(i) for i in seen[1].output_so_far] == ["phase 0"]
    assert seen[0].request.question() == "What makes a run crash-resilient?"
    assert not seen[0].is_recovery
