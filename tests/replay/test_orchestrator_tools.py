"""Replay tests for the tool, approval and model-retry branches of the orchestrator, run by the real
azure-functions-durable SDK on built histories (nothing of the SDK is mocked)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from azure.durable_functions.models.actions.ActionType import ActionType
from azure.durable_functions.models.history.HistoryEventType import HistoryEventType as History

from resilient.engine.orchestration import orchestrator as orch
from tests.replay.harness import Replay
from tests.replay.vocabulary import Orchestration, activity, names

RID = "resp_toolsreplay"
RATE_LIMITED = {"code": "rate_limit_exceeded", "message": "Rate limit reached. Retry after 30 seconds."}


def _timer_waits(replay: Replay) -> list[float]:
    """Each timer's wait: its fire time minus the orchestration clock (the ``OrchestratorStarted``
    timestamp) of the episode that created it."""
    waits, clock = [], None
    for event in replay.history:
        if event["EventType"] == History.ORCHESTRATOR_STARTED:
            clock = _time(event["Timestamp"])
        elif event["EventType"] == History.TIMER_CREATED:
            assert clock is not None
            waits.append((_time(event["FireAt"]) - clock).total_seconds())
    return waits


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def script(phases: int, answers: dict[int, list[dict[str, Any]]]) -> Any:
    """``answers[i]`` lists run_phase i's successive answers (the last one repeats)."""
    calls: dict[int, int] = {}

    def respond(kind: int, action: dict[str, Any], position: int) -> Any:
        if kind == ActionType.CALL_ACTIVITY:
            name, args = activity(action)
            if name == "run_phase":  # the first one plans too: its summaries say how many phases there are
                index = args["index"]
                seen = calls.get(index, 0)
                calls[index] = seen + 1
                options = answers.get(index) or [{"index": index, "stop": None}]
                return ("ok", {"phases": phases, **options[min(seen, len(options) - 1)]})
            if name == "finalize_response":
                return ("ok", {"status": args["status"]})
        if kind == ActionType.CREATE_TIMER:
            return ("ok", None)
        raise AssertionError(f"unexpected action {action}")

    return respond


@pytest.mark.parametrize("reason", ["paused", "tool_calls"])
def test_a_turn_ending_in_calls_or_approval_completes_without_further_phases(handle: Any, reason: str) -> None:
    episode = Orchestration(handle, {"response_id": RID}).drive(script(4, {1: [{"index": 1, "stop": reason}]}))
    assert episode.is_done and episode.error is None
    assert names(episode.actions) == ["run_phase:0", "run_phase:1", "finalize_response"]
    assert activity(episode.actions[-1])[1] == {"response_id": RID, "status": "completed", "ended": reason}


def test_retry_after_waits_that_long_on_a_durable_timer_then_runs_the_phase_again(handle: Any) -> None:
    answers = {0: [{"index": 0, "retry_after": 30, "error": RATE_LIMITED}, {"index": 0, "stop": None}]}
    run = Orchestration(handle, {"response_id": RID})
    episode = run.drive(script(2, answers))
    assert episode.is_done and episode.error is None
    assert names(episode.actions) == ["run_phase:0", "timer", "run_phase:0", "run_phase:1",
                                       "finalize_response"]
    assert _timer_waits(run.replay) == [30.0]
    assert activity(episode.actions[-1])[1]["status"] == "completed"


def test_retry_after_is_capped_per_wait_and_bounded_per_phase(handle: Any) -> None:
    """A 3600 s Retry-After is honoured up to the cap; waits stop once the budget would be exceeded and
    the response fails with the phase's own error (the model's message), not a generic one."""
    answers = {0: [{"index": 0, "retry_after": 3600, "error": RATE_LIMITED}]}
    run = Orchestration(handle, {"response_id": RID})
    episode = run.drive(script(2, answers))
    assert episode.is_done and episode.error is None
    waits = int(orch.MODEL_WAIT_BUDGET_SECONDS // orch.MODEL_WAIT_CAP_SECONDS)
    assert waits >= 2 and _timer_waits(run.replay) == [orch.MODEL_WAIT_CAP_SECONDS] * waits
    assert names(episode.actions) == (["run_phase:0", "timer"] * waits
                                       + ["run_phase:0", "finalize_response"])
    assert activity(episode.actions[-1])[1] == {"response_id": RID, "status": "failed", "error": RATE_LIMITED}


def test_a_tiny_retry_after_still_waits_the_minimum(handle: Any) -> None:
    answers = {0: [{"index": 0, "retry_after": 0, "error": RATE_LIMITED}] * 2 + [{"index": 0, "stop": None}]}
    run = Orchestration(handle, {"response_id": RID})
    episode = run.drive(script(1, answers))
    assert names(episode.actions) == ["run_phase:0", "timer", "run_phase:0", "timer",
                                       "run_phase:0", "finalize_response"]
    assert _timer_waits(run.replay) == [orch.MODEL_WAIT_MIN_SECONDS] * 2


def test_a_permanent_agent_error_fails_at_once_with_its_message(handle: Any) -> None:
    denied = {"code": "server_error", "message": "Error code: 401 - Access denied due to invalid key."}
    answers = {1: [{"index": 1, "stop": "failed", "error": denied}]}
    episode = Orchestration(handle, {"response_id": RID}).drive(script(3, answers))
    assert names(episode.actions) == ["run_phase:0", "run_phase:1", "finalize_response"]
    assert activity(episode.actions[-1])[1] == {"response_id": RID, "status": "failed", "error": denied}
