"""A traced run's trace context reaches every activity: the orchestrator copies ``traceparent`` from its
input into each activity's input, unchanged, and adds nothing when the input has none (so untraced runs,
and every history recorded before, replay exactly as before). Driven through the REAL SDK handle."""

from __future__ import annotations

import json
from typing import Any

import pytest
from azure.durable_functions.models.actions.ActionType import ActionType

from resilient.engine.orchestration import orchestrator as orch
from tests.replay.harness import Replay, drive, orchestrator_handle

RID = "resp_tracetest"
PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture(scope="module")
def handle() -> Any:
    from tests.fresh_app import fresh_app

    return orchestrator_handle(fresh_app(), "responses_orchestrator")


def _respond(kind: int, action: dict[str, Any], position: int) -> Any:
    if kind == ActionType.CALL_ACTIVITY:
        args = json.loads(action["input"])
        if action["functionName"] == orch.RUN_PHASE:
            return ("ok", {"index": args["index"], "stop": None, "phases": 2})
        if action["functionName"] == orch.FINALIZE:
            return ("ok", {"status": args["status"]})
    if kind == ActionType.CREATE_TIMER:
        return ("ok", None)
    raise AssertionError(f"unexpected action {action}")


def _inputs(actions: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [(a["functionName"], json.loads(a["input"])) for a in actions
            if a["actionType"] == ActionType.CALL_ACTIVITY]


def test_every_activity_of_a_traced_run_carries_its_traceparent(handle: Any) -> None:
    episode = drive(Replay(handle, {"response_id": RID, orch.TRACE_PARENT_KEY: PARENT}), _respond)
    assert episode.is_done and episode.error is None
    assert _inputs(episode.actions) == [
        (orch.RUN_PHASE, {"response_id": RID, "index": 0, "plan": True, "finalize": True, "traceparent": PARENT}),
        (orch.RUN_PHASE, {"response_id": RID, "index": 1, "finalize": True, "traceparent": PARENT}),
        (orch.FINALIZE, {"response_id": RID, "status": "completed", "traceparent": PARENT}),
    ]


def test_a_retried_phase_keeps_the_traceparent(handle: Any) -> None:
    failed: list[int] = []

    def once_failing(kind: int, action: dict[str, Any], position: int) -> Any:
        if kind == ActionType.CALL_ACTIVITY and action["functionName"] == orch.RUN_PHASE and not failed:
            failed.append(position)
            return ("fail", "boom")
        return _respond(kind, action, position)

    episode = drive(Replay(handle, {"response_id": RID, orch.TRACE_PARENT_KEY: PARENT}), once_failing)
    assert episode.is_done and episode.error is None
    phases = [args for name, args in _inputs(episode.actions) if name == orch.RUN_PHASE]
    assert len(phases) == 3 and all(args["traceparent"] == PARENT for args in phases)


def test_an_untraced_run_schedules_no_trace_key(handle: Any) -> None:
    episode = drive(Replay(handle, {"response_id": RID}), _respond)
    assert episode.is_done
    assert all(orch.TRACE_PARENT_KEY not in args for _, args in _inputs(episode.actions))


def test_the_orchestrator_and_telemetry_name_the_same_key() -> None:
    from resilient.engine.orchestration import orchestrator
    from resilient.telemetry import spans

    assert orchestrator.TRACE_PARENT_KEY == spans.TRACE_PARENT_KEY
