"""The store=false clean-up pieces against Azurite: forget, abandon, the history purge and the sweep."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from resilient.engine.heal import unstored
from resilient.http.service import HttpResult, ResponsesService, guarded
from resilient.ids import new_response_id
from resilient.settings import Settings
from resilient.storage.factory import Storage
from resilient.storage.ports import ACTIVE_STATUSES
from tests.integration.conftest import new_conversation
from tests.memory_storage import MemoryBackend

pytestmark = pytest.mark.azurite
STORAGE_ADAPTERS = ("azurite", "memory")  # also the chain/deletion contract of both adapters


async def _stored(storage: Storage, rid: str, status: str = "completed") -> None:
    big = "x" * 70_000  # spills to a blob (a Table string holds 64 KiB)
    await storage.items.put_input_items(rid, [{"id": "msg_1", "type": "message", "role": "user",
                                               "status": "completed", "content": [{"type": "input_text",
                                                                                   "text": big}]}])
    await storage.responses.create(rid, "in_progress", {"created_at": 1, "store": False, "instructions": big})
    await storage.events.create(rid, [{"type": "response.created"}])
    if status != "in_progress":
        await storage.responses.transition(rid, status, allowed_from=ACTIVE_STATUSES)


async def _left(storage: Storage, rid: str) -> list[str]:
    """What of ``rid`` is still in the account: table rows and blobs of every container."""
    clients = storage.clients
    if isinstance(clients, MemoryBackend):  # the same question of the in-memory "account"
        return [f"{kind}:{rid}" for kind, rows in clients.describe_rows().items() if rid in rows]
    left: list[str] = []
    for table in clients.table_names:
        left += [f"{table}:{e['RowKey']}" async for e in clients.table(table).query_entities(
            "PartitionKey eq @pk", parameters={"pk": rid})]
    for container in clients.container_names:
        left += [f"{container}:{b.name}" async for b in clients.container(container).list_blobs(
            name_starts_with=rid)]
    return left


async def test_forget_deletes_rows_items_log_and_spilled_blobs_and_can_repeat(storage: Storage) -> None:
    rid = new_response_id()
    await _stored(storage, rid)
    before = await _left(storage, rid)
    if isinstance(storage.clients, MemoryBackend):  # no spill in memory: the row, its items and its log
        assert {x.split(":")[0] for x in before} >= {"responses", "items", "logs"}, before
    else:
        assert any("-spill:" in x for x in before) and any("-events:" in x for x in before), before
    await unstored.forget(storage, rid)
    assert await _left(storage, rid) == []
    await unstored.forget(storage, rid)  # a re-delivered activity, or the sweep after it
    assert await _left(storage, rid) == []


async def test_abandon_flags_a_running_response_and_leaves_a_finished_one(storage: Storage) -> None:
    """The cancel flag, as a cancel raises it: the running phase stops at its next delta and the run sets
    ``cancelled`` itself once its partial item is checkpointed."""
    running, finished = new_response_id(), new_response_id()
    await _stored(storage, running, "in_progress")
    await _stored(storage, finished, "completed")
    await unstored.abandon(storage, running)
    await unstored.abandon(storage, finished)
    await unstored.abandon(storage, new_response_id())  # already forgotten: nothing to do, no error
    control = await storage.responses.get_control(running)
    assert (control.status, control.cancel_requested) == ("in_progress", True)
    finished_control = await storage.responses.get_control(finished)
    assert (finished_control.status, finished_control.cancel_requested) == ("completed", False)


class FakeHistory:
    """A Durable management API with scripted runtime statuses."""

    def __init__(self, statuses: list[str | None], finished: list[str] | None = None) -> None:
        self.statuses = statuses
        self.finished = finished or []
        self.purged: list[str] = []
        self.asked_before: datetime | None = None

    async def runtime_status(self, instance_id: str) -> str | None:
        return self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]

    async def purge(self, instance_id: str) -> None:
        self.purged.append(instance_id)

    async def finished_unstored(self, created_before: datetime) -> list[str]:
        self.asked_before = created_before
        return list(self.finished)


async def _no_sleep(_: float) -> None:
    return None


async def test_history_is_purged_only_once_the_orchestration_finished() -> None:
    history = FakeHistory(["Running", "Running", "Completed"])
    assert await unstored.purge_history_when_done(history, "resp_x", sleep=_no_sleep)
    assert history.purged == ["resp_x"] and history.statuses == ["Completed"]


async def test_history_purge_gives_up_on_a_run_that_never_finishes_and_skips_a_purged_one() -> None:
    stuck = FakeHistory(["Running"])
    assert not await unstored.purge_history_when_done(stuck, "resp_x", wait_seconds=0.05)
    assert stuck.purged == []
    gone = FakeHistory([None])
    assert await unstored.purge_history_when_done(gone, "resp_x", sleep=_no_sleep)
    assert gone.purged == []


async def test_sweep_forgets_and_purges_finished_unstored_runs(storage: Storage) -> None:
    leftover, other = new_response_id(), new_response_id()
    await _stored(storage, leftover)
    await _stored(storage, other)
    history = FakeHistory(["Completed"], finished=[leftover])
    now = datetime(2026, 6, 1, tzinfo=UTC)
    assert await unstored.sweep(storage, history, now=now, older_than_seconds=600) == [leftover]
    assert history.asked_before == now - timedelta(seconds=600)
    assert history.purged == [leftover]
    assert await _left(storage, leftover) == []
    assert await _left(storage, other) != []  # not named by the management API: untouched


# ------------------------------------------------------------------------------ the HTTP side of store=false
class Runtime:
    """The Durable port of the service: records starts and raised events; can refuse to start."""

    def __init__(self, *, fail_start: bool = False) -> None:
        self.fail_start = fail_start
        self.started: dict[str, dict[str, Any]] = {}
        self.events: list[tuple[str, str, Any]] = []

    async def start(self, instance_id: str, payload: dict[str, Any]) -> None:
        self.started[instance_id] = payload
        if self.fail_start:
            raise RuntimeError("durable backend down")

    async def raise_event(self, instance_id: str, name: str, data: Any) -> None:
        self.events.append((instance_id, name, data))


async def _create(service: ResponsesService, **body: Any) -> HttpResult:
    return await service.create(json.dumps({"model": "m", "input": "q", **body}).encode())


async def test_a_store_false_turn_reads_its_chain_but_does_not_join_it(storage: Storage, settings: Settings) -> None:
    runtime = Runtime()
    service = ResponsesService(storage, runtime, dataclasses.replace(settings, unstored_grace_seconds=7))
    conv = await new_conversation(storage)
    root = (await _create(service, conversation=conv, background=True)).body["id"]
    chain_before = await storage.chains.get(conv)
    result = await _create(service, conversation=conv, store=False, stream=True)
    [rid] = [r for r in runtime.started if r != root]
    assert runtime.started[rid] == {"response_id": rid, "chain_id": None, "forget_after_seconds": 7}
    assert (await storage.responses.get(rid)).doc["previous_turn"] == root  # its history: the chain so far
    chain_after = await storage.chains.get(conv)
    assert (chain_after.latest_response_id, chain_after.open_turns) == (root, chain_before.open_turns)
    assert (await storage.responses.get_control(root)).pending_input_count == 0  # it steered nobody
    assert result.stream is not None
    await result.stream.aclose()  # never iterated: nothing to report yet (the grace timer covers it)
    await service.worker.detached.wait()
    assert runtime.events == []


async def test_a_client_leaving_a_store_false_stream_stops_the_run_and_reports(storage: Storage,
                                                                               settings: Settings) -> None:
    runtime = Runtime()
    service = ResponsesService(storage, runtime, settings)
    result = await _create(service, store=False, stream=True)
    assert result.stream is not None
    first = await anext(result.stream)
    assert b"response.created" in first
    await result.stream.aclose()  # the client went away after the first event
    await service.worker.detached.wait()
    [rid] = runtime.started
    assert runtime.events == [(rid, "client_done", {"delivered": False})]
    control = await storage.responses.get_control(rid)
    assert (control.status, control.cancel_requested) == ("cancelled", True)


async def test_a_store_false_response_whose_run_cannot_start_is_forgotten_at_once(storage: Storage,
                                                                                  settings: Settings) -> None:
    runtime = Runtime(fail_start=True)
    service = ResponsesService(storage, runtime, settings)
    answer = await guarded(_create(service, store=False))
    assert (answer.status, answer.body["error"]["code"]) == (503, "service_unavailable")
    [rid] = runtime.started
    assert await _left(storage, rid) == []


# ------------------------------------------------------------------ a store=false run whose orchestration died
async def test_a_repaired_store_false_run_still_deletes_itself(storage: Storage, settings: Settings) -> None:
    """The orchestration dies mid-run (Failed, as the real host leaves it when a worker dies during an
    episode); the repair path starts a new execution, which must still end by deleting everything, since
    the request that could report its client gone died with the worker (grace timer, scaled here)."""
    from resilient.agents.research import ResearchAgent
    from resilient.engine.activities import Engine, Tuning
    from resilient.engine.heal.repair import Repairer, RepairPolicy, Throttle
    from tests.durable_standin import Durable

    tuned = dataclasses.replace(settings, agent_delta_delay_ms=15)
    engine = Engine(storage, ResearchAgent(tuned), tuned, Tuning(flush_interval_s=0.02, control_interval_s=0.05))
    durable = Durable(engine, timer_scale=0.01)
    service = ResponsesService(storage, durable, tuned)
    result = await _create(service, store=False, stream=True, metadata={"research_phases": "3",
                                                                        "words_per_phase": "24"})
    [rid] = [start[0] for start in durable.starts]
    assert durable.starts[0][1]["forget_after_seconds"] == settings.unstored_grace_seconds
    await _until_streaming(storage, rid)
    await durable.kill(rid, "Failed")
    repairer = Repairer(storage, durable, engine.finalize,
                        RepairPolicy(missing_grace_seconds=60.0, cooldown_seconds=15.0, min_age_seconds=0.0),
                        throttle=Throttle())
    verdict = await repairer.check(rid)
    assert verdict.action == "restarted"
    assert durable.starts[-1][1]["forget_after_seconds"] == settings.unstored_grace_seconds
    await durable.wait(rid, 60)
    assert await _left(storage, rid) == []
    assert rid not in {entry.response_id for entry in await storage.active.list(10_000)}
    assert result.stream is not None
    await result.stream.aclose()


async def _until_streaming(storage: Storage, rid: str) -> None:
    for _ in range(1500):
        if any(e.type == "response.output_text.delta" for e in (await storage.events.read_after(rid, -1)).events):
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the run never streamed")
