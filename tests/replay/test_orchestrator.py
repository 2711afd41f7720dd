"""Replay tests: the registered orchestrator, run by the real azure-functions-durable SDK on built histories."""

from __future__ import annotations

import json
from typing import Any

from azure.durable_functions.models.actions.ActionType import ActionType

from resilient.engine.orchestration import orchestrator as orch
from tests.replay.harness import Replay
from tests.replay.vocabulary import Orchestration, activity, happy, names

RID = "resp_replaytest"


def test_first_episode_schedules_only_the_first_phase_which_plans(handle: Any) -> None:
    episode = Replay(handle, {"response_id": RID}).run()
    assert not episode.is_done
    assert len(episode.new_actions) == 1
    assert activity(episode.new_actions[0]) == ("run_phase", {"response_id": RID, "index": 0, "plan": True,
                                                               "finalize": True})


def test_each_phase_runs_once_then_finalize(handle: Any) -> None:
    run = Orchestration(handle, {"response_id": RID})
    episode = run.drive(happy(3))
    assert episode.is_done and episode.error is None
    assert names(episode.actions) == ["run_phase:0", "run_phase:1", "run_phase:2", "finalize_response"]
    assert episode.output == {"status": "completed"}
    finalize = activity(episode.actions[-1])[1]
    assert finalize == {"response_id": RID, "status": "completed"}
    assert episode.custom_status == {"response_id": RID, "status": "completed"}


def test_only_the_last_phase_is_asked_to_conclude_the_run(handle: Any) -> None:
    episode = Orchestration(handle, {"response_id": RID}).drive(happy(3))
    phases = [activity(a)[1] for a in episode.actions if activity(a)[0] == "run_phase"]
    assert phases == [{"response_id": RID, "index": 0, "plan": True, "finalize": True},  # the count is not known
                      {"response_id": RID, "index": 1}, {"response_id": RID, "index": 2, "finalize": True}]


def test_a_last_phase_that_concluded_the_run_saves_the_finalize_step(handle: Any) -> None:
    def concluded(kind: int, action: dict[str, Any], position: int) -> Any:
        if kind == ActionType.CALL_ACTIVITY and activity(action)[0] == "run_phase":
            args = activity(action)[1]
            final = {"final": {"status": "completed"}} if args["index"] == 2 else {}
            return ("ok", {"index": args["index"], "stop": None, "phases": 3, **final})
        return happy(3)(kind, action, position)

    episode = Orchestration(handle, {"response_id": RID}).drive(concluded)
    assert episode.is_done and episode.error is None
    assert names(episode.actions) == ["run_phase:0", "run_phase:1", "run_phase:2"]
    assert episode.output == {"status": "completed"}
    assert episode.custom_status == {"response_id": RID, "status": "completed"}


def test_a_one_phase_plan_is_planned_run_and_concluded_by_one_activity(handle: Any) -> None:
    def one(kind: int, action: dict[str, Any], position: int) -> Any:
        if kind == ActionType.CALL_ACTIVITY and activity(action)[0] == "run_phase":
            return ("ok", {"index": 0, "stop": None, "phases": 1, "final": {"status": "completed"}})
        raise AssertionError(f"unexpected action {action}")

    episode = Orchestration(handle, {"response_id": RID}).drive(one)
    assert episode.is_done and names(episode.actions) == ["run_phase:0"]
    assert episode.output == {"status": "completed"}


def test_a_last_phase_that_could_not_conclude_leaves_it_to_the_finalize_step(handle: Any) -> None:
    """The activity's own conclusion failed (it says nothing of ``final``): finalize runs as before."""
    episode = Orchestration(handle, {"response_id": RID}).drive(happy(2))
    assert names(episode.actions)[-2:] == ["run_phase:1", "finalize_response"]
    assert activity(episode.actions[-1])[1] == {"response_id": RID, "status": "completed"}


def test_custom_status_names_the_running_phase(handle: Any) -> None:
    run = Orchestration(handle, {"response_id": RID})
    first = run.started()
    assert names(first.new_actions) == ["run_phase:0"]
    assert first.custom_status == {"response_id": RID, "phase": 0}  # planned by this phase: count not known yet
    run.phase(0).completed(phases=4)
    second = run.episode()
    assert names(second.new_actions) == ["run_phase:1"]
    assert second.custom_status == {"response_id": RID, "phase": 1, "phases": 4}


def test_crash_with_activity_in_flight_waits_instead_of_rescheduling(handle: Any) -> None:
    """A worker restart replays the orchestrator with no new result: it must not schedule phase 1 again."""
    run = Orchestration(handle, {"response_id": RID})
    run.started()  # schedules run_phase 0 (which plans)
    run.phase(0).completed(phases=3)
    scheduled = run.episode()  # schedules run_phase 1, then the worker "dies"
    assert names(scheduled.new_actions) == ["run_phase:1"]
    for _ in range(3):  # replays after restarts: nothing new
        again = run.episode()
        assert again.new_actions == [] and not again.is_done
    # The re-delivered activity completes: the orchestration goes on with phase 2.
    run.phase(1).completed(phases=3)
    after = run.episode()
    assert names(after.new_actions) == ["run_phase:2"]
    assert names(after.actions).count("run_phase:1") == 1


def test_cancelled_phase_stops_the_plan_and_finalizes_cancelled(handle: Any) -> None:
    episode = Orchestration(handle, {"response_id": RID}).drive(happy(4, stop_at=1, stop="cancelled"))
    assert names(episode.actions) == ["run_phase:0", "run_phase:1", "finalize_response"]
    assert activity(episode.actions[-1])[1]["status"] == "cancelled"
    assert episode.output == {"status": "cancelled"}


def test_steered_phase_completes_early(handle: Any) -> None:
    episode = Orchestration(handle, {"response_id": RID}).drive(happy(4, stop_at=2, stop="steered"))
    assert names(episode.actions)[-2:] == ["run_phase:2", "finalize_response"]
    assert activity(episode.actions[-1])[1] == {"response_id": RID, "status": "completed", "steered": True}


def test_plan_that_finds_a_cancelled_response_goes_straight_to_finalize(handle: Any) -> None:
    def respond(kind: int, action: dict[str, Any], position: int) -> Any:
        name, args = activity(action)
        return ("ok", {"index": 0, "stop": "cancelled"} if name == "run_phase" else {"status": args["status"]})

    episode = Orchestration(handle, {"response_id": RID}).drive(respond)
    assert names(episode.actions) == ["run_phase:0", "finalize_response"]
    assert episode.output == {"status": "cancelled"}


def test_transient_failure_is_retried_after_a_durable_timer(handle: Any) -> None:
    failures = {"n": 0}

    def respond(kind: int, action: dict[str, Any], position: int) -> Any:
        if kind == ActionType.CALL_ACTIVITY and activity(action)[0] == "run_phase" and failures["n"] < 1:
            failures["n"] += 1
            return ("fail", "storage unavailable")
        return happy(2)(kind, action, position)

    episode = Orchestration(handle, {"response_id": RID}).drive(respond)
    assert names(episode.actions) == ["run_phase:0", "timer", "run_phase:0", "run_phase:1", "finalize_response"]
    assert episode.output == {"status": "completed"}


def test_activity_failing_every_attempt_finalizes_failed(handle: Any) -> None:
    def respond(kind: int, action: dict[str, Any], position: int) -> Any:
        if kind == ActionType.CALL_ACTIVITY and activity(action)[0] == "run_phase":
            return ("fail", "agent exploded")
        return happy(2)(kind, action, position)

    episode = Orchestration(handle, {"response_id": RID}).drive(respond)
    asked = names(episode.actions)
    assert asked.count("run_phase:0") == 3 and "run_phase:1" not in asked
    final = activity(episode.actions[-1])[1]
    assert final["status"] == "failed" and final["error"]["code"] == "server_error"
    assert "agent exploded" in final["error"]["message"]
    assert episode.output == {"status": "failed"}


def test_long_plan_replays_deterministically(handle: Any) -> None:
    runs = [Orchestration(handle, {"response_id": RID}).drive(happy(20)) for _ in range(2)]
    assert runs[0].actions == runs[1].actions
    assert names(runs[0].actions)[:20] == [f"run_phase:{i}" for i in range(20)]
    # History stays small: a handful of records per phase and no payloads beyond ids and indexes.
    run = Orchestration(handle, {"response_id": RID})
    run.drive(happy(20))
    size = len(json.dumps(run.history))
    assert size < 40_000, size


def _locked(answer: dict[str, Any], later: list[tuple[str, Any]] | None = None) -> Any:
    """Responder for a turn on a chain: acquire answers ``answer``; release hands over to ``resp_next``.
    While the turn is queued its lock-recheck timers stay pending (no time passes)."""

    def respond(kind: int, action: dict[str, Any], position: int) -> Any:
        if kind == ActionType.CREATE_TIMER and answer.get("state") == "queued":
            return None
        if kind == ActionType.CALL_ENTITY:
            op = action["operation"]
            if op == "acquire":
                return ("ok", answer)
            if op == "release":
                return ("ok", {"released": True, "next": "resp_next"})
            if op == "remove":
                return ("ok", {"removed": True, "next": None})
        if kind == ActionType.WAIT_FOR_EXTERNAL_EVENT:
            return ("event", later.pop(0)) if later else None
        if kind == ActionType.CALL_ACTIVITY and activity(action)[0] in ("mark_queued", "wake_next_turn"):
            return ("ok", {})
        return happy(2)(kind, action, position)

    return respond


def test_chain_turn_acquires_runs_releases_and_wakes_the_next(handle: Any) -> None:
    run = Orchestration(handle, {"response_id": RID, "chain_id": "conv_chain"})
    episode = run.drive(_locked({"state": "granted"}))
    assert names(episode.actions) == ["entity:acquire", "run_phase:0", "run_phase:1", "finalize_response",
                                       "entity:release", "wake_next_turn"]
    assert activity(episode.actions[-1])[1] == {"response_id": "resp_next"}
    assert episode.actions[0]["instanceId"] == "@chain_lock@conv_chain"


def test_a_root_turn_owns_its_chains_lock_and_only_releases_it(handle: Any) -> None:
    """A stored root turn's first episode schedules its first phase: no entity round trip before it."""
    root = {"response_id": RID, "chain_id": RID, orch.OWNS_LOCK_KEY: True}
    assert names(Replay(handle, root).run().new_actions) == ["run_phase:0"]
    episode = Orchestration(handle, root).drive(_locked({"state": "granted"}))
    assert names(episode.actions) == ["run_phase:0", "run_phase:1", "finalize_response", "entity:release",
                                       "wake_next_turn"]
    assert episode.actions[3]["instanceId"] == f"@chain_lock@{RID}"


def test_a_root_turn_started_without_the_flag_replays_its_acquire(handle: Any) -> None:
    """An execution whose input lacks ``owns_lock`` (started before roots owned their locks, or by an
    older create) takes the lock as its history recorded; the entity grants it to the root at once."""
    run = Orchestration(handle, {"response_id": RID, "chain_id": RID})
    episode = run.drive(_locked({"state": "granted"}))
    assert names(episode.actions)[:2] == ["entity:acquire", "run_phase:0"]


def test_queued_turn_waits_for_the_grant_then_runs(handle: Any) -> None:
    run = Orchestration(handle, {"response_id": RID, "chain_id": "conv_chain"})
    waiting = run.drive(_locked({"state": "queued", "position": 1}))
    assert not waiting.is_done
    assert names(waiting.actions) == ["entity:acquire", "mark_queued", "wait:lock_granted", "wait:cancel",
                                       "timer"]
    assert waiting.custom_status == {"response_id": RID, "state": "queued"}
    run.raised("lock_granted", {"granted": True})
    done = run.drive(_locked({"state": "queued"}))
    assert done.is_done
    assert names(done.actions)[5:] == ["run_phase:0", "run_phase:1", "finalize_response", "entity:release",
                                        "wake_next_turn"]
    assert done.actions[4]["isCanceled"] is True  # the grant won: its recheck timer is cancelled


def test_queued_turn_cancelled_leaves_the_queue_without_running(handle: Any) -> None:
    run = Orchestration(handle, {"response_id": RID, "chain_id": "conv_chain"})
    run.drive(_locked({"state": "queued", "position": 2}))
    run.raised("cancel", {})
    done = run.drive(_locked({"state": "queued"}))
    assert done.is_done
    asked = names(done.actions)
    assert asked[5:] == ["entity:remove", "finalize_response"]
    assert "run_phase:0" not in asked and "entity:release" not in asked
    assert activity(done.actions[-1])[1]["status"] == "cancelled"


def test_lock_is_released_even_when_the_run_fails(handle: Any) -> None:
    def respond(kind: int, action: dict[str, Any], position: int) -> Any:
        if kind == ActionType.CALL_ACTIVITY and activity(action)[1].get("plan"):
            return ("fail", "planner down")
        return _locked({"state": "granted"})(kind, action, position)

    episode = Orchestration(handle, {"response_id": RID, "chain_id": "conv_chain"}).drive(respond)
    asked = names(episode.actions)
    assert asked[-3:] == ["finalize_response", "entity:release", "wake_next_turn"]
    assert activity(episode.actions[asked.index("finalize_response")])[1]["status"] == "failed"


def test_lock_is_released_even_when_finalize_keeps_failing(handle: Any) -> None:
    def respond(kind: int, action: dict[str, Any], position: int) -> Any:
        if kind == ActionType.CALL_ACTIVITY and activity(action)[0] == "finalize_response":
            return ("fail", "storage down")
        return _locked({"state": "granted"})(kind, action, position)

    episode = Orchestration(handle, {"response_id": RID, "chain_id": "conv_chain"}).drive(respond)
    asked = names(episode.actions)
    assert asked.count("finalize_response") == 6
    assert asked[-2:] == ["entity:release", "wake_next_turn"]
    assert episode.is_done and episode.output["status"] == "unfinalized"
