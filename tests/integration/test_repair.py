"""The repair path on real Azurite: finding stuck runs, resuming them, never two writers.

The Durable side is :class:`tests.durable_standin.Durable`: it runs the REAL orchestrator over the REAL
activities and can "kill" an orchestration the way the real host leaves one: Failed (an orchestrator episode
was in flight when the worker died), Terminated, or missing. Responses are created through the real
``ResponsesService``; the repairer under test is the real :class:`~resilient.engine.heal.repair.Repairer`.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from resilient.agents.research import ResearchAgent
from resilient.engine.activities import Engine, Tuning
from resilient.engine.heal.repair import Repairer, RepairPolicy, Throttle, Verdict
from resilient.engine.orchestration import orchestrator as orch
from resilient.http.service import ResponsesService
from resilient.protocol.events import TERMINAL_EVENT_TYPES, validate_event
from resilient.protocol.items import text_of
from resilient.settings import Settings
from resilient.storage.controls import ControlBoard
from resilient.storage.factory import Storage
from resilient.storage.feed import CommittedFeed
from tests.durable_standin import Durable, Injected
from tests.integration.conftest import new_conversation
from tests.memory_storage import MemoryBackend, build_memory_storage

pytestmark = pytest.mark.slow(seconds=30)  # about that long in all; see tests/conftest.py

QUESTION = "How does a run come back after its orchestration died?"
WAIT_S = 30.0


@pytest.fixture(scope="module")
def settings() -> Settings:
    return Settings.from_env({
        "AzureWebJobsStorage": os.environ.get("AzureWebJobsStorage", "UseDevelopmentStorage=true"),
        "RESILIENT_STORAGE_PREFIX": "p" + secrets.token_hex(4),
        "RESILIENT_AGENT_DELTA_DELAY_MS": "0",
        "RESILIENT_STEERABLE_CONVERSATIONS": "true",
    })


@pytest.fixture(scope="module")
def storage() -> Storage:
    """In memory: these tests exercise the engine and the service, not storage (the contract tests in
    test_eventlog/test_items/test_responses hold the memory adapter to the Azurite one)."""
    return build_memory_storage(MemoryBackend(), feed=CommittedFeed(), controls=ControlBoard())


@dataclass
class Rig:
    storage: Storage
    engine: Engine
    durable: Durable
    service: ResponsesService
    offset: list[float] = field(default_factory=lambda: [0.0])  # added to the repairer's clock

    def repairer(self, policy: RepairPolicy | None = None, **overrides: Any) -> Repairer:
        base = RepairPolicy(missing_grace_seconds=60.0, cooldown_seconds=15.0, min_age_seconds=0.0)
        chosen = policy or RepairPolicy(**{**base.__dict__, **overrides})
        return Repairer(self.storage, self.durable, self.engine.finalize, chosen,
                        clock=lambda: time.time() + self.offset[0], throttle=Throttle())


@pytest.fixture
def rig(storage: Storage, settings: Settings) -> Rig:
    engine = Engine(storage, ResearchAgent(settings), settings,
                    Tuning(flush_interval_s=0.02, control_interval_s=0.05))
    durable = Durable(engine, timer_scale=0.01)
    return Rig(storage, engine, durable, ResponsesService(storage, durable, settings))


def _knobs(phases: int, words: int, delay_ms: int) -> dict[str, str]:
    return {"research_phases": str(phases), "words_per_phase": str(words), "delta_delay_ms": str(delay_ms)}


async def _create(rig: Rig, *, phases: int = 3, words: int = 8, delay_ms: int = 15, **body: Any) -> str:
    payload = {"model": "m", "input": QUESTION, "background": True, "metadata": _knobs(phases, words, delay_ms),
               **body}
    result = await rig.service.create(json.dumps(payload).encode())
    assert result.status == 200, result.body
    return str(result.body["id"])


async def _events(storage: Storage, rid: str) -> list[dict[str, Any]]:
    return [e.json() for e in (await storage.events.read_after(rid, -1)).events]


async def _until(predicate: Callable[[], Any], timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not reached in time")


async def _mid_phase(rig: Rig, rid: str, index: int) -> None:
    """Wait until phase ``index`` has streamed a few deltas (and every earlier phase is checkpointed)."""
    async def there() -> bool:
        deltas = [e for e in await _events(rig.storage, rid)
                  if e["type"] == "response.output_text.delta" and e["output_index"] == index]
        return len(deltas) >= 3
    await _until(there)


async def _indexed(storage: Storage) -> set[str]:
    return {entry.response_id for entry in await storage.active.list(10_000)}


async def _final_texts(storage: Storage, rid: str) -> list[str]:
    return [text_of(item) for item in await storage.items.list_output_items(rid)]


def _check_log(events: list[dict[str, Any]]) -> None:
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    kinds = [e["type"] for e in events]
    assert kinds.count("response.created") == 1
    assert sum(k in TERMINAL_EVENT_TYPES for k in kinds) == 1 and kinds[-1] in TERMINAL_EVENT_TYPES
    for event in events:
        validate_event(event)


async def _clean_texts(rig: Rig, phases: int = 3, words: int = 8) -> list[str]:
    rid = await _create(rig, phases=phases, words=words, delay_ms=0)
    await rig.durable.wait(rid, WAIT_S)
    return await _final_texts(rig.storage, rid)


# ------------------------------------------------------------------------------------------- the index
async def test_create_indexes_the_response_and_finalize_drops_it(rig: Rig) -> None:
    rid = await _create(rig, delay_ms=20)
    assert rid in await _indexed(rig.storage)
    assert await rig.durable.wait(rid, WAIT_S) == {"status": "completed"}
    assert rid not in await _indexed(rig.storage)


async def test_a_finished_run_left_in_the_index_is_only_dropped(rig: Rig) -> None:
    rid = await _create(rig, phases=1, delay_ms=0)
    await rig.durable.wait(rid, WAIT_S)
    await rig.storage.active.add(rid, time.time() - 3600)  # a finalize that could not drop it
    verdict = await rig.repairer().check(rid)
    assert verdict.action == "finished"
    assert rid not in await _indexed(rig.storage)
    assert [s for s in rig.durable.starts if s[0] == rid] == [
        (rid, {"response_id": rid, "chain_id": rid, orch.OWNS_LOCK_KEY: True})]  # only the create's start


async def test_a_deleted_response_leaves_the_index(rig: Rig) -> None:
    rid = await _create(rig, phases=1, delay_ms=0)
    await rig.durable.wait(rid, WAIT_S)
    await rig.service.delete(rid)
    await rig.storage.active.add(rid, time.time())
    assert (await rig.repairer().check(rid)).action == "finished"
    assert rid not in await _indexed(rig.storage)


# ---------------------------------------------------------------------------------------- resuming runs
async def test_a_running_orchestration_is_left_alone(rig: Rig) -> None:
    rid = await _create(rig, delay_ms=20)
    await _mid_phase(rig, rid, 0)
    assert (await rig.repairer().check(rid)).action == "running"
    assert len([s for s in rig.durable.starts if s[0] == rid]) == 1
    await rig.durable.wait(rid, WAIT_S)


@pytest.mark.parametrize("how", ["Failed", "Terminated"])
async def test_a_dead_orchestration_resumes_from_its_last_checkpoint(rig: Rig, how: str) -> None:
    clean = await _clean_texts(rig, words=24)
    rid = await _create(rig, words=24, delay_ms=15)
    await _mid_phase(rig, rid, 1)
    await rig.durable.kill(rid, how)  # its worker died with it: the phase in flight is gone too
    at_kill = await _events(rig.storage, rid)
    opened = [e["output_index"] for e in at_kill if e["type"] == "response.output_item.added"]
    closed = [e["output_index"] for e in at_kill if e["type"] == "response.output_item.done"]
    interrupted = opened[-1] if opened[-1] not in closed else None  # phase 1, unless the machine is slow
    verdict = await rig.repairer().check(rid)
    assert verdict == Verdict(rid, "restarted", how)
    assert rig.durable.starts[-1] == (rid, {"response_id": rid, "chain_id": rid, "repair": 1,
                                            orch.OWNS_LOCK_KEY: True})  # a root: its lock is its own
    assert await rig.durable.wait(rid, WAIT_S) == {"status": "completed"}
    events = await _events(rig.storage, rid)
    _check_log(events)
    assert events[-1]["type"] == "response.completed"
    # Only the interrupted phase ran again, after one recovery reset carrying the phases before it.
    resets = [e for e in events if e["type"] == "response.in_progress"][1:]
    openings = [e["output_index"] for e in events if e["type"] == "response.output_item.added"]
    if interrupted is None:
        assert resets == [] and openings == [0, 1, 2]
    else:
        assert len(resets) == 1 and len(resets[0]["response"]["output"]) == interrupted
        assert openings == [0, 1, 2, 3]  # the rerun streams at a fresh index (the stream helper needs it)
        closed_early = [e for e in events if e["type"] == "response.output_item.done"
                        and e["output_index"] == interrupted]
        assert closed_early[0]["item"]["status"] == "incomplete"  # the interrupted item is closed first
    assert await _final_texts(rig.storage, rid) == clean
    record = await rig.storage.responses.get(rid)
    assert record.status == "completed" and record.doc["repair"]["count"] == 1
    assert record.doc["repair"]["found"] == how
    assert rid not in await _indexed(rig.storage)


async def test_a_missing_orchestration_waits_out_its_grace_period_then_starts(rig: Rig) -> None:
    rid = await _create(rig, phases=2, delay_ms=5)
    await _mid_phase(rig, rid, 0)
    await rig.durable.kill(rid, None)  # no instance at all (its history was purged, or it never started)
    repairer = rig.repairer(missing_grace_seconds=60.0)
    assert (await repairer.check(rid)).action == "starting"
    rig.offset[0] = 61.0
    assert (await repairer.check(rid)).action == "restarted"
    assert await rig.durable.wait(rid, WAIT_S) == {"status": "completed"}
    _check_log(await _events(rig.storage, rid))


async def test_an_orchestration_that_completed_without_finalizing_is_restarted(
        rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    """finalize kept failing for minutes (in the last phase, then in the finalize step): the orchestration
    returned ``unfinalized``, the row is active."""
    engine = rig.durable.engine
    concluding = engine.finalize

    async def unavailable(response_id: str, outcome: dict[str, Any]) -> dict[str, Any]:
        raise ConnectionError("storage unavailable")

    monkeypatch.setattr(engine, "finalize", unavailable)  # the last phase cannot conclude the run
    rid = await _create(rig, phases=1, delay_ms=0)
    rig.durable.inject[(rid, orch.FINALIZE)] = [Injected("storage unavailable")] * orch.FINALIZE_ATTEMPTS
    output = await rig.durable.wait(rid, WAIT_S)
    monkeypatch.setattr(engine, "finalize", concluding)
    assert output["status"] == "unfinalized"
    assert (await rig.storage.responses.get_control(rid)).status == "in_progress"
    assert await rig.durable.status(rid) == "Completed"
    assert (await rig.repairer().check(rid)).action == "restarted"
    assert await rig.durable.wait(rid, WAIT_S) == {"status": "completed"}
    _check_log(await _events(rig.storage, rid))


async def test_a_zombie_activity_of_the_dead_execution_is_fenced_off(rig: Rig) -> None:
    """The orchestration died but its activity goes on (another worker): the new execution's phase and
    the zombie race for the log; the append fencing lets exactly one stream continue."""
    clean = await _clean_texts(rig, words=30)
    rid = await _create(rig, words=30, delay_ms=10)
    await _mid_phase(rig, rid, 1)
    await rig.durable.kill(rid, "Failed", activities=False)
    assert (await rig.repairer().check(rid)).action == "restarted"
    assert await rig.durable.wait(rid, WAIT_S) == {"status": "completed"}
    await asyncio.sleep(0.5)  # let the zombie hit its fence (or finish) before reading the log
    events = await _events(rig.storage, rid)
    _check_log(events)
    assert await _final_texts(rig.storage, rid) == clean


# -------------------------------------------------------------------------------------- never two writers
async def test_concurrent_checks_start_exactly_one_new_execution(rig: Rig) -> None:
    rid = await _create(rig, delay_ms=15)
    await _mid_phase(rig, rid, 0)
    await rig.durable.kill(rid, "Failed")
    before = len(rig.durable.starts)
    verdicts = await asyncio.gather(*(rig.repairer().check(rid) for _ in range(5)))
    actions = sorted(v.action for v in verdicts)
    assert actions.count("restarted") == 1, actions
    assert set(actions) <= {"restarted", "raced", "cooling", "running"}, actions
    assert len(rig.durable.starts) == before + 1
    assert await rig.durable.wait(rid, WAIT_S) == {"status": "completed"}
    _check_log(await _events(rig.storage, rid))


async def test_a_second_check_never_starts_over_a_running_execution(rig: Rig) -> None:
    rid = await _create(rig, delay_ms=20)
    await _mid_phase(rig, rid, 0)
    await rig.durable.kill(rid, "Failed")
    repairer = rig.repairer(cooldown_seconds=0.0)
    assert (await repairer.check(rid)).action == "restarted"
    for _ in range(3):
        assert (await repairer.check(rid)).action == "running"
    assert len([s for s in rig.durable.starts if s[0] == rid]) == 2
    await rig.durable.wait(rid, WAIT_S)


async def test_a_repair_cools_down_before_the_next_one(rig: Rig) -> None:
    rid = await _create(rig, delay_ms=20)
    await _mid_phase(rig, rid, 0)
    await rig.durable.kill(rid, "Failed")
    repairer = rig.repairer(cooldown_seconds=15.0)
    assert (await repairer.check(rid)).action == "restarted"
    await rig.durable.kill(rid, "Failed")  # the new execution dies at once too
    assert (await repairer.check(rid)).action == "cooling"
    rig.offset[0] = 16.0
    assert (await repairer.check(rid)).action == "restarted"
    assert (await rig.storage.responses.get(rid)).doc["repair"]["count"] == 2
    assert await rig.durable.wait(rid, WAIT_S) == {"status": "completed"}


async def test_a_run_that_keeps_dying_is_given_up_failed_and_its_chain_freed(rig: Rig) -> None:
    rid = await _create(rig, delay_ms=20)
    await _mid_phase(rig, rid, 0)
    repairer = rig.repairer(max_repairs=2, cooldown_seconds=0.0)
    for _ in range(2):
        await rig.durable.kill(rid, "Failed")
        assert (await repairer.check(rid)).action == "restarted"
        await _until(lambda: _is_running(rig, rid))
    await rig.durable.kill(rid, "Failed")
    verdict = await repairer.check(rid)
    assert verdict.action == "gave_up"
    record = await rig.storage.responses.get(rid)
    assert record.status == "failed" and "restarted 2 times" in record.doc["error"]["message"]
    events = await _events(rig.storage, rid)
    _check_log(events)
    assert events[-1]["type"] == "response.failed"
    assert rig.durable.signals[-1] == (orch.CHAIN_LOCK_ENTITY, rid, "remove", {"response_id": rid})
    assert rig.durable.entity_state(rid) == {"active": None, "queue": []}
    assert rid not in await _indexed(rig.storage)
    assert (await repairer.check(rid)).action == "finished"


async def _is_running(rig: Rig, rid: str) -> bool:
    return await rig.durable.status(rid) == "Running"


async def test_a_terminal_status_without_its_terminal_event_is_finished_by_a_repair_execution(rig: Rig) -> None:
    """Cancelled (the status is set at once) and the orchestration died before the run wrote its end."""
    slow = Engine(rig.storage, rig.engine.agent, rig.engine.settings, Tuning(control_interval_s=30.0))
    rig.durable.engine = slow  # the running phase will not notice the cancel flag before the kill
    rig.service.cancel_settle_seconds = 0.0  # the run does not react: the request sets the status itself
    rid = await _create(rig, words=200, delay_ms=20)
    await _mid_phase(rig, rid, 0)
    assert (await rig.service.cancel(rid)).body["status"] == "cancelled"
    await rig.durable.kill(rid, "Failed")
    assert (await _events(rig.storage, rid))[-1]["type"] not in TERMINAL_EVENT_TYPES
    before = len(rig.durable.activities[rid])
    assert (await rig.repairer().check(rid)).action == "restarted"
    output = await rig.durable.wait(rid, WAIT_S)
    assert output == {"status": "cancelled"}
    assert rig.durable.activities[rid][before:] == [orch.INSPECT, orch.FINALIZE]  # no plan, no phase
    events = await _events(rig.storage, rid)
    _check_log(events)
    assert events[-1]["type"] == "response.failed" and events[-1]["response"]["status"] == "cancelled"
    assert rig.durable.entity_state(rid) == {"active": None, "queue": []}


# --------------------------------------------------------------------------------------------- chains
async def test_the_lock_is_handed_on_after_the_holder_is_repaired(rig: Rig) -> None:
    conv = await new_conversation(rig.storage)
    first = await _create(rig, phases=3, delay_ms=20, conversation=conv)
    await _mid_phase(rig, first, 0)
    second = await _create(rig, phases=1, delay_ms=0, conversation=conv)
    await _until(lambda: _queued(rig, conv, second))
    await rig.durable.kill(first, "Failed")
    assert rig.durable.entity_state(conv)["active"] == first  # the dead turn still holds the lock
    assert (await rig.repairer().check(first)).action == "restarted"
    assert (await rig.durable.wait(first, WAIT_S))["status"] == "completed"
    assert (await rig.durable.wait(second, WAIT_S))["status"] == "completed"
    assert rig.durable.plan_order.index(first) < rig.durable.plan_order.index(second)
    assert rig.durable.entity_state(conv) == {"active": None, "queue": []}


async def test_a_queued_turn_gets_its_dead_holder_restarted_without_any_client(rig: Rig) -> None:
    """Nobody reads the holder and no sweep runs: the queued turn's lock recheck inspects the holder, and
    inspecting an unfinished run asks the repair path to check its orchestration."""
    rig.durable.repairer = rig.repairer()
    conv = await new_conversation(rig.storage)
    first = await _create(rig, phases=3, delay_ms=20, conversation=conv)
    await _mid_phase(rig, first, 0)
    second = await _create(rig, phases=1, delay_ms=0, conversation=conv)
    await _until(lambda: _queued(rig, conv, second))
    await rig.durable.kill(first, "Terminated")
    assert (await rig.durable.wait(first, WAIT_S))["status"] == "completed"
    assert (await rig.durable.wait(second, WAIT_S))["status"] == "completed"
    assert (first, {"response_id": first, "chain_id": conv, "repair": 1}) in rig.durable.starts
    assert orch.INSPECT in rig.durable.activities[second]
    assert rig.durable.entity_state(conv) == {"active": None, "queue": []}


async def _queued(rig: Rig, chain: str, rid: str) -> bool:
    return rid in rig.durable.entity_state(chain)["queue"]


async def test_a_lost_grant_is_healed_by_the_queued_turns_recheck(rig: Rig) -> None:
    conv = await new_conversation(rig.storage)
    first = await _create(rig, phases=2, delay_ms=15, conversation=conv)
    await _mid_phase(rig, first, 0)
    second = await _create(rig, phases=1, delay_ms=0, conversation=conv)
    rig.durable.inject[(first, orch.WAKE_NEXT)] = [Injected("raise_event: 410 Gone")] * orch.FINALIZE_ATTEMPTS
    assert (await rig.durable.wait(first, WAIT_S))["status"] == "completed"  # wake failed: tolerated
    assert (await rig.durable.wait(second, WAIT_S))["status"] == "completed"
    assert orch.WAKE_NEXT in rig.durable.activities[first]
    assert rig.durable.entity_state(conv) == {"active": None, "queue": []}


async def test_a_lock_held_by_a_finished_turn_whose_orchestration_died_is_freed(rig: Rig) -> None:
    """The holder finalized, then its orchestration died before ``release``: its row is terminal, so the
    repair path does not restart it; the queued turn's recheck frees the lock on its behalf."""
    conv = await new_conversation(rig.storage)
    first = await _create(rig, phases=2, delay_ms=15, conversation=conv)
    await _mid_phase(rig, first, 0)
    second = await _create(rig, phases=1, delay_ms=0, conversation=conv)
    inner = rig.engine.finalize

    async def finalize_then_die(response_id: str, outcome: dict[str, Any], output: Any = None) -> dict[str, Any]:
        result = await inner(response_id, outcome, output)
        if response_id == first:
            asyncio.get_running_loop().call_soon(lambda: asyncio.ensure_future(rig.durable.kill(first, "Failed")))
            await asyncio.sleep(0.1)
        return result

    rig.engine.finalize = finalize_then_die  # type: ignore[method-assign]
    await _until(lambda: _is_status(rig, first, "Failed"))
    assert rig.durable.entity_state(conv)["active"] == first
    assert (await rig.repairer().check(first)).action == "finished"  # nothing to resume
    assert (await rig.durable.wait(second, WAIT_S))["status"] == "completed"
    assert rig.durable.entity_state(conv) == {"active": None, "queue": []}


async def _is_status(rig: Rig, rid: str, status: str) -> bool:
    return await rig.durable.status(rid) == status


# ---------------------------------------------------------------------------------------- sweep, on demand
async def test_the_sweep_restarts_only_dead_runs_old_enough(rig: Rig) -> None:
    dead = await _create(rig, delay_ms=20)
    alive = await _create(rig, delay_ms=20)
    await _mid_phase(rig, dead, 0)
    await _mid_phase(rig, alive, 0)
    await rig.durable.kill(dead, "Failed")
    young = rig.repairer(min_age_seconds=3600.0)
    assert all(v.response_id not in (dead, alive) for v in await young.sweep())
    verdicts = {v.response_id: v.action for v in await rig.repairer().sweep()}
    assert verdicts[dead] == "restarted" and verdicts[alive] == "running"
    for rid in (dead, alive):
        assert await rig.durable.wait(rid, WAIT_S) == {"status": "completed"}


async def _polled_after_a_failed_orchestration(rig: Rig) -> tuple[str, ResponsesService, list[str]]:
    """A run whose orchestration failed mid-phase, a service with the repair path to poll it, and the list
    the Durable status calls are recorded in."""
    rid = await _create(rig, delay_ms=20)
    await _mid_phase(rig, rid, 0)
    await rig.durable.kill(rid, "Failed")
    calls: list[str] = []
    real_status = rig.durable.status

    async def counted(instance_id: str) -> str | None:
        calls.append(instance_id)
        return await real_status(instance_id)

    rig.durable.status = counted  # type: ignore[method-assign]
    return rid, ResponsesService(rig.storage, rig.durable, rig.engine.settings, repairer=rig.repairer()), calls


async def test_a_poll_of_a_stuck_response_repairs_it_and_is_throttled(rig: Rig) -> None:
    rid, service, calls = await _polled_after_a_failed_orchestration(rig)
    for _ in range(5):
        assert (await service.retrieve(rid, {}, {})).status == 200
    assert calls == [rid]  # one status call for five polls
    assert rig.durable.starts[-1][1]["repair"] == 1
    assert await rig.durable.wait(rid, WAIT_S) == {"status": "completed"}


async def test_a_poll_skips_the_check_while_the_run_is_expected_in_this_process(rig: Rig) -> None:
    """While the run's next activity is expected here (its create or last activity ran here), a poll does
    not spend a Durable status call; the first poll after that window checks, and repairs."""
    rid, service, calls = await _polled_after_a_failed_orchestration(rig)
    rig.storage.feed.expect(rid, 60.0)
    try:
        for _ in range(3):
            assert (await service.retrieve(rid, {}, {})).status == 200
        assert calls == []  # no check while the run is expected here
    finally:
        rig.storage.feed.expect(rid, 0)
    assert (await service.retrieve(rid, {}, {})).status == 200
    assert calls == [rid]  # the skipped polls did not use up the throttle
    assert rig.durable.starts[-1][1]["repair"] == 1
    assert await rig.durable.wait(rid, WAIT_S) == {"status": "completed"}


async def test_a_reconnecting_stream_that_sees_no_progress_gets_the_run_resumed(rig: Rig) -> None:
    rid = await _create(rig, delay_ms=15)
    await _mid_phase(rig, rid, 1)
    await rig.durable.kill(rid, "Failed")
    service = ResponsesService(rig.storage, rig.durable, rig.engine.settings, repairer=rig.repairer())
    result = await service.retrieve(rid, {"stream": "true", "starting_after": "2"}, {})
    assert result.stream is not None
    seen: list[int] = []
    async with asyncio.timeout(WAIT_S):
        async for frame in result.stream:
            seen += [int(line[4:]) for line in frame.split(b"\n") if line.startswith(b"id: ")]
    events = await _events(rig.storage, rid)
    _check_log(events)
    assert seen == list(range(3, len(events)))  # idle 2 s → repair → the rest of the run, then the end
    assert rig.durable.starts[-1][0] == rid and rig.durable.starts[-1][1]["repair"] == 1
