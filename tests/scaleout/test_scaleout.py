"""Three instances on one task hub: partitions shared out, a run read from an instance that has nothing to
do with it; a cancel, a steering turn, a delete, a function tool's output and an approval each sent to an
instance other than the one that created the response (``x-hostdouble-instance`` pins a request to an
instance); and instances added, drained and killed under running runs. Each run must end with a
contiguous event log (sequence numbers without gaps or repeats) and exactly one terminal event.

The tests share one scaled-out double and run in this order: start 3, the cross-instance operations,
add 1 (4), drain 1 (3), kill 1 (2).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from openai import NotFoundError, OpenAI

from tests.hostdouble.api import HostDouble
from tests.reliability.conftest import TERMINAL, at_seq, follow, log_excerpt, read_events, run_lines, texts
from tests.scaleout.conftest import PARTITIONS, client_for, owners, runner_of
from tests.scenario.conftest import knobs
from tests.scenario.test_tools_and_approval import LOOKUP

pytestmark = [pytest.mark.azurite, pytest.mark.slow(seconds=125)]

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


# --------------------------------------------- operations addressed to an instance other than the creator
def others(double: HostDouble, creator: str, response_id: str | None = None) -> list[str]:
    """The ready instances but the creator; the one that does not run the response first, when known."""
    runner = runner_of(double, response_id) if response_id else None
    rest = [name for name in double.ready_instances() if name != creator]
    return sorted(rest, key=lambda name: name == runner)


def whole_log(client: OpenAI, response_id: str) -> list[Any]:
    """The response's whole event log, replayed from the start by ``client``'s instance."""
    with client.responses.retrieve(response_id, stream=True, starting_after=-1) as stream:
        events, broken = read_events(stream)
    assert not broken, f"{response_id}: the replay broke off after {len(events)} events"
    return events


def check_log(events: list[Any], terminal: str = "response.completed") -> None:
    seqs = [e.sequence_number for e in events]
    assert seqs == list(range(len(seqs))), f"sequence numbers not contiguous from 0: {seqs}"
    assert [e.type for e in events if e.type in TERMINAL] == [terminal] == [events[-1].type], \
        [e.type for e in events][-5:]


def settled(client: OpenAI, response_id: str, timeout: float = 30.0) -> Any:
    return wait_for(lambda: (r := client.responses.retrieve(response_id)).status not in ("queued", "in_progress")
                    and r, timeout, f"{response_id} ending")


def test_a_cancel_through_another_instance_ends_the_run_and_every_instance_reads_the_same_log(
        double: HostDouble) -> None:
    creator = double.ready_instances()[0]
    response_id, _ = start(client_for(double, creator), upto=3, run=LONG_RUN)
    canceller = others(double, creator, response_id)[0]
    cancelled = client_for(double, canceller).responses.cancel(response_id)
    assert cancelled.status == "cancelled"
    logs = {name: whole_log(client_for(double, name), response_id) for name in double.ready_instances()}
    for events in logs.values():
        check_log(events, "response.failed")
        assert events[-1].response.status == "cancelled"
    dumped = {name: [e.to_dict() for e in events] for name, events in logs.items()}
    assert all(log == dumped[creator] for log in dumped.values()), "the instances read different logs"
    assert {name: client_for(double, name).responses.retrieve(response_id).status
            for name in logs} == dict.fromkeys(logs, "cancelled")


def test_a_turn_steers_the_running_turn_through_another_instance(double: HostDouble) -> None:
    creator = double.ready_instances()[0]
    client = client_for(double, creator)
    first = client.responses.create(model="m", input=QUESTION, background=True,
                                    metadata=knobs(phases=3, words=300, delay_ms=10))
    wait_for(lambda: client.responses.retrieve(first.id).status == "in_progress", 30.0, "the first turn running")
    time.sleep(0.3)  # a few deltas into phase 0
    steerer_name = others(double, creator, first.id)[0]
    steerer = client_for(double, steerer_name)
    second = steerer.responses.create(model="m", input="follow-up", background=True,
                                      previous_response_id=first.id, metadata=knobs(phases=2, words=5))
    assert second.status == "queued"
    seen: list[tuple[Any, Any]] = []  # (first, second) statuses, read through the two instances in turn
    changes: list[str] = []

    def both_ended() -> bool:
        pair = (client.responses.retrieve(first.id).status, steerer.responses.retrieve(second.id).status)
        if not seen or seen[-1] != pair:
            changes.append(f"{time.monotonic() - began:.1f} s {pair}")
        seen.append(pair)
        return "queued" not in pair and "in_progress" not in pair

    began = time.monotonic()
    wait_for(both_ended, 30.0, "both turns ending")
    print(f"{first.id} steered through {steerer_name}: {changes}")  # the lock's hand-over crosses instances
    assert ("in_progress", "in_progress") not in seen, f"the turns ran at once: {seen}"
    done_first = steerer.responses.retrieve(first.id)
    assert done_first.status == "completed"
    assert len(done_first.output) < 3 or done_first.output[-1].status == "incomplete", "not steered early"
    done_second = client.responses.retrieve(second.id)
    assert done_second.status == "completed" and len(done_second.output) == 2
    check_log(whole_log(steerer, first.id))
    second_events = whole_log(client, second.id)
    check_log(second_events)
    # ``response.queued`` is logged when its run met the lock still held (the steered turn may have let go)
    assert [e.type for e in second_events][:3] in (
        ["response.created", "response.queued", "response.in_progress"],
        ["response.created", "response.in_progress", "response.output_item.added"])
    # the chain is free again: a third turn, through the third instance, never waits for its lock
    third_client = client_for(double, others(double, creator)[-1])
    third = third_client.responses.create(model="m", input="and then", background=True,
                                          previous_response_id=second.id, metadata=knobs(phases=1, words=3))
    assert settled(third_client, third.id).status == "completed"
    third_events = whole_log(client, third.id)
    check_log(third_events)
    assert "response.queued" not in [e.type for e in third_events], "the third turn waited for the lock"


def test_a_delete_through_another_instance_is_404_on_every_instance_at_once(double: HostDouble) -> None:
    creator = double.ready_instances()[0]
    response_id, events = start(client_for(double, creator), upto=1_000, run=knobs(phases=2, words=4))
    check_log(events)
    deleter = others(double, creator, response_id)[0]
    client_for(double, deleter).responses.delete(response_id)  # raises unless it answered 200
    for name in double.ready_instances():
        client = client_for(double, name)
        with pytest.raises(NotFoundError):
            client.responses.retrieve(response_id)
        with pytest.raises(NotFoundError):
            client.responses.input_items.list(response_id)
        with pytest.raises(NotFoundError):
            whole_log(client, response_id)


def test_tool_call_and_approval_turns_continue_through_another_instance(double: HostDouble) -> None:
    creator = double.ready_instances()[0]
    client = client_for(double, creator)
    # started together: a function call, a reference run and a plan paused for approval, on the creator
    tools: Any = [LOOKUP]
    first_id = client.responses.create(model="m", input=QUESTION, tools=tools, background=True,
                                       metadata=knobs(phases=2, words=6)).id
    reference_id = client.responses.create(model="m", input=QUESTION, background=True,
                                           metadata=knobs(phases=4, words=8)).id
    paused_id = client.responses.create(model="m", input=QUESTION, background=True,
                                        metadata={**knobs(phases=4, words=8), "require_approval": "true"}).id
    first, reference, paused = (settled(client, rid) for rid in (first_id, reference_id, paused_id))
    # the function call's output goes to another instance
    assert first.status == "completed" and [o.type for o in first.output] == ["function_call"]
    call = first.output[0]
    answerer = client_for(double, others(double, creator, first.id)[0])
    second_id = answerer.responses.create(
        model="m", previous_response_id=first.id, tools=tools, background=True,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "Checkpoints bound lost work."}],
        metadata=knobs(phases=2, words=6)).id
    # so does the approval of the paused plan
    assert [o.type for o in paused.output] == ["message"] * 3 + ["mcp_approval_request"]
    request = paused.output[-1]
    approver = client_for(double, others(double, creator, paused.id)[0])
    resumed_id = approver.responses.create(
        model="m", previous_response_id=paused.id, background=True,
        input=[{"type": "mcp_approval_response", "approval_request_id": request.id, "approve": True}]).id
    second, resumed = settled(answerer, second_id), settled(approver, resumed_id)
    assert second.status == "completed" and [o.type for o in second.output] == ["message", "message"]
    assert texts(second.output)[-1].startswith("lookup returned: Checkpoints bound lost work.\n")
    assert resumed.status == "completed"
    assert len(resumed.output) == 1, "phases finished before the pause ran again"
    assert texts(paused.output[:3]) + texts(resumed.output) == texts(reference.output)
    for response_id in (first.id, second.id, reference.id, paused.id, resumed.id):
        check_log(whole_log(client, response_id))
    assert "function_call" not in [e.item.type for e in whole_log(client, second.id)
                                   if e.type == "response.output_item.added"], "the tool was called again"


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
