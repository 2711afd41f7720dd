"""Crash matrix (CONTRACT R2-R4): kill the worker right after the client received event k, reconnect with
``starting_after=k`` and read to the terminal event.

For every sampled k the run completes; the events seen across the crash are 0..N with no gap or
duplicate; the crash repeats at most one phase (host double stats: ``run_phase`` failed by the worker's exit
and called again by the orchestrator; the app's log: phases re-streamed); the final output
texts equal a fault-free run's; and a client that rebuilds the output from the stream (dropping partial
items on a recovery reset, R4) gets exactly ``GET /responses/{id}``'s output. CI samples six points spread
over the run, and one after the terminal event; ``bench/crash_matrix.py`` tries every event index.

Plus: two kills in one run (the second one lands inside the recovered phase, through the app's own
``POST /ops/crash``), and a kill inside the run's conclusion (the last phase's activity concludes the run
after its checkpoint: storage slowed through the test proxy so that takes ≥ 1 s, the worker killed as soon
as the app logs the checkpoint).

And the faults the real host handles differently from a failed activity (tests/hostdouble/README.md):
a kill during an orchestrator episode (the orchestration is Failed for good; the app's repair path,
triggered by the reconnecting client, starts a new execution that resumes from the checkpoints), a kill
during a chain-lock entity batch (the host retries the batch), three kills inside one phase (the third
crash within 30 minutes recycles the whole host), and a SIGKILL of the whole host process group at two
points of the run, restarted with the same command (a double of its own with a 10 s queue visibility
timeout instead of host.json's minute, so each point costs ~15 s; ``test_host_kill.py`` runs the
repository's host.json).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from openai import OpenAI

from tests.hostdouble.api import HostDouble
from tests.reliability.conftest import (
    DELAY_MS,
    FREE_LOCK,
    PHASES,
    QUESTION,
    TERMINAL,
    WORDS,
    AppLog,
    CrashRun,
    Stop,
    _check_phase_work,
    at_seq,
    chain_lock_once_free,
    check_run,
    crash_run,
    default_storage,
    double_env,
    ended_before_episode_died,
    finish_run,
    follow,
    log_excerpt,
    make_client,
    read_events,
    run_lines,
    settle,
    start_run,
    texts,
    with_evidence,
)
from tests.reliability.tcpproxy import TcpProxy
from tests.scenario.conftest import ROOT, knobs

pytestmark = [pytest.mark.azurite, pytest.mark.slow(seconds=190)]

FINALIZE_LATENCY_S = 0.25  # per storage request while finalize runs: its ≥ 4 round trips take ≥ 1 s
ORCHESTRATOR, CHAIN_LOCK = "responses_orchestrator", "chain_lock"
# A double whose dead host's queue messages reappear after 10 s (host.json: 1 min), polled at most every 2 s.
SHORT_VISIBILITY = {
    "AzureFunctionsJobHost__extensions__durableTask__storageProvider__controlQueueVisibilityTimeout": "00:00:10",
    "AzureFunctionsJobHost__extensions__durableTask__storageProvider__workItemQueueVisibilityTimeout": "00:00:10",
    "AzureFunctionsJobHost__extensions__durableTask__storageProvider__maxQueuePollingInterval": "00:00:02",
}


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
    # the run is over for the client; a kill in the episode after finalize fails a finished orchestration
    "after-terminal": _nth("response.completed"),
}


@pytest.mark.parametrize("point", list(SAMPLES))
def test_kill_at_event(point: str, client: OpenAI, double: HostDouble, clean: list[Any]) -> None:
    k = SAMPLES[point](clean)
    run = crash_run(client, double, [at_seq(k)])
    assert run.kill_after == [k], f"the kill was meant to follow event {k}: {run.notes}"
    assert (problems := check_run(client, run, clean)) == [], "\n".join(problems)
    assert len(run.events) >= len(clean)


def test_two_kills_one_inside_the_recovered_phase(client: OpenAI, double: HostDouble, clean: list[Any]) -> None:
    def first_delta_after_reset(event: Any, seen: list[Any]) -> bool:
        reset = any(e.type == "response.in_progress" for e in seen)
        return reset and event.type == "response.output_text.delta"

    k = SAMPLES["phase2-mid-deltas"](clean)
    run = crash_run(client, double, [at_seq(k), first_delta_after_reset], how=["sigkill", "endpoint"])
    assert run.crashes == 2 and run.kill_after[0] == k
    assert (problems := check_run(client, run, clean)) == [], "\n".join(problems)
    resets = [e for e in run.events[k + 1:] if e.type == "response.in_progress"]
    # both kills land after output started in a phase (the second on the recovered phase's first delta),
    # so each is followed by exactly one recovery reset
    assert len(resets) == 2, "each crash inside a phase shows as one recovery reset"


def _wait_logged(double: HostDouble, pattern: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if re.search(pattern, double.log()):
            return True
        time.sleep(0.01)
    return False


def test_kill_inside_finalize(client: OpenAI, double: HostDouble, clean: list[Any], proxy: TcpProxy) -> None:
    """The last phase concludes the run in its own activity, after its checkpoint: a kill there re-delivers
    that activity, which finds the checkpoint (no phase re-runs) and concludes once."""
    before = double.stats()
    stream = client.responses.create(model="m", input=QUESTION, stream=True, background=True,
                                     metadata=knobs(PHASES, WORDS, DELAY_MS))
    with stream:
        first, _ = read_events(stream, lambda e, s: e.type == "response.output_item.added"
                               and e.output_index == PHASES - 1)
        response_id = first[0].response.id
        proxy.latency = FINALIZE_LATENCY_S  # from here on every storage request waits; finalize is slow
        checkpointed = rf"phase done \| response_id={response_id} phase={PHASES - 1} "
        assert _wait_logged(double, checkpointed, timeout=40), "the last phase never checkpointed"
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

    # the host failed the killed last phase (worker exit) after its checkpoint; the orchestrator called it
    # again, and that delivery found the checkpoint and concluded; no phase re-streamed
    assert delta("activity_failures_worker_exit") == {"run_phase": 1, "finalize_response": 0}
    assert delta("activity_deliveries") == {"run_phase": PHASES + 1, "finalize_response": 0}
    assert delta("activity_redeliveries") == {"run_phase": 0, "finalize_response": 0}
    assert len(re.findall(rf"phase done \| response_id={response_id} ", double.log())) == PHASES
    final = client.responses.retrieve(response_id)
    assert final.status == "completed"
    assert texts(final.output) == texts(clean[-1].response.output)
    assert texts(events[-1].response.output) == texts(final.output)



def _stream_with_a_fault_in_phase_1(client: OpenAI, clean: list[Any], arm: Callable[[], None],
                                   kill: tuple[Stop, Callable[[], None]] | None = None
                                   ) -> tuple[str, list[Any], bool]:
    """Start the standard run streaming, ``arm`` a fault inside phase 1 (the episode that schedules phase 2
    is the next one), and read the stream to its end: (response id, events, whether the stream broke).
    With ``kill`` = (when, how): once an event satisfies ``when``, call ``how`` and read on."""
    k = _nth("response.output_text.delta", 0, 2)(clean)  # inside phase 1
    stream = client.responses.create(model="m", input=QUESTION, stream=True, background=True,
                                     metadata=knobs(PHASES, WORDS, DELAY_MS))
    with stream:
        events, _ = read_events(stream, at_seq(k))
        arm()
        if kill is not None:
            when, how = kill
            more, broken = read_events(stream, when)
            events += more
            if not broken and more and when(more[-1], events):
                how()
        more, broken = read_events(stream)
    return events[0].response.id, events + more, broken


def test_a_checkpoint_failing_after_its_sends_delivers_a_phase_twice_and_repeats_none(
        client: OpenAI, double: HostDouble, clean: list[Any]) -> None:
    """The same window without a crash: the checkpoint of the episode that schedules phase 2 fails (a storage
    error the SDK did not bridge), the host runs the episode again, and it sends phase 2 again while the
    first delivery streams: two deliveries of one phase, neither a worker exit nor a re-delivery. The later
    one waits for the live attempt (or finds its checkpoint) and returns it: nothing is repeated, the client
    that stayed connected sees one uninterrupted stream."""
    before = double.stats()
    response_id, events, broken = _stream_with_a_fault_in_phase_1(
        client, clean, lambda: double.fail_checkpoint("run_phase", delay=0.15))
    assert not broken and events[-1].type == "response.completed", events[-1].type
    run = finish_run(client, double, response_id, events, before, [], [])
    assert run.delta("activity_sends_before_a_failed_checkpoint", "run_phase") == 1, run.stats_after
    assert run.delta("activity_deliveries", "run_phase") == PHASES + 1, run.stats_after
    assert "(armed storage fault)" in double.log()
    assert (problems := check_run(client, run, clean)) == [], "\n".join(problems)


def test_the_phase_work_check_flags_more_repeated_phases_than_kills() -> None:
    """The R3 check used above can fail: one kill, and the host/app counts showing two phases repeated."""

    def run(failed: int, deliveries: int, app: AppLog, resent: int = 0, redelivered: int = 0,
            recycles: int = 0) -> CrashRun:
        before = {"activity_failures_worker_exit": {}, "activity_deliveries": {}, "activity_redeliveries": {},
                  "host_recycles": 0}
        after = {"activity_failures_worker_exit": {"run_phase": failed},
                 "activity_deliveries": {"run_phase": deliveries}, "activity_redeliveries": {"run_phase": redelivered},
                 "activity_sends_before_a_failed_checkpoint": {"run_phase": resent}, "host_recycles": recycles}
        return CrashRun("resp_x", [], 1, before, after, [3], app=app)

    assert _check_phase_work(run(1, PHASES + 1, AppLog(PHASES, 1, 0))) == []
    assert _check_phase_work(run(2, PHASES + 2, AppLog(PHASES, 1, 0))) != []  # two phases failed by exits
    assert _check_phase_work(run(1, PHASES + 2, AppLog(PHASES, 1, 0))) != []  # a delivery nobody explains
    # ... unless an episode sent it and then failed to checkpoint: its re-run sent the same call again
    assert _check_phase_work(run(1, PHASES + 2, AppLog(PHASES, 1, 0), resent=1)) == []
    assert _check_phase_work(run(1, PHASES + 3, AppLog(PHASES, 1, 0), resent=1)) != []
    assert _check_phase_work(run(1, PHASES + 1, AppLog(PHASES, 2, 0))) != []  # two partial phases reset
    assert _check_phase_work(run(1, PHASES + 1, AppLog(PHASES + 1, 1, 0))) != []  # a finished phase re-streamed
    # a re-delivered run_phase: wrong after a worker crash, possible once per host recycle, either taken and
    # not started (no extra delivery) or run with its result sent before the stopping host deleted it (one
    # extra delivery, which finds the checkpoint: the app's log shows no second repeat)
    assert _check_phase_work(run(1, PHASES + 1, AppLog(PHASES, 1, 0), redelivered=1)) != []
    assert _check_phase_work(run(1, PHASES + 1, AppLog(PHASES, 1, 0), redelivered=1, recycles=1)) == []
    assert _check_phase_work(run(1, PHASES + 2, AppLog(PHASES, 1, 0), redelivered=1, recycles=1)) == []
    assert _check_phase_work(run(1, PHASES + 2, AppLog(PHASES, 1, 0), redelivered=1)) != []
    assert _check_phase_work(run(1, PHASES + 3, AppLog(PHASES, 1, 0), redelivered=1, recycles=1)) != []
    assert _check_phase_work(run(1, PHASES + 2, AppLog(PHASES, 2, 0), redelivered=1, recycles=1)) != []
    log = "x | phase done | response_id=resp_x phase=0\nphase done | response_id=resp_xy phase=0\n"
    assert AppLog.of(log + "recovering phase | response_id=resp_x phase=1", "resp_x") == AppLog(1, 1, 0)


def test_a_failed_check_carries_the_runs_log_lines() -> None:
    """A crash check that fails under load alone must report what happened: the lines naming the response
    and the worker's lifecycle go with the problems; a passing check stays an empty list."""
    log = ("created | response_id=resp_x\nworker generation 2 started (pid 7)\n"
           "resp_y: Function 'run_phase (Activity)' failed with an error.\n"
           "resp_x: Function 'run_phase (Activity)' failed with an error. Reason: boom\nunrelated line\n")
    excerpt = log_excerpt(run_lines(log, "resp_x"))
    assert excerpt.splitlines() == ["created | response_id=resp_x", "worker generation 2 started (pid 7)",
                                    "resp_x: Function 'run_phase (Activity)' failed with an error. Reason: boom"]
    run = CrashRun("resp_x", [], 1, {}, {}, [3], log_excerpt=excerpt)
    assert with_evidence([], run) == []
    assert with_evidence(["R3 too many"], run) == ["R3 too many", f"log excerpt:\n{excerpt}"]
    earlier_run = "worker generation 1 (pid 5): python exited with code 137 (0x89)\n"
    assert log_excerpt(run_lines(earlier_run + log, "resp_x")) == excerpt  # earlier lines are not the run's


def test_a_run_is_over_before_the_kill_only_if_it_ended_before_its_episode_died() -> None:
    """The Failed-orchestration exemption: the app's ``finalized`` line must come before the host's line
    saying the run's orchestrator episode died with the worker; a run that ended after it (or never), or
    whose orchestration failed without a worker exit, is not exempt."""
    ended = "x finalized | response_id=resp_x status=completed"
    died = ("[hostdouble] instance resp_x (responses_orchestrator): orchestrator episode in flight when the "
            "worker died: Failed (python exited with code 17 (0x11))")
    started = "[hostdouble] worker generation 3 started (pid 10)"
    assert ended_before_episode_died([ended, died, started], "resp_x")
    assert not ended_before_episode_died([died, started, ended], "resp_x")
    assert not ended_before_episode_died([died, started], "resp_x")
    assert not ended_before_episode_died([ended.replace("resp_x", "resp_y"), died], "resp_x")
    assert not ended_before_episode_died([ended, died.replace("resp_x", "resp_y")], "resp_x")
    assert not ended_before_episode_died([ended, started], "resp_x")  # Failed, but not by a worker exit


# ------------------------------------------------------------------ the real host's other crash semantics
def _new_kill(double: HostDouble, before: dict[str, Any], timeout: float = 60.0) -> dict[str, Any]:
    """Wait until the armed kill fired and the restarted worker is ready; the kill's record."""
    stats = double.wait_for(lambda s: len(s["kills"]) > len(before["kills"]) and s["worker_ready"], timeout)
    kill: dict[str, Any] = stats["kills"][-1]
    return kill


def _lock(double: HostDouble, chain: str) -> Any:
    return httpx.get(f"{double.durable_url}/entities/{CHAIN_LOCK}/{chain}", timeout=10).json()


def test_kill_during_an_orchestrator_episode_is_repaired_for_a_reconnecting_client(
        client: OpenAI, double: HostDouble, clean: list[Any]) -> None:
    before = double.stats()
    k = SAMPLES["phase2-mid-deltas"](clean)
    stream = client.responses.create(model="m", input=QUESTION, stream=True, background=True,
                                     metadata=knobs(PHASES, WORDS, DELAY_MS))
    with stream:
        events, _ = read_events(stream, at_seq(k))
        response_id = events[0].response.id
        # the next episode is the one that takes run_phase(1)'s result: the worker dies inside it
        double.kill_worker(target="orchestrator", name=ORCHESTRATOR)
        more, _ = read_events(stream)
        events += more
    kill = _new_kill(double, before)
    assert (kill["target"], kill["instance_id"]) == ("orchestrator", response_id), kill
    assert events[-1].type not in TERMINAL, "the episode that died had to schedule the rest of the run"
    run = finish_run(client, double, response_id, events, before, [events[-1].sequence_number], [])
    assert (problems := check_run(client, run, clean)) == [], "\n".join(problems)
    assert run.delta_count("episodes_failed_worker_exit") == 1
    # nothing in the host retries a Failed orchestration: the app's repair path started a new execution
    assert re.search(rf"repaired \| response_id={response_id} [^\n]*found=Failed", double.log()), run.notes
    assert run.app.repairs == 1 and run.delta("activity_failures_worker_exit", "run_phase") == 0


def test_kill_during_a_chain_lock_entity_batch(client: OpenAI, double: HostDouble, clean: list[Any]) -> None:
    conversation = client.conversations.create().id
    before = double.stats()
    response_id, events, notes = start_run(client, at_seq(SAMPLES["phase2-mid-deltas"](clean)),
                                           conversation=conversation)
    assert _lock(double, conversation)["active"] == response_id  # acquired before phase 0
    double.kill_worker(target="entity", name=CHAIN_LOCK)  # the next batch is the turn's release, after finalize
    kill = _new_kill(double, before)
    assert kill["target"] == "entity", kill
    run = finish_run(client, double, response_id, events, before, [events[-1].sequence_number], notes)
    assert (problems := check_run(client, run, clean)) == [], "\n".join(problems)
    assert run.delta_count("entity_batches_aborted") >= 1  # nothing committed; the host retried the batch
    assert run.app.repairs == 0
    assert chain_lock_once_free(double, conversation) == FREE_LOCK


def test_three_kills_inside_one_phase_recycle_the_host_and_the_run_completes(
        client: OpenAI, double: HostDouble, clean: list[Any]) -> None:
    def first_delta_after_reset(event: Any, seen: list[Any]) -> bool:
        return any(e.type == "response.in_progress" for e in seen) and event.type == "response.output_text.delta"

    k = SAMPLES["phase2-mid-deltas"](clean)
    run = crash_run(client, double, [at_seq(k), first_delta_after_reset, first_delta_after_reset])
    assert run.crashes == 3 and run.kill_after[0] == k
    assert (problems := check_run(client, run, clean)) == [], "\n".join(problems)
    # three worker crashes in 30 minutes reach the host's restart limit at least once, whatever came before
    assert run.stats_after["host_recycles"] - run.stats_before["host_recycles"] >= 1
    resets = [e for e in run.events[k + 1:] if e.type == "response.in_progress"]
    assert len(resets) == 3, "each kill inside the phase shows as one recovery reset"
    assert all(len(r.response.output) == 1 for r in resets), "every reset repeats phase 1 only, after phase 0"


@pytest.fixture(scope="module")
def short_visibility_double() -> Iterator[HostDouble]:
    with HostDouble(ROOT, env={**double_env(default_storage()), **SHORT_VISIBILITY}, settings=None) as running:
        yield running


@pytest.mark.parametrize("point", ["phase1-opening", "phase2-mid-deltas"])
def test_whole_host_killed_and_restarted_with_the_same_command(
        point: str, short_visibility_double: HostDouble, clean: list[Any]) -> None:
    double = short_visibility_double
    client = make_client(double.base_url)
    k = SAMPLES[point](clean)
    stream = client.responses.create(model="m", input=QUESTION, stream=True, background=True,
                                     metadata=knobs(PHASES, WORDS, DELAY_MS))
    with stream:
        events, _ = read_events(stream, at_seq(k))
        response_id = events[0].response.id
        killed = time.monotonic()
        double.kill_host()
    double.restart()
    run = finish_run(client, double, response_id, events, double.stats(), [k], [])
    resumed_after = time.monotonic() - killed
    # the counters of the dead host are gone: the app's log lines count the repeated phases
    assert (problems := check_run(client, run, clean, host_stats=False)) == [], "\n".join(problems)
    assert run.app.repairs == 0, "the restarted host resumed the work from storage by itself"
    assert resumed_after < 60.0, f"{resumed_after:.1f} s from the kill to the terminal event"


def test_whole_host_dies_between_an_episodes_sends_and_its_checkpoint(
        short_visibility_double: HostDouble, clean: list[Any]) -> None:
    """The Durable backend's one unguarded window: the episode that schedules phase 2 has sent its
    ``run_phase`` message (the phase starts streaming) but not committed its history when the container
    dies. After the restart the episode runs again and schedules phase 2 again, and the first message
    reappears too: two deliveries of the same phase, side by side, on a log one attempt already wrote."""
    double = short_visibility_double
    client = make_client(double.base_url)

    def phase_2_streams(event: Any, _seen: list[Any]) -> bool:
        return bool(event.type == "response.output_item.added" and event.output_index == 1)

    # The armed crash holds the window open (its own kill would come 30 s later); the test kills the host
    # inside it as soon as phase 2's first event reaches the client, however slow the machine is.
    response_id, events, broken = _stream_with_a_fault_in_phase_1(
        client, clean, lambda: double.crash_host_before_checkpoint("run_phase", delay=30.0),
        kill=(phase_2_streams, double.kill_host))
    assert broken, "the stream outlived the host"
    double.wait_dead()
    assert any(phase_2_streams(e, events) for e in events), "phase 2 was streaming when the host died"
    assert "episode sent 'run_phase'; the whole host dies" in double.log(), "the kill came inside the window"
    double.restart()
    run = finish_run(client, double, response_id, events, double.stats(), [events[-1].sequence_number], [])
    # phase 2 was delivered twice after the restart (the replayed episode's message and the dead host's,
    # which reappeared); when they overlap, the later one waits for the earlier one instead of taking the
    # log from it, so the kill repeats phase 2 once, as any other kill does
    assert run.stats_after["activity_redeliveries"].get("run_phase") == 1, run.stats_after
    assert (problems := check_run(client, run, clean, host_stats=False)) == [], "\n".join(problems)
