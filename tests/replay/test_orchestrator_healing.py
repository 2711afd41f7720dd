"""Replay tests for the orchestrator's healing branches, through the REAL azure-functions-durable SDK.

What the real Functions host does (see resilient/engine/orchestration/failures.py): an activity whose
worker process died is recorded as TaskFailed ("... python exited with code 137 (0x89)",
WorkerProcessExitException), never re-delivered; a functionTimeout is TaskFailed too; an orchestrator
episode in flight marks the orchestration Failed, and the repair path starts a new execution (input
``repair: n``). Each test scripts those histories.
"""

from __future__ import annotations

from typing import Any

import pytest
from azure.durable_functions.models.actions.ActionType import ActionType

from resilient.engine.orchestration import orchestrator as orch
from tests.replay.vocabulary import (  # Script and WORKER_EXIT: tests/unit import them from here too
    NOT_READY,
    TIMEOUT,
    WORKER_EXIT,
    WORKER_EXIT_DETAILS,
    Orchestration,
    Script,
    activity,
    finalize_args,
    names,
)

RID = "resp_healing"
CHAIN = "conv_healing"


# ---------------------------------------------------------------------------------------------- crash budget
def test_worker_exit_is_retried_after_a_crash_timer_without_spending_attempts(handle: Any) -> None:
    script = Script(failures={"run_phase:0": [WORKER_EXIT] * 4})
    run = Orchestration(handle, {"response_id": RID})
    episode = run.drive(script)
    assert episode.is_done and episode.error is None
    # Four worker exits, more than the 3 ordinary attempts: each waits a crash timer, none is an attempt.
    assert names(episode.actions) == ["run_phase:0", "timer", "run_phase:0", "timer",
                                       "run_phase:0", "timer", "run_phase:0", "timer", "run_phase:0",
                                       "run_phase:1", "finalize_response"]
    assert run.timer_delays() == [3.0, 6.0, 12.0, 24.0]
    assert finalize_args(episode.actions)["status"] == "completed"
    assert episode.output == {"status": "completed"}


def test_three_worker_crashes_inside_one_phase_still_complete_the_run(handle: Any) -> None:
    script = Script(phases=3, failures={"run_phase:1": [WORKER_EXIT] * 3})
    episode = Orchestration(handle, {"response_id": RID}).drive(script)
    assert episode.output == {"status": "completed"}
    assert script.calls == {"run_phase:0": 1, "run_phase:1": 4, "run_phase:2": 1,
                            "finalize_response": 1}


def test_details_naming_the_worker_exit_exception_count_as_a_crash(handle: Any) -> None:
    """The reason line may not carry the exit code; the details name WorkerProcessExitException."""
    run = Orchestration(handle, {"response_id": RID})
    run.started()  # run_phase 0, which plans
    for _ in range(4):  # more than the ordinary attempts
        run.phase(0).crashed(reason="Activity function 'run_phase' failed: worker gone",
                             details=WORKER_EXIT_DETAILS)
        timer = run.episode()
        assert names(timer.new_actions) == ["timer"]
        run.timer_fired()
        again = run.episode()
        assert names(again.new_actions) == ["run_phase:0"]
    run.phase(0).completed(phases=1)
    assert names(run.episode().new_actions) == ["finalize_response"]


@pytest.mark.parametrize("text", [TIMEOUT, NOT_READY])
def test_timeouts_and_a_worker_not_yet_started_count_as_crashes(handle: Any, text: str) -> None:
    script = Script(failures={"run_phase:0": [text] * 4})
    episode = Orchestration(handle, {"response_id": RID}).drive(script)
    assert episode.output == {"status": "completed"}
    assert script.calls["run_phase:0"] == 5


def test_an_agent_error_that_mentions_an_exit_code_is_an_ordinary_failure(handle: Any) -> None:
    script = Script(failures={"run_phase:0": ["Activity function 'run_phase' failed: git exited with code 1"] * 3})
    episode = Orchestration(handle, {"response_id": RID}).drive(script)
    assert script.calls["run_phase:0"] == orch.PHASE_ATTEMPTS
    assert episode.output == {"status": "failed"}


def test_step_crash_budget_exhausted_ends_failed_finalizes_and_releases_the_lock(handle: Any) -> None:
    script = Script(failures={"run_phase:0": [WORKER_EXIT] * 20},
                    entity={"acquire": {"state": "granted"}, "release": {"released": True, "next": "resp_next"}})
    run = Orchestration(handle, {"response_id": RID, "chain_id": CHAIN})
    episode = run.drive(script)
    assert episode.is_done and episode.error is None
    assert script.calls["run_phase:0"] == 1 + orch.CRASH_RETRIES_PER_STEP
    final = finalize_args(episode.actions)
    assert final["status"] == "failed" and final["error"]["code"] == "server_error"
    assert "worker process stopped" in final["error"]["message"]
    assert "Traceback" not in final["error"]["message"]
    assert names(episode.actions)[-3:] == ["finalize_response", "entity:release", "wake_next_turn"]
    assert activity(episode.actions[-1])[1] == {"response_id": "resp_next"}
    assert episode.output == {"status": "failed"}


def test_run_crash_budget_spans_the_phases(handle: Any) -> None:
    """Two worker exits in every phase: the run budget (10) is spent in phase 5 even though no single
    phase used up its own retries."""
    failures = {f"run_phase:{i}": [WORKER_EXIT] * 2 for i in range(8)}
    script = Script(phases=8, failures=failures)
    episode = Orchestration(handle, {"response_id": RID}).drive(script)
    assert [script.calls.get(f"run_phase:{i}", 0) for i in range(8)] == [3, 3, 3, 3, 3, 1, 0, 0]
    assert finalize_args(episode.actions)["status"] == "failed"
    assert episode.output == {"status": "failed"}


def test_ordinary_failures_keep_their_own_attempts_between_crashes(handle: Any) -> None:
    script = Script(failures={"run_phase:0": [WORKER_EXIT, "storage unavailable", WORKER_EXIT,
                                              "storage unavailable"]})
    run = Orchestration(handle, {"response_id": RID})
    episode = run.drive(script)
    assert episode.output == {"status": "completed"}
    assert run.timer_delays() == [3.0, 2.0, 6.0, 4.0]  # crash, ordinary, crash, ordinary backoffs
    failing = Script(failures={"run_phase:0": [WORKER_EXIT, "boom", WORKER_EXIT, "boom", "boom"]})
    episode = Orchestration(handle, {"response_id": RID}).drive(failing)
    assert failing.calls["run_phase:0"] == 5  # 2 crashes + the 3 ordinary attempts
    assert "boom" in finalize_args(episode.actions)["error"]["message"]


def test_the_planning_phase_and_finalize_are_retried_after_worker_exits_too(handle: Any) -> None:
    script = Script(phases=1, failures={"run_phase:0": [WORKER_EXIT] * 2,
                                        "finalize_response": [WORKER_EXIT] * 4})
    episode = Orchestration(handle, {"response_id": RID}).drive(script)
    assert script.calls == {"run_phase:0": 3, "finalize_response": 5}
    assert episode.output == {"status": "completed"}


# ------------------------------------------------------------------------------------ failure-safe steps
def test_failing_mark_queued_does_not_keep_the_turn_from_running(handle: Any) -> None:
    run = Orchestration(handle, {"response_id": RID, "chain_id": CHAIN})
    script = Script(failures={"mark_queued": ["storage unavailable"] * 10},
                    entity={"acquire": {"state": "queued", "position": 1, "active": "resp_a"},
                            "release": {"released": True, "next": None}}, hold_rechecks_of=run.replay)
    waiting = run.drive(script)
    assert script.calls["mark_queued"] == orch.STEP_ATTEMPTS
    assert names(waiting.actions)[-3:] == ["wait:lock_granted", "wait:cancel", "timer"]
    run.raised("lock_granted", {"granted": True})
    done = run.drive(script)
    assert done.is_done and done.error is None and done.output == {"status": "completed"}


def test_failing_wake_does_not_fail_the_orchestration(handle: Any) -> None:
    script = Script(failures={"wake_next_turn": ["raise_event: 410 Gone"] * 20},
                    entity={"acquire": {"state": "granted"}, "release": {"released": True, "next": "resp_next"}})
    episode = Orchestration(handle, {"response_id": RID, "chain_id": CHAIN}).drive(script)
    assert episode.is_done and episode.error is None
    assert script.calls["wake_next_turn"] == orch.FINALIZE_ATTEMPTS
    assert episode.output == {"status": "completed"}


def test_failing_release_does_not_fail_the_orchestration(handle: Any) -> None:
    script = Script(entity={"acquire": {"state": "granted"}, "release": "entity exploded"})
    episode = Orchestration(handle, {"response_id": RID, "chain_id": CHAIN}).drive(script)
    assert episode.is_done and episode.error is None
    assert names(episode.actions).count("entity:release") == orch.ENTITY_ATTEMPTS
    assert "wake_next_turn" not in names(episode.actions)
    assert episode.output == {"status": "completed"}


def test_failing_acquire_ends_the_turn_failed_and_leaves_the_chain(handle: Any) -> None:
    script = Script(entity={"acquire": "entity exploded", "remove": {"removed": False, "next": "resp_next"}})
    episode = Orchestration(handle, {"response_id": RID, "chain_id": CHAIN}).drive(script)
    assert episode.is_done and episode.error is None
    asked = names(episode.actions)
    assert asked.count("entity:acquire") == orch.ENTITY_ATTEMPTS
    assert "run_phase:0" not in asked
    assert asked[-3:] == ["finalize_response", "entity:remove", "wake_next_turn"]
    assert finalize_args(episode.actions)["status"] == "failed"


def test_finalize_failing_for_minutes_still_hands_the_lock_on(handle: Any) -> None:
    script = Script(failures={"finalize_response": ["storage unavailable"] * 20},
                    entity={"acquire": {"state": "granted"}, "release": {"released": True, "next": "resp_next"}})
    episode = Orchestration(handle, {"response_id": RID, "chain_id": CHAIN}).drive(script)
    assert episode.is_done and episode.error is None
    assert script.calls["finalize_response"] == orch.FINALIZE_ATTEMPTS
    assert names(episode.actions)[-2:] == ["entity:release", "wake_next_turn"]
    assert episode.output["status"] == "unfinalized"  # the repair path restarts it: its row is still active


# ------------------------------------------------------------------------------- queued turn: rechecks
def test_recheck_heals_a_grant_whose_event_was_lost(handle: Any) -> None:
    script = Script(entity={"acquire": [{"state": "queued", "position": 1, "active": "resp_a"},
                                        {"state": "granted"}],
                            "release": {"released": True, "next": None}})
    run = Orchestration(handle, {"response_id": RID, "chain_id": CHAIN})
    episode = run.drive(script)
    assert episode.output == {"status": "completed"}
    asked = names(episode.actions)
    assert asked[:7] == ["entity:acquire", "mark_queued", "wait:lock_granted", "wait:cancel", "timer",
                         "entity:acquire", "run_phase:0"]
    assert run.timer_delays()[0] == orch.LOCK_RECHECK_SECONDS[0]


def test_recheck_releases_a_lock_held_by_a_turn_whose_run_is_over(handle: Any) -> None:
    """The holder finalized but its orchestration died before it released: release on its behalf."""
    script = Script(entity={"acquire": {"state": "queued", "position": 1, "active": "resp_old"},
                            "release": [{"released": True, "next": RID}, {"released": True, "next": None}]},
                    inspect={"status": "completed", "over": True})
    episode = Orchestration(handle, {"response_id": RID, "chain_id": CHAIN}).drive(script)
    assert episode.output == {"status": "completed"}
    asked = names(episode.actions)
    assert asked[4:8] == ["timer", "entity:acquire", "inspect_response", "entity:release"]
    assert activity(episode.actions[6])[1] == {"response_id": "resp_old"}
    assert script.entity_inputs[2] == ("release", {"response_id": "resp_old"})
    assert asked[8] == "run_phase:0"
    assert script.entity_inputs[-1] == ("release", {"response_id": RID})


def test_a_turn_with_nothing_ahead_frees_a_finished_holder_at_once(handle: Any) -> None:
    """The create saw no unfinished turn ahead, yet the lock is held (the holder's orchestration died after
    its finalize): the holder is inspected and released right after the queued answer, no recheck timer,
    and the turn is never marked queued."""
    script = Script(entity={"acquire": {"state": "queued", "position": 1, "active": "resp_old"},
                            "release": [{"released": True, "next": RID}, {"released": True, "next": None}]},
                    inspect={"status": "completed", "over": True})
    run = Orchestration(handle, {"response_id": RID, "chain_id": CHAIN, orch.NOTHING_AHEAD_KEY: True})
    episode = run.drive(script)
    assert episode.output == {"status": "completed"}
    asked = names(episode.actions)
    assert asked[:4] == ["entity:acquire", "inspect_response", "entity:release", "run_phase:0"]
    assert activity(episode.actions[1])[1] == {"response_id": "resp_old"}
    assert script.entity_inputs[1] == ("release", {"response_id": "resp_old"})
    assert "mark_queued" not in asked and run.timer_delays() == []


def test_a_turn_with_nothing_ahead_still_waits_for_a_running_holder(handle: Any) -> None:
    """A holder that is still running (a turn created after this one's create looked): one inspection,
    then the usual queue: marked queued, waiting for the grant with the first recheck timer."""
    script = Script(entity={"acquire": {"state": "queued", "position": 1, "active": "resp_busy"}},
                    inspect={"status": "in_progress", "over": False})
    run = Orchestration(handle, {"response_id": RID, "chain_id": CHAIN, orch.NOTHING_AHEAD_KEY: True})

    def respond(kind: int, action: dict[str, Any], position: int) -> Any:
        return None if kind == ActionType.CREATE_TIMER else script(kind, action, position)

    waiting = run.drive(respond)
    assert not waiting.is_done
    assert names(waiting.actions) == ["entity:acquire", "inspect_response", "mark_queued", "wait:lock_granted",
                                       "wait:cancel", "timer"]
    assert "entity:release" not in names(waiting.actions)
    assert run.timer_delays() == [orch.LOCK_RECHECK_SECONDS[0]]


def test_recheck_hands_a_stale_lock_to_the_turn_ahead_and_keeps_waiting(handle: Any) -> None:
    script = Script(entity={"acquire": {"state": "queued", "position": 2, "active": "resp_old"},
                            "release": {"released": True, "next": "resp_ahead"}},
                    inspect={"status": "completed", "over": True})
    run = Orchestration(handle, {"response_id": RID, "chain_id": CHAIN})
    rounds = {"n": 0}

    def respond(kind: int, action: dict[str, Any], position: int) -> Any:
        if kind == ActionType.CREATE_TIMER:
            rounds["n"] += 1
            return ("ok", None) if rounds["n"] == 1 else None  # one recheck, then wait
        return script(kind, action, position)

    waiting = run.drive(respond)
    assert not waiting.is_done
    assert names(waiting.actions)[4:] == ["timer", "entity:acquire", "inspect_response", "entity:release",
                                           "wake_next_turn", "timer"]
    assert activity(waiting.actions[8])[1] == {"response_id": "resp_ahead"}
    assert run.timer_delays() == [orch.LOCK_RECHECK_SECONDS[0], orch.LOCK_RECHECK_SECONDS[1]]


def test_recheck_leaves_a_running_holder_alone(handle: Any) -> None:
    script = Script(entity={"acquire": {"state": "queued", "position": 1, "active": "resp_busy"}},
                    inspect={"status": "in_progress", "over": False})
    run = Orchestration(handle, {"response_id": RID, "chain_id": CHAIN})
    fired = {"n": 0}

    def respond(kind: int, action: dict[str, Any], position: int) -> Any:
        if kind == ActionType.CREATE_TIMER:
            fired["n"] += 1
            return ("ok", None) if fired["n"] <= 6 else None
        return script(kind, action, position)

    waiting = run.drive(respond)
    assert not waiting.is_done
    asked = names(waiting.actions)
    assert asked.count("entity:acquire") == 1 + 6 and asked.count("inspect_response") == 6  # asked each round
    assert "entity:release" not in asked
    assert run.timer_delays() == [15.0, 30.0, 60.0, 120.0, 300.0, 300.0, 300.0]
    run.raised("lock_granted", {"granted": True})
    script.entity["release"] = {"released": True, "next": None}
    done = run.drive(script)
    assert done.output == {"status": "completed"}


@pytest.mark.parametrize("grant_first", [True, False])
def test_a_grant_and_the_recheck_timer_landing_in_one_episode_do_not_fail_the_orchestration(
        handle: Any, grant_first: bool) -> None:
    """Both orders within one episode: the first one wins (the SDK raises if a fired timer is cancelled)."""
    run = Orchestration(handle, {"response_id": RID, "chain_id": CHAIN})
    run.started()
    run.entity("acquire").answered({"state": "queued", "position": 1, "active": "resp_a"})
    waiting = run.episode()
    run.activity("mark_queued").returned({"queued": True})
    waiting = run.episode()
    assert names(waiting.new_actions) == ["wait:lock_granted", "wait:cancel", "timer"]
    if grant_first:
        run.raised("lock_granted", {"granted": True})
    run.timer_fired()
    if not grant_first:
        run.raised("lock_granted", {"granted": True})
    after = run.episode()
    assert after.error is None and not after.is_done
    assert names(after.new_actions) == (["run_phase:0"] if grant_first else ["entity:acquire"])


# ---------------------------------------------------------------------------------- repair executions
def test_repair_execution_first_inspects_then_resumes_from_the_checkpoints(handle: Any) -> None:
    """The new execution's first episode asks only for inspect; the phases follow, the first planning again
    (the activities return the stored plan and checkpointed phases without streaming them again)."""
    run = Orchestration(handle, {"response_id": RID, "chain_id": CHAIN, "repair": 1})
    first = run.started()
    assert names(first.new_actions) == ["inspect_response"]
    run.activity("inspect_response").returned({"status": "in_progress", "over": False})
    second = run.episode()
    assert names(second.new_actions) == ["entity:acquire"]
    script = Script(phases=3, entity={"acquire": {"state": "granted"},
                                      "release": {"released": True, "next": "resp_next"}})
    run.entity("acquire").answered({"state": "granted"})  # acquire is idempotent for the holder: granted again
    done = run.drive(script)
    assert names(done.actions) == ["inspect_response", "entity:acquire", "run_phase:0", "run_phase:1",
                                   "run_phase:2", "finalize_response", "entity:release", "wake_next_turn"]
    assert activity(done.actions[-1])[1] == {"response_id": "resp_next"}  # the lock is handed on
    assert done.output == {"status": "completed"}


def test_repair_of_a_run_that_already_ended_only_hands_the_lock_on(handle: Any) -> None:
    script = Script(entity={"remove": {"released": True, "next": "resp_next"}},
                    inspect={"status": "cancelled", "over": False})
    episode = Orchestration(handle, {"response_id": RID, "chain_id": CHAIN, "repair": 2}).drive(script)
    assert episode.is_done and episode.error is None
    assert names(episode.actions) == ["inspect_response", "finalize_response", "entity:remove", "wake_next_turn"]
    assert activity(episode.actions[-1])[1] == {"response_id": "resp_next"}


def test_repair_of_a_response_that_is_gone_leaves_the_chain(handle: Any) -> None:
    script = Script(entity={"remove": {"removed": True, "next": None}}, inspect={"status": "gone", "over": True})
    episode = Orchestration(handle, {"response_id": RID, "chain_id": CHAIN, "repair": 1}).drive(script)
    assert names(episode.actions) == ["inspect_response", "finalize_response", "entity:remove"]


def test_repair_of_a_queued_turn_queues_again(handle: Any) -> None:
    script = Script(entity={"acquire": {"state": "queued", "position": 1, "active": "resp_a"}},
                    inspect={"status": "queued", "over": False}, hold_timers=True)
    episode = Orchestration(handle, {"response_id": RID, "chain_id": CHAIN, "repair": 1}).drive(script)
    assert not episode.is_done
    assert names(episode.actions) == ["inspect_response", "entity:acquire", "mark_queued", "wait:lock_granted",
                                       "wait:cancel", "timer"]


def test_repair_whose_inspect_fails_takes_the_normal_path(handle: Any) -> None:
    script = Script(phases=1, failures={"inspect_response": ["storage unavailable"] * 5})
    episode = Orchestration(handle, {"response_id": RID, "repair": 1}).drive(script)
    assert script.calls["inspect_response"] == orch.STEP_ATTEMPTS
    assert names(episode.actions)[-2:] == ["run_phase:0", "finalize_response"]
    assert episode.output == {"status": "completed"}


def test_stop_outcomes_table() -> None:
    assert orch.outcome_of_stop({"stop": "cancelled"}) == {"status": "cancelled"}
    assert orch.outcome_of_stop({"stop": "steered"}) == {"status": "completed", "steered": True}
    error = {"code": "server_error", "message": "too long"}
    assert orch.outcome_of_stop({"stop": "failed", "error": error}) == {"status": "failed", "error": error}
    assert orch.outcome_of_stop({"stop": None}) == {"status": "completed"}
