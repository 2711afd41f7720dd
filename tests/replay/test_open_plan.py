"""Replay tests of open plans (steps decided at run time), through the real azure-functions-durable SDK.

Each step's result says how many steps there are so far (``phases``), that the plan is open (``open``) and
how many output items the step left (``items``); the orchestrator runs the next step at the next output
position, asks every step to conclude the run when it is the last, and repeats only the step in flight.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from azure.durable_functions.models.actions.ActionType import ActionType

from resilient.engine.orchestration import orchestrator as orch
from resilient.engine.run import phase_record
from tests.replay.harness import History
from tests.replay.vocabulary import Orchestration, calls_of

RID = "resp_openplan"


def step_calls(episode: Any) -> list[dict[str, Any]]:
    return calls_of(episode.actions, orch.RUN_PHASE)


def agent(items_per_step: list[int], *, final: bool = True) -> Any:
    """An agent whose step ``i`` leaves ``items_per_step[i]`` items and asks for another while any remain."""

    def respond(kind: int, action: dict[str, Any], position: int) -> Any:
        if kind == ActionType.CALL_ACTIVITY:
            args = json.loads(action["input"])
            if action["functionName"] == orch.RUN_PHASE:
                index = args["index"]
                last = index == len(items_per_step) - 1
                result = {"index": index, "stop": None, "phases": index + (1 if last else 2),
                          phase_record.OPEN_KEY: True, phase_record.ITEMS_KEY: items_per_step[index]}
                if last and final and args.get("finalize"):
                    result["final"] = {"status": "completed"}
                return ("ok", result)
            if action["functionName"] == orch.FINALIZE:
                return ("ok", {"status": args["status"]})
        if kind == ActionType.CREATE_TIMER:
            return ("ok", None)
        raise AssertionError(f"unexpected action {action}")

    return respond


def test_the_orchestrator_and_the_engine_agree_on_the_result_keys() -> None:
    assert orch.OPEN_KEY == phase_record.OPEN_KEY and orch.ITEMS_KEY == phase_record.ITEMS_KEY


def test_steps_run_until_one_says_it_is_the_last_each_at_its_output_position(handle: Any) -> None:
    episode = Orchestration(handle, {"response_id": RID}).drive(agent([1, 2, 0, 1]))
    assert episode.is_done and episode.error is None
    calls = step_calls(episode)
    assert [c["index"] for c in calls] == [0, 1, 2, 3]
    assert [c.get("position") for c in calls] == [None, 1, 3, 3]  # step 0 starts at 0; a step with no item adds 0
    assert all(c.get("finalize") for c in calls)  # any step may be the last: each may conclude the run
    assert episode.output == {"status": "completed"}  # the last step concluded it: no finalize step


def test_a_step_in_flight_when_the_worker_died_is_the_only_one_repeated(handle: Any) -> None:
    run = Orchestration(handle, {"response_id": RID})
    run.started()
    run.phase(0).completed(phases=2, open=True, items=1)
    run.episode()
    # what the real host records when the worker dies under an activity (see resilient/engine/orchestration/failures.py)
    run.phase(1).crashed(reason="Microsoft.Azure.WebJobs.Script.Workers.WorkerProcessExitException: python "
                         "exited with code 137 (0x89)", details="")
    assert run.drive(agent([1, 1])).is_done
    records = [(e["EventType"], e.get("Name")) for e in run.history
               if e["EventType"] in (History.TASK_SCHEDULED, History.TIMER_CREATED)]
    assert records[:4] == [(History.TASK_SCHEDULED, orch.RUN_PHASE), (History.TASK_SCHEDULED, orch.RUN_PHASE),
                           (History.TIMER_CREATED, None), (History.TASK_SCHEDULED, orch.RUN_PHASE)]  # waits out
    steps_scheduled = run.scheduled(orch.RUN_PHASE)
    assert [c["index"] for c in steps_scheduled] == [0, 1, 1]  # step 0 never again; step 1 once more
    assert steps_scheduled[1] == steps_scheduled[2]  # the same step at the same position


def test_a_history_written_before_open_plans_replays_unchanged(handle: Any) -> None:
    """A fixed plan's results carry no ``open``/``items``: the payloads are what they always were."""

    def fixed(kind: int, action: dict[str, Any], position: int) -> Any:
        if kind == ActionType.CALL_ACTIVITY and action["functionName"] == orch.RUN_PHASE:
            args = json.loads(action["input"])
            return ("ok", {"index": args["index"], "stop": None, "phases": 3})
        if kind == ActionType.CALL_ACTIVITY:
            return ("ok", {"status": "completed"})
        raise AssertionError(f"unexpected action {action}")

    calls = step_calls(Orchestration(handle, {"response_id": RID}).drive(fixed))
    assert calls == [{"response_id": RID, "index": 0, "plan": True, "finalize": True},
                     {"response_id": RID, "index": 1}, {"response_id": RID, "index": 2, "finalize": True}]


def test_an_open_step_that_pauses_for_approval_ends_the_turn(handle: Any) -> None:
    def pausing(kind: int, action: dict[str, Any], position: int) -> Any:
        if kind == ActionType.CALL_ACTIVITY and action["functionName"] == orch.RUN_PHASE:
            args = json.loads(action["input"])
            stop = "paused" if args["index"] == 1 else None
            return ("ok", {"index": args["index"], "stop": stop, "phases": args["index"] + 2, "open": True,
                           "items": 1})
        return agent([1, 1])(kind, action, position)

    episode = Orchestration(handle, {"response_id": RID}).drive(pausing)
    assert [c["index"] for c in step_calls(episode)] == [0, 1]
    assert episode.output == {"status": "completed"}


def test_host_json_stamps_the_orchestrators_version_and_keeps_old_workers_off_new_instances() -> None:
    import pathlib

    durable = json.loads((pathlib.Path(__file__).resolve().parents[2] / "host.json").read_text())
    settings = durable["extensions"]["durableTask"]
    assert settings["defaultVersion"] == orch.ORCHESTRATION_VERSION
    assert settings["versionMatchStrategy"] == "CurrentOrOlder"  # new code runs old instances, not the reverse
    assert settings["versionFailureStrategy"] == "Reject"  # an old worker leaves a new instance for a new worker
    low = durable["extensionBundle"]["version"].strip("[(").split(",")[0]
    assert tuple(int(p) for p in low.split(".")) >= (4, 26, 0)  # the bundle that has orchestration versioning


@pytest.mark.parametrize("version", ["", "1.0"])
def test_an_instance_of_the_previous_version_replays_under_this_code(handle: Any, version: str) -> None:
    """A history written by the previous orchestrator (no version stamp, or 1.0): a fixed plan, mid-run when
    the new code takes over, finishes exactly as it would have."""
    run = Orchestration(handle, {"response_id": RID, "owns_lock": True}, version=version)
    run.started()
    run.phase(0).completed(phases=3)
    run.episode()  # the old code had scheduled phase 1 when the deployment happened
    run.phase(1).completed(phases=3)

    def old_activities(kind: int, action: dict[str, Any], position: int) -> Any:
        args = json.loads(action["input"])
        if action["functionName"] == orch.RUN_PHASE:
            return ("ok", {"index": args["index"], "stop": None, "phases": 3, "final": {"status": "completed"}})
        return ("ok", {"status": "completed"})

    done = run.drive(old_activities)
    assert done.is_done and done.error is None and done.output == {"status": "completed"}
    assert run.scheduled(orch.RUN_PHASE) == [{"response_id": RID, "index": 0, "plan": True, "finalize": True},
                                             {"response_id": RID, "index": 1},
                                             {"response_id": RID, "index": 2, "finalize": True}]

