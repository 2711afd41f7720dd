"""Races at the service + engine level, on real Azurite, 100 repetitions each (R5, S1-S4, delete).

Nothing here mocks storage or the orchestration logic. :class:`Durable` plays the Durable runtime: it runs
the REAL orchestrator generator (``resilient.engine.orchestration.orchestrator.response_orchestrator``) step by step,
executes its activities with the real :class:`Engine`, answers its ``chain_lock`` entity calls with the
entity's own pure state machine (``chainlock.apply``, one operation at a time like a Durable entity), and
buffers external events (``cancel``, ``lock_granted``) the way Durable does for an instance that is not
waiting yet. ``ResponsesService`` starts an orchestration the moment it creates a response, so HTTP-level
calls (cancel, create, delete) race real runs; ``asyncio.gather`` fires the racing calls together, after a
seeded random jitter that spreads them over the whole run (before the first phase, mid-phase, inside
finalize, after the terminal event).

After every repetition, for every response involved:
* exactly one terminal status on the row and exactly one terminal event in the log, the log's last one,
  and the event's ``response.status`` equals the row's;
* sequence numbers 0..N contiguous, exactly one ``response.created``, and every event but the (many, alike)
  text deltas strictly valid for the ``openai`` client;
* a live SSE reader (``GET /responses/{id}?stream=true`` logic) attached right after create saw exactly the
  stored events (no lost, duplicated or reordered event);
* every orchestration finished (no turn active forever), no activity failed, the chain-lock entity is free
  (``active`` None, empty queue); every ``PROBE_EVERY``-th repetition also runs a fresh turn on the same
  chain to completion and checks the chain row lists only it as open.
Repetitions run ``CONCURRENCY`` at a time on distinct chains (which also keeps Azurite busy, like a real
host), each bounded by ``REP_TIMEOUT_S``. ``RACE_REPETITIONS``/``RACE_CONCURRENCY``/``RACE_SEED`` override the
defaults; a failure names its repetition and seed. A last test widens finalize's window (terminal status
written, terminal event not yet) past the SSE tail's idle check: a live reader must still get the event.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import random
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from resilient.agents.research import ResearchAgent
from resilient.engine.activities import Engine, Tuning
from resilient.engine.chain import conversations
from resilient.http.service import HttpResult, ResponsesService
from resilient.protocol.errors import ApiError
from resilient.protocol.events import TERMINAL_EVENT_TYPES, validate_event
from resilient.settings import Settings
from resilient.storage.controls import ControlBoard
from resilient.storage.errors import NotFound
from resilient.storage.factory import Storage, open_storage
from resilient.storage.feed import CommittedFeed
from resilient.storage.ports import JsonDict
from tests.durable_standin import Durable

pytestmark = [pytest.mark.azurite, pytest.mark.slow(seconds=65)]

REPETITIONS = int(os.environ.get("RACE_REPETITIONS", "100"))
CONCURRENCY = int(os.environ.get("RACE_CONCURRENCY", "10"))
REP_TIMEOUT_S = 45.0
PROBE_EVERY = 5  # every 5th repetition also runs a fresh turn on the chain afterwards
SEED = int(os.environ.get("RACE_SEED", "20240611"))
TERMINAL = frozenset({"completed", "failed", "cancelled", "incomplete"})


# ------------------------------------------------------------------------------------------ Durable double
# ``Durable`` (tests/durable_standin.py) runs the real orchestrator over the real activities; see its docstring.


class RacingEngine(Engine):
    """The real engine, plus hooks that race an endpoint call against one activity: the hook registered
    for ``(response_id, activity)`` is fired together with that activity (``asyncio.gather``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hooks: dict[tuple[str, str], Callable[[], Awaitable[Any]]] = {}

    async def _raced(self, key: tuple[str, str], call: Awaitable[JsonDict]) -> JsonDict:
        hook = self.hooks.pop(key, None)
        if hook is None:
            return await call
        result, _ = await asyncio.gather(call, hook())
        return result

    async def finalize(self, response_id: str, outcome: JsonDict, output: Any = None) -> JsonDict:
        return await self._raced((response_id, "finalize"), super().finalize(response_id, outcome, output))

    async def run_phase(self, response_id: str, index: int, **flags: bool) -> JsonDict:
        # the first phase also plans, the last one concludes through ``finalize`` above (its race point)
        return await self._raced((response_id, f"run_phase:{index}"),
                                 super().run_phase(response_id, index, **flags))


class HoldableEvents:
    """The engine's view of the event log: the next ``open_writer`` for a response can be held for a while.
    Finalize opens its writer right after its status CAS, so holding it widens the window in which the
    row is terminal but the terminal event is not written yet."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.hold: dict[str, float] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def open_writer(self, response_id: str) -> Any:
        await asyncio.sleep(self.hold.pop(response_id, 0.0))
        return await self._inner.open_writer(response_id)

    def take_writer(self, response_id: str) -> Any:
        if response_id in self.hold:
            return None  # no kept writer: the engine opens one, and that is held
        return self._inner.take_writer(response_id)


# ------------------------------------------------------------------------------------------------ fixtures
@dataclass
class Rig:
    storage: Storage
    engine: RacingEngine
    durable: Durable
    service: ResponsesService
    readers: dict[str, asyncio.Task[list[int]]] = field(default_factory=dict)


@pytest.fixture(scope="module")
def race_settings() -> Settings:
    return Settings.from_env({
        "AzureWebJobsStorage": os.environ.get("AzureWebJobsStorage", "UseDevelopmentStorage=true"),
        "RESILIENT_STORAGE_PREFIX": "r" + secrets.token_hex(4),
        "RESILIENT_AGENT_DELTA_DELAY_MS": "0",
        "RESILIENT_STEERABLE_CONVERSATIONS": "true",
    })


@pytest.fixture(scope="module")
async def race_storage(race_settings: Settings) -> Any:
    opened = await open_storage(race_settings, feed=CommittedFeed(), controls=ControlBoard())
    try:
        yield opened
    finally:
        await opened.clients.delete_all()
        await opened.close()


@pytest.fixture
def rig(race_storage: Storage, race_settings: Settings) -> Rig:
    engine_storage = dataclasses.replace(race_storage, events=HoldableEvents(race_storage.events))
    engine = RacingEngine(engine_storage, ResearchAgent(race_settings), race_settings,
                          Tuning(flush_interval_s=0.03, control_interval_s=0.04))
    durable = Durable(engine)
    return Rig(race_storage, engine, durable, ResponsesService(race_storage, durable, race_settings))


# ------------------------------------------------------------------------------------------------- helpers
def _knobs(phases: int, words: int, delay_ms: int) -> dict[str, str]:
    return {"research_phases": str(phases), "words_per_phase": str(words), "delta_delay_ms": str(delay_ms)}


async def _conv(rig: Rig) -> str:
    """A conversation created as ``POST /conversations`` creates it (a turn's ``conversation`` must exist)."""
    return (await conversations.create(rig.storage, {}, [])).conversation_id


async def _create(rig: Rig, *, phases: int = 2, words: int = 6, delay_ms: int = 4, reader: bool = True,
                  **body: Any) -> str:
    """POST /responses (background) through the service; a live SSE reader attaches right away."""
    body = {"model": "m", "input": "Why do races matter?", "background": True,
            "metadata": _knobs(phases, words, delay_ms), **body}
    result = await rig.service.create(json.dumps(body).encode())
    assert result.status == 200, result.body
    rid = str(result.body["id"])
    if reader:
        rig.readers[rid] = asyncio.create_task(_read_stream(rig.service, rid))
    return rid


async def _read_stream(service: ResponsesService, rid: str) -> list[int]:
    """A live SSE client (``GET /responses/{id}?stream=true``): the sequence numbers it got, in order."""
    try:
        result = await service.retrieve(rid, {"stream": "true"}, {})
    except ApiError as error:
        assert error.status == 404, error  # deleted before the reader attached
        return []
    assert result.stream is not None
    seen: list[int] = []
    async for frame in result.stream:
        for line in frame.split(b"\n"):
            if line.startswith(b"id: "):
                seen.append(int(line[4:]))
    return seen


async def _call(call: Awaitable[HttpResult]) -> tuple[int, Any]:
    """An endpoint call as (status, body); an ApiError becomes its status and wire body."""
    try:
        result = await call
    except ApiError as error:
        body = error.body()
        assert set(body["error"]) == {"message", "type", "code", "param"}
        return error.status, body
    return result.status, result.body


async def _jitter(rng: random.Random, high_s: float) -> None:
    if rng.random() < 0.25:
        return  # a quarter of the time: no delay at all, the tightest race
    await asyncio.sleep(rng.uniform(0.0, high_s))


async def _events(storage: Storage, rid: str) -> list[JsonDict]:
    return [e.json() for e in (await storage.events.read_after(rid, -1)).events]


async def _settle(rig: Rig, rids: list[str]) -> dict[str, Any]:
    """Wait (bounded) for every turn's orchestration to end: no turn may stay active forever."""
    outputs = {}
    for rid in rids:
        try:
            outputs[rid] = await rig.durable.wait(rid, REP_TIMEOUT_S)
        except TimeoutError:
            raise AssertionError(f"turn {rid} still running after {REP_TIMEOUT_S}s: "
                                 f"activities {rig.durable.activities[rid]}") from None
    return outputs


async def _check_response(rig: Rig, rid: str, orchestration_output: Any) -> JsonDict:
    """One terminal status, one terminal event (the last), contiguous valid log, the reader saw it all."""
    record = await rig.storage.responses.get(rid)
    assert record.status in TERMINAL, (rid, record.status)
    events = await _events(rig.storage, rid)
    sequence = [e["sequence_number"] for e in events]
    assert sequence == list(range(len(events))), (rid, sequence)
    kinds = [e["type"] for e in events]
    assert kinds[0] == "response.created" and kinds.count("response.created") == 1, kinds
    assert sum(k in TERMINAL_EVENT_TYPES for k in kinds) == 1, kinds
    assert kinds[-1] in TERMINAL_EVENT_TYPES, kinds
    assert events[-1]["response"]["status"] == record.status, (rid, kinds[-1], record.status)
    if record.status == "cancelled":
        assert kinds[-1] == "response.failed"
    for event in events:
        if event["type"] != "response.output_text.delta":  # deltas are many and alike: keep the check cheap
            validate_event(event)
    stored_output = [item["id"] for item in await rig.storage.items.list_output_items(rid)]
    assert [item["id"] for item in events[-1]["response"]["output"]] == stored_output
    assert orchestration_output == {"status": record.status}, (rid, orchestration_output, record.status)
    if rid in rig.readers:
        seen = await asyncio.wait_for(rig.readers.pop(rid), REP_TIMEOUT_S)
        assert seen == sequence, f"live reader of {rid} saw {seen}, the log holds {sequence}"
    return {"status": record.status, "events": events, "doc": record.doc, "output": stored_output}


async def _check_chain(rig: Rig, chain_id: str, rids: list[str], *, probe: bool) -> None:
    """No activity failed and the chain-lock entity is free; with ``probe``, a fresh turn on the chain
    still acquires the lock, runs to completion, and the chain row lists only it as open."""
    failures = [e for e in rig.durable.activity_errors if e[0] in rids]
    assert not failures, failures
    assert rig.durable.entity_state(chain_id) == {"active": None, "queue": []}, rig.durable.entity_state(chain_id)
    if not probe:
        return
    if chain_id.startswith("conv_"):
        turn = await _create(rig, phases=1, words=2, delay_ms=0, input="probe", conversation=chain_id,
                             reader=False)
    else:
        latest = (await rig.storage.chains.get(chain_id)).latest_response_id or chain_id
        turn = await _create(rig, phases=1, words=2, delay_ms=0, input="probe", previous_response_id=latest,
                             reader=False)
    outputs = await _settle(rig, [turn])
    checked = await _check_response(rig, turn, outputs[turn])
    assert checked["status"] == "completed" and len(checked["output"]) == 1
    assert rig.durable.entity_state(chain_id) == {"active": None, "queue": []}
    chain = await rig.storage.chains.get(chain_id)
    assert chain.latest_response_id == turn and chain.open_turns == (turn,), chain


class RaceAt:
    """Fires an action, racing the run of one response, at a random point: right after create, together
    with one of its phases or with its finalize (after a random 0-``spread_s`` delay), or after its end."""

    def __init__(self, rig: Rig, rng: random.Random, rid: str, phases: int, spread_s: float = 0.03) -> None:
        self.rig, self.rng, self.rid, self.spread_s = rig, rng, rid, spread_s
        self.point = rng.choice(["after create", *(f"run_phase:{i}" for i in range(phases)), "finalize",
                                 "after end"])
        self.fired = asyncio.Event()

    async def arm(self, action: Callable[[], Awaitable[None]]) -> None:
        async def fire() -> None:
            await _jitter(self.rng, self.spread_s)
            await action()
            self.fired.set()

        if self.point == "after create":
            await fire()
        elif self.point == "after end":
            await _settle(self.rig, [self.rid])
            await fire()
        else:
            self.rig.engine.hooks[(self.rid, self.point)] = fire

    async def wait(self) -> None:
        await asyncio.wait_for(self.fired.wait(), REP_TIMEOUT_S)


async def _repeat(rig: Rig, name: str, one: Callable[[Rig, random.Random, bool], Awaitable[str]]) -> dict[str, int]:
    """Run ``one`` REPETITIONS times, at most CONCURRENCY at once (every PROBE_EVERY-th with a chain probe); stop
    everything at the first failure. Returns how often each outcome occurred."""
    outcomes: dict[str, int] = {}
    gate = asyncio.Semaphore(CONCURRENCY)

    async def run(index: int) -> None:
        async with gate:
            rng = random.Random(f"{SEED}-{name}-{index}")
            try:
                outcome = await asyncio.wait_for(one(rig, rng, index % PROBE_EVERY == 0), REP_TIMEOUT_S * 3)
            except Exception as error:
                raise AssertionError(f"{name} repetition {index} (RACE_SEED={SEED}) failed: {error!r}") from error
            outcomes[outcome] = outcomes.get(outcome, 0) + 1

    async with asyncio.TaskGroup() as group:
        for index in range(REPETITIONS):
            group.create_task(run(index))
    assert sum(outcomes.values()) == REPETITIONS
    print(f"{name}: {dict(sorted(outcomes.items()))}")
    return outcomes


# --------------------------------------------------------------------------------------------------- races
async def test_cancel_races_completion(rig: Rig) -> None:
    """R5: a cancel fired together with finalize: exactly one of them wins, on the row and in the log,
    and the cancel's answer agrees with the outcome (200 cancelled, or 409 already completed)."""

    async def one(rig: Rig, rng: random.Random, probe: bool) -> str:
        answers: list[tuple[int, Any]] = []
        rid = await _create(rig, phases=1, words=rng.randint(2, 8), delay_ms=1)

        async def cancel() -> None:
            await _jitter(rng, 0.015)
            answers.append(await _call(rig.service.cancel(rid)))

        rig.engine.hooks[(rid, "finalize")] = cancel
        outputs = await _settle(rig, [rid])
        checked = await _check_response(rig, rid, outputs[rid])
        [(status, body)] = answers
        if status == 200:
            assert body["status"] == "cancelled" and checked["status"] == "cancelled", (body, checked["status"])
        else:
            assert (status, body["error"]["param"]) == (409, "response_id"), body
            assert body["error"]["code"] == "response_already_finished", body
            assert checked["status"] == "completed"
        await _check_chain(rig, rid, [rid], probe=probe)
        return str(checked["status"])

    outcomes = await _repeat(rig, "cancel-vs-finalize", one)
    assert set(outcomes) <= {"completed", "cancelled"}, outcomes


async def test_cancel_races_a_steering_turn(rig: Rig) -> None:
    """S2/S4/R5: a new turn arrives on the chain while the running turn is being cancelled: the running
    turn ends exactly once (cancelled, or completed when it finished first), the new turn waits for the
    lock, then runs in full with the first turn as its history."""

    async def one(rig: Rig, rng: random.Random, probe: bool) -> str:
        conv = await _conv(rig)
        first = await _create(rig, input="first", conversation=conv)
        cancel_answer: list[tuple[int, Any]] = []
        second: list[str] = []

        async def cancel_and_steer() -> None:
            answer, turn = await asyncio.gather(
                _call(rig.service.cancel(first)),
                _create(rig, input="second", conversation=conv, phases=1, words=3, delay_ms=0))
            cancel_answer.append(answer)
            second.append(turn)

        race = RaceAt(rig, rng, first, phases=2)
        await race.arm(cancel_and_steer)
        await race.wait()
        outputs = await _settle(rig, [first, *second])
        a = await _check_response(rig, first, outputs[first])
        b = await _check_response(rig, second[0], outputs[second[0]])
        [(status, body)] = cancel_answer
        if status == 200:
            assert a["status"] == "cancelled" and body["status"] == "cancelled", (body, a["status"])
        else:
            assert status == 409 and a["status"] == "completed", (body, a["status"])
        assert b["status"] == "completed" and len(b["output"]) == 1  # nothing behind it: it ran in full
        assert b["doc"]["previous_turn"] == first
        await _check_chain(rig, conv, [first, second[0]], probe=probe)
        return f"{race.point}: first {a['status']}"

    outcomes = await _repeat(rig, "cancel-vs-steer", one)
    assert any("cancelled" in o for o in outcomes), outcomes


async def test_two_steering_turns_at_once_on_a_busy_chain(rig: Rig) -> None:
    """S1/S2: two turns arrive together while a third runs: the chain row orders them (the newer one's
    history starts at the other), every turn ends exactly once as completed, the newest runs in full
    (nobody steers it), and the chain is free afterwards."""

    async def one(rig: Rig, rng: random.Random, probe: bool) -> str:
        conv = await _conv(rig)
        first = await _create(rig, input="first", conversation=conv)
        turns: list[str] = []

        async def two_turns() -> None:
            turns.extend(await asyncio.gather(
                _create(rig, input="second", conversation=conv, phases=1, words=3, delay_ms=0),
                _create(rig, input="third", conversation=conv, phases=1, words=3, delay_ms=0)))

        race = RaceAt(rig, rng, first, phases=2)
        await race.arm(two_turns)
        await race.wait()
        rids = [first, *turns]
        outputs = await _settle(rig, rids)
        checked = {rid: await _check_response(rig, rid, outputs[rid]) for rid in rids}
        assert all(c["status"] == "completed" for c in checked.values()), checked
        newest = (await rig.storage.chains.get(conv)).latest_response_id
        assert newest in turns
        middle = turns[1] if newest == turns[0] else turns[0]
        assert checked[newest]["doc"]["previous_turn"] == middle
        assert checked[middle]["doc"]["previous_turn"] == first
        assert len(checked[newest]["output"]) == 1
        await _check_chain(rig, conv, rids, probe=probe)
        order = "in chain order" if _ran_before(rig, middle, newest) else "newest ran first"
        return f"{race.point}: {order}"

    await _repeat(rig, "steer-vs-steer", one)


def _ran_before(rig: Rig, a: str, b: str) -> bool:
    """Whether turn ``a`` got the chain lock before turn ``b`` (from the order their plans ran)."""
    return rig.durable.plan_order.index(a) < rig.durable.plan_order.index(b)


async def test_delete_races_an_in_flight_response(rig: Rig) -> None:
    """Delete is 409 while the response is in flight (also right after a cancel, until its run has
    written the terminal event) and never leaves a half-deleted response: either it stays intact and
    finishes normally, or it is entirely gone (row, items, log) while its run still ended normally and
    released the chain lock."""

    async def one(rig: Rig, rng: random.Random, probe: bool) -> str:
        conv = await _conv(rig)
        rid = await _create(rig, input="to delete", conversation=conv)
        cancel_first = rng.random() < 0.5
        answers: list[tuple[int, Any]] = []

        async def delete() -> None:
            if cancel_first:
                await _call(rig.service.cancel(rid))
                await _jitter(rng, 0.01)
            answers.append(await _call(rig.service.delete(rid)))

        race = RaceAt(rig, rng, rid, phases=2)
        await race.arm(delete)
        await race.wait()
        [(status, body)] = answers
        outputs = await _settle(rig, [rid])
        assert outputs[rid].get("status") in TERMINAL, outputs[rid]  # the run finalized for real
        if status == 409:
            assert (body["error"]["param"], body["error"]["code"]) == ("response_id", "response_in_progress"), body
            checked = await _check_response(rig, rid, outputs[rid])
            status, body = await _call(rig.service.delete(rid))  # over now: delete removes everything
            outcome = f"409 while {race.point}, intact ({checked['status']})"
        else:
            rig.readers.pop(rid).cancel()
            outcome = f"deleted at {race.point}"
        assert status == 200 and body == {"id": rid, "object": "response.deleted", "deleted": True}, body
        await _assert_gone(rig, rid)
        await _check_chain(rig, conv, [rid], probe=probe)
        return outcome + (" (cancel first)" if cancel_first else "")

    outcomes = await _repeat(rig, "delete-vs-in-flight", one)
    assert any(o.startswith("deleted") for o in outcomes), outcomes


async def _assert_gone(rig: Rig, rid: str) -> None:
    with pytest.raises(NotFound):
        await rig.storage.responses.get(rid)
    with pytest.raises(NotFound):
        await rig.storage.events.read_after(rid, -1)
    assert await rig.storage.items.list_output_items(rid) == []
    page = await rig.storage.items.list_input_items(rid, after=None, limit=100, order="asc")
    assert page.data == []
    status, body = await _call(rig.service.retrieve(rid, {}, {}))
    assert status == 404 and body["error"]["code"] == "not_found"


async def test_a_live_reader_never_stops_inside_finalize_window(rig: Rig) -> None:
    """R2/R5: finalize's status CAS lands well before its terminal event (held here for longer than the
    SSE tail's idle check); a live reader must wait for that event instead of ending the stream early."""
    events = rig.engine.storage.events
    assert isinstance(events, HoldableEvents)

    async def one(index: int) -> None:
        rid = await _create(rig, phases=1, words=3, delay_ms=0)

        async def hold_the_terminal_event() -> None:
            events.hold[rid] = 2.6 + 0.2 * index  # tail_events asks its probe after 2 s without events

        rig.engine.hooks[(rid, "finalize")] = hold_the_terminal_event
        outputs = await _settle(rig, [rid])
        checked = await _check_response(rig, rid, outputs[rid])  # includes: the reader saw every event
        assert checked["status"] == "completed"

    async with asyncio.TaskGroup() as group:
        for index in range(4):
            group.create_task(one(index))
