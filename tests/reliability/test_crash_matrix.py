"""Crash matrix (CONTRACT R2-R4): kill the worker right after the client received event k, reconnect with
``starting_after=k`` and read to the terminal event.

For every sampled k the run completes; the events seen across the crash are 0..N with no gap or
duplicate; the crash repeats at most one phase (host double stats: ``run_phase`` failed by the worker's exit
and called again by the orchestrator; the app's log: phases re-streamed); the final output
texts equal a fault-free run's; and a client that rebuilds the output from the stream (dropping partial
items on a recovery reset, R4) gets exactly ``GET /responses/{id}``'s output. CI samples six points spread
over the run; ``bench/crash_matrix.py`` tries every event index.

Plus: two kills in one run (the second one lands inside the recovered phase, through the app's own
``POST /ops/crash``), and a kill inside ``finalize_response`` (storage slowed through the test proxy so
finalize takes ≥ 1 s, the worker killed as soon as the host double shows finalize in flight).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from openai import OpenAI

from tests.hostdouble.api import HostDouble
from tests.reliability.conftest import (
    DELAY_MS,
    PHASES,
    QUESTION,
    TERMINAL,
    WORDS,
    AppLog,
    CrashRun,
    _check_phase_work,
    at_seq,
    check_run,
    crash_run,
    follow,
    read_events,
    settle,
    texts,
)
from tests.reliability.tcpproxy import TcpProxy
from tests.scenario.conftest import knobs

pytestmark = pytest.mark.azurite

FINALIZE_LATENCY_S = 0.25  # per storage request while finalize runs: its ≥ 4 round trips take ≥ 1 s


def _nth(kind: str, output_index: int | None = None, nth: int = 1) -> Callable[[list[Any]], int]:
    """The sequence number of the ``nth`` event of ``kind`` (at ``output_index``) in a fault-free run."""

    def find(events: list[Any]) -> int:
        hits = [e.sequence_number for e in events
                if e.type == kind and (output_index is None or e.output_index == output_index)]
        return hits[nth - 1]

    return find


# Kill points spread over the run, located in the fault-free run's events.
SAMPLES: dict[str, Callable[[list[Any]], int]] = {
    "after-created": _nth("response.created"),
    "phase1-opening": _nth("response.output_item.added", 0),
    "phase2-mid-deltas": _nth("response.output_text.delta", 1, 3),
    "after-phase1-item-done": _nth("response.output_item.done", 0),
    "phase3-text-done": _nth("response.output_text.done", 2),
    "before-terminal": _nth("response.output_item.done", PHASES - 1),
}


@pytest.mark.parametrize("point", list(SAMPLES))
def test_kill_at_event(point: str, client: OpenAI, double: HostDouble, clean: list[Any]) -> None:
    k = SAMPLES[point](clean)
    run = crash_run(client, double, [at_seq(k)])
    assert run.kill_after == [k], f"the kill was meant to follow event {k}: {run.notes}"
    assert check_run(client, run, clean) == []
    assert len(run.events) >= len(clean)


def test_two_kills_one_inside_the_recovered_phase(client: OpenAI, double: HostDouble, clean: list[Any]) -> None:
    def first_delta_after_reset(event: Any, seen: list[Any]) -> bool:
        reset = any(e.type == "response.in_progress" for e in seen)
        return reset and event.type == "response.output_text.delta"

    k = SAMPLES["phase2-mid-deltas"](clean)
    run = crash_run(client, double, [at_seq(k), first_delta_after_reset], how=["sigkill", "endpoint"])
    assert run.crashes == 2 and run.kill_after[0] == k
    assert check_run(client, run, clean) == []
    resets = [e for e in run.events[k + 1:] if e.type == "response.in_progress"]
    # both kills land after output started in a phase (the second on the recovered phase's first delta),
    # so each is followed by exactly one recovery reset
    assert len(resets) == 2, "each crash inside a phase shows as one recovery reset"


def _wait_in_flight(double: HostDouble, instance_id: str, activity: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        flights = double.stats()["in_flight_activities"]
        if any(f["instance_id"] == instance_id and f["name"] == activity for f in flights):
            return True
        time.sleep(0.005)
    return False


def test_kill_inside_finalize(client: OpenAI, double: HostDouble, clean: list[Any], proxy: TcpProxy) -> None:
    before = double.stats()
    stream = client.responses.create(model="m", input=QUESTION, stream=True, background=True,
                                     metadata=knobs(PHASES, WORDS, DELAY_MS))
    with stream:
        first, _ = read_events(stream, lambda e, s: e.type == "response.output_item.added"
                               and e.output_index == PHASES - 1)
        response_id = first[0].response.id
        proxy.latency = FINALIZE_LATENCY_S  # from here on every storage request waits; finalize is slow
        assert _wait_in_flight(double, response_id, "finalize_response", timeout=40), "finalize never ran"
        seen_at = time.monotonic()
        restarts = double.stats()["worker_restarts"]
        double.kill_worker()
        reaction = time.monotonic() - seen_at
    proxy.latency = 0.0
    double.wait_for_worker_restarts(restarts + 1, timeout=60)
    assert reaction < 2 * FINALIZE_LATENCY_S, "the kill must land before finalize's terminal append"

    rest, notes = follow(client, response_id, first[-1].sequence_number)
    events = first + rest
    assert [e.sequence_number for e in events] == list(range(len(events))), notes
    kinds = [e.type for e in events]
    assert sum(k in TERMINAL for k in kinds) == 1 and kinds[-1] == "response.completed"
    assert kinds.count("response.in_progress") == 1, "a crash in finalize repeats no phase"
    assert settle(double, response_id) == "Completed"
    after = double.stats()

    def delta(counter: str) -> dict[str, int]:
        return {name: after[counter].get(name, 0) - before[counter].get(name, 0)
                for name in ("run_phase", "finalize_response")}

    # the host failed the killed finalize (worker exit); the orchestrator called it again; no phase re-ran
    assert delta("activity_failures_worker_exit") == {"run_phase": 0, "finalize_response": 1}
    assert delta("activity_deliveries") == {"run_phase": PHASES, "finalize_response": 2}
    assert delta("activity_redeliveries") == {"run_phase": 0, "finalize_response": 0}
    final = client.responses.retrieve(response_id)
    assert final.status == "completed"
    assert texts(final.output) == texts(clean[-1].response.output)
    assert texts(events[-1].response.output) == texts(final.output)



def test_the_phase_work_check_flags_more_repeated_phases_than_kills() -> None:
    """The R3 check used above can fail: one kill, and the host/app counts showing two phases repeated."""

    def run(failed: int, deliveries: int, app: AppLog) -> CrashRun:
        before = {"activity_failures_worker_exit": {}, "activity_deliveries": {}, "activity_redeliveries": {}}
        after = {"activity_failures_worker_exit": {"run_phase": failed},
                 "activity_deliveries": {"run_phase": deliveries}, "activity_redeliveries": {}}
        return CrashRun("resp_x", [], 1, before, after, [3], app=app)

    assert _check_phase_work(run(1, PHASES + 1, AppLog(PHASES, 1, 0))) == []
    assert _check_phase_work(run(2, PHASES + 2, AppLog(PHASES, 1, 0))) != []  # two phases failed by exits
    assert _check_phase_work(run(1, PHASES + 2, AppLog(PHASES, 1, 0))) != []  # a delivery nobody explains
    assert _check_phase_work(run(1, PHASES + 1, AppLog(PHASES, 2, 0))) != []  # two partial phases reset
    assert _check_phase_work(run(1, PHASES + 1, AppLog(PHASES + 1, 1, 0))) != []  # a finished phase re-streamed
    log = "x | phase done | response_id=resp_x phase=0\nphase done | response_id=resp_xy phase=0\n"
    assert AppLog.of(log + "recovering phase | response_id=resp_x phase=1", "resp_x") == AppLog(1, 1, 0)
