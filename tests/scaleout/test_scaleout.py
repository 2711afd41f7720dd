"""Three instances on one task hub: partitions shared out, a run read from an instance that has nothing to
do with it, and instances added, drained and killed under running runs. Each run must complete with a
contiguous event log (sequence numbers without gaps or repeats) and exactly one terminal event.

The tests share one scaled-out double and run in this order: start 3, add 1 (4), drain 1 (3), kill 1 (2).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from openai import OpenAI

from tests.hostdouble.api import HostDouble
from tests.reliability.conftest import TERMINAL, at_seq, follow, log_excerpt, read_events, run_lines
from tests.scaleout.conftest import PARTITIONS, client_for, owners, runner_of
from tests.scenario.conftest import knobs

pytestmark = [pytest.mark.azurite, pytest.mark.slow]

QUESTION = "Scale out under a running run"
RUN = knobs(phases=4, words=8, delay_ms=120)  # ~4 s of deltas: long enough to change the instances under it
LONG_RUN = knobs(phases=6, words=20, delay_ms=250)  # ~30 s: outlasts an instance's start-up


def start(client: OpenAI, upto: int = 3, run: dict[str, str] = RUN) -> tuple[str, list[Any]]:
    """Create a background run, streamed; read up to sequence number ``upto``; return its id and events."""
    stream = client.responses.create(model="m", input=QUESTION, stream=True, background=True, metadata=run)
    with stream:
        events, _ = read_events(stream, stop=at_seq(upto))
    assert events, "the run's stream gave no event"
    return str(events[0].response.id), events


def finish(double: HostDouble, client: OpenAI, response_id: str, events: list[Any]) -> list[Any]:
    """Read on (reconnecting with ``starting_after``) to the terminal event; check the whole log."""
    began = time.monotonic()
    if events[-1].type not in TERMINAL:
        more, notes = follow(client, response_id, events[-1].sequence_number, deadline_s=100.0)
        events = events + more
    else:
        notes = []
    print(f"{response_id}: {len(events)} events, terminal {time.monotonic() - began:.1f} s after the change; "
          f"reconnects: {notes}")
    problems = log_problems(events)
    assert not problems, (f"{response_id}: {problems}; reconnects: {notes}\n"
                          f"{log_excerpt(run_lines(double.log(), response_id))}")
    return events


def log_problems(events: list[Any]) -> list[str]:
    problems = []
    seqs = [e.sequence_number for e in events]
    if seqs != list(range(len(seqs))):
        problems.append(f"sequence numbers not contiguous from 0: {seqs}")
    terminals = [e.type for e in events if e.type in TERMINAL]
    if terminals != ["response.completed"] or events[-1].type != "response.completed":
        problems.append(f"terminal events {terminals}, last event {events[-1].type if events else None}")
    return problems


def wait_for(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"not within {timeout:.0f} s: {what}")


def balanced(double: HostDouble, count: int) -> dict[str, list[int]] | None:
    """Every one of ``count`` ready instances owns a share, and no partition has two owners."""
    owned = owners(double)
    shares = sorted(p for partitions in owned.values() for p in partitions)
    if len(owned) == count and all(owned.values()) and shares == list(range(PARTITIONS)):
        return owned
    return None


def test_every_instance_owns_a_share_of_the_partitions_within_a_minute(double: HostDouble) -> None:
    count = len(double.ready_instances())  # 3, less any an earlier test of this module drained or killed
    assert count >= 2
    owned = wait_for(lambda: balanced(double, count), 60.0, f"{count} instances sharing {PARTITIONS} partitions")
    assert {double.stats(name)["worker_id"] for name in owned} == {f"hostdouble:{name}" for name in owned}
    # each timer function runs on one host at a time (its listener lock)
    timers = set(double.stats()["timer_runs"])
    assert timers, "the app has timer functions"

    def holders() -> dict[str, list[str]] | None:
        held = {name: double.stats(name)["timer_locks_held"] for name in owned}
        by_timer = {timer: [name for name, locks in held.items() if timer in locks] for timer in timers}
        return by_timer if all(by_timer.values()) else None

    by_timer = wait_for(holders, 30.0, "a holder for every timer's lock")
    assert all(len(names) == 1 for names in by_timer.values()), by_timer


def test_a_run_streams_from_an_instance_that_neither_created_nor_runs_it(double: HostDouble) -> None:
    names = double.ready_instances()
    creator = names[0]
    response_id, events = start(client_for(double, creator), upto=0)
    runner = wait_for(lambda: runner_of(double, response_id), 30.0, "an owner of the run's partition")
    reader = next(name for name in names if name not in (creator, runner))
    served = {i["name"]: i["requests"] for i in double.list_instances()}
    events = finish(double, client_for(double, reader), response_id, events)
    assert {i["name"]: i["requests"] for i in double.list_instances()}[reader] > served[reader]
    assert len(events) > 10


def test_an_instance_added_mid_run_takes_partitions_and_the_run_completes(double: HostDouble) -> None:
    client = client_for(double)
    count = len(double.ready_instances()) + 1  # each test counts for itself: the suite may run them apart
    response_id, events = start(client, run=LONG_RUN)
    added = double.add_instance()  # the run goes on meanwhile
    assert double.status(response_id)["runtimeStatus"] in ("Running", "Pending"), "the run ended too soon"
    finish(double, client, response_id, events)
    wait_for(lambda: double.stats(added)["partitions_owned"], 30.0, f"{added} owning a partition")
    assert double.stats(added)["leases_stolen"] >= 1  # nothing was free: it took one from the busiest host
    wait_for(lambda: balanced(double, count), 30.0, f"{count} instances sharing the partitions")


def test_an_instance_drained_mid_run_hands_over_and_the_run_completes(double: HostDouble) -> None:
    client = client_for(double)
    response_id, events = start(client)
    runner = wait_for(lambda: runner_of(double, response_id), 30.0, "an owner of the run's partition")
    count = len(double.ready_instances()) - 1
    double.drain_instance(runner)
    assert runner not in double.ready_instances()  # out of the front end's rotation at once
    finish(double, client, response_id, events)
    double.wait_instance_state(runner, ("stopped",), timeout=60.0)
    assert f"[hostdouble {runner}] host stopping (signal SIGTERM)" in double.log()
    # it released its leases on the way out: the others own every partition again, without waiting
    wait_for(lambda: balanced(double, count), 30.0, f"{count} instances sharing the partitions after the drain")


def test_an_instance_killed_mid_run_is_replaced_by_the_others_and_the_run_completes(double: HostDouble) -> None:
    client = client_for(double)
    response_id, events = start(client)
    runner = wait_for(lambda: runner_of(double, response_id), 30.0, "an owner of the run's partition")
    count = len(double.ready_instances()) - 1
    assert double.kill_instance(runner) is not None
    finish(double, client, response_id, events)
    assert double.wait_instance_state(runner, ("killed",))["state"] == "killed"
    wait_for(lambda: balanced(double, count), 30.0, f"{count} instances sharing the partitions after the kill")
