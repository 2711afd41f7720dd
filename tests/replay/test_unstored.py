"""Replay tests of the store=false ending: after its run, the orchestration waits for ``client_done`` or the
grace timer, whichever comes first, then calls ``forget_response``; a stored run never waits."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pytest
from azure.durable_functions.models.actions.ActionType import ActionType

from tests.replay.harness import History
from tests.replay.vocabulary import Orchestration, name_of

RID = "resp_unstoredreplay"
GRACE = 90


def _name(action: dict[str, Any]) -> str:
    return name_of(action, indexes=False) or f"other:{action['actionType']}"


def _run(finalize_fails: bool = False) -> Any:
    """Answers run_phase/finalize/forget; leaves timers and waits pending (the test decides)."""

    def respond(kind: int, action: dict[str, Any], position: int) -> Any:
        if kind != ActionType.CALL_ACTIVITY:
            return None
        name, args = action["functionName"], json.loads(action["input"])
        if name == "run_phase":  # the first one plans too
            return ("ok", {"index": args["index"], "stop": None, "phases": 2})
        if name == "finalize_response":
            return ("fail", "storage down") if finalize_fails else ("ok", {"status": args["status"]})
        if name == "forget_response":
            assert args == {"response_id": RID}
            return ("ok", {"forgotten": True})
        raise AssertionError(action)

    return respond


def _fire_retry_timers(run: Orchestration, respond: Any) -> Any:
    """Drive through finalize's retry timers (they are not the grace timer: no wait is pending yet)."""
    episode = run.drive(respond)
    while episode.new_actions and [_name(a) for a in episode.new_actions] == ["timer"]:
        run.timer_fired()
        episode = run.drive(respond)
    return episode


def _fire_at(action: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(str(action["fireAt"]).replace("Z", "+00:00"))


def test_store_false_run_waits_for_its_client_then_forgets(handle: Any) -> None:
    run = Orchestration(handle, {"response_id": RID, "chain_id": None, "forget_after_seconds": GRACE},
                        instance_id=RID)
    waiting = run.drive(_run())
    assert not waiting.is_done
    names = [_name(a) for a in waiting.actions]
    assert names == ["run_phase", "run_phase", "finalize_response", "wait:client_done", "timer"]
    started = max(datetime.fromisoformat(e["Timestamp"].replace("Z", "+00:00")) for e in run.history
                  if e["EventType"] == History.ORCHESTRATOR_STARTED)
    assert _fire_at(waiting.actions[-1]) - started == timedelta(seconds=GRACE)
    again = run.episode()  # a replay with nothing new: still waiting, nothing deleted early
    assert again.new_actions == [] and not again.is_done

    run.raised("client_done", {"delivered": True})
    done = run.drive(_run())
    assert done.is_done and done.error is None
    assert [_name(a) for a in done.actions][-1] == "forget_response"
    assert done.output == {"status": "completed"}


def test_grace_timer_forgets_when_the_client_never_reports(handle: Any) -> None:
    run = Orchestration(handle, {"response_id": RID, "chain_id": None, "forget_after_seconds": GRACE},
                        instance_id=RID)
    waiting = run.drive(_run())
    assert name_of(waiting.actions[-1]) == "timer"  # the grace timer
    run.timer_fired()
    done = run.drive(_run())
    assert done.is_done
    assert [_name(a) for a in done.actions][-3:] == ["wait:client_done", "timer", "forget_response"]


# The SDK's words for an event raised before its wait exists; it keeps the event (``deferred_tasks``).
@pytest.mark.filterwarnings("ignore:Potential duplicate Task completion")
def test_client_done_before_the_run_ended_is_kept_until_the_end(handle: Any) -> None:
    """A client that left mid-run reports at once; the event waits in the orchestration's queue."""
    run = Orchestration(handle, {"response_id": RID, "chain_id": None, "forget_after_seconds": GRACE},
                        instance_id=RID)
    first = run.started()
    assert [_name(a) for a in first.new_actions] == ["run_phase"]
    run.phase(0).completed(phases=2)
    run.raised("client_done", {"delivered": False})
    done = run.drive(_run())
    assert done.is_done
    names = [_name(a) for a in done.actions]
    assert names.index("finalize_response") < names.index("forget_response")
    assert names[-1] == "forget_response"


def test_data_is_forgotten_even_when_finalize_keeps_failing(handle: Any) -> None:
    run = Orchestration(handle, {"response_id": RID, "chain_id": None, "forget_after_seconds": GRACE},
                        instance_id=RID)
    waiting = _fire_retry_timers(run, _run(finalize_fails=True))
    assert [_name(a) for a in waiting.new_actions] == ["wait:client_done", "timer"]
    run.raised("client_done", {"delivered": False})
    done = run.drive(_run(finalize_fails=True))
    assert done.is_done and done.output["status"] == "unfinalized"
    assert [_name(a) for a in done.actions][-1] == "forget_response"


def test_a_stored_run_never_waits_and_never_forgets(handle: Any) -> None:
    done = Orchestration(handle, {"response_id": RID, "chain_id": None}, instance_id=RID).drive(_run())
    assert done.is_done
    names = [_name(a) for a in done.actions]
    assert "forget_response" not in names and "wait:client_done" not in names and "timer" not in names
