"""History events and orchestrator actions as the Python SDK (azure-functions-durable 1.7) reads and writes them.

Episode input: ``{"history": [...], "instanceId", "isReplaying", "parentInstanceId", "input",
"upperSchemaVersion", ...}`` where ``history`` starts with OrchestratorStarted (12) + ExecutionStarted (0,
with ``Version``); every later episode appends OrchestratorStarted + the new events it consumes, then the
events its actions produced (TaskScheduled 4, TimerCreated 10, EventSent 14, SubOrchestrationInstanceCreated
7) and OrchestratorCompleted (13). Episode output: ``{"isDone", "actions": [[...]], "output",
"customStatus"}`` — all actions so far; the new ones are the tail (:func:`flatten_actions`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

# History event types (azure.durable_functions.models.history.HistoryEventType / DurableTask.Core EventType)
EXECUTION_STARTED = 0
EXECUTION_COMPLETED = 1
EXECUTION_FAILED = 2
EXECUTION_TERMINATED = 3
TASK_SCHEDULED = 4
TASK_COMPLETED = 5
TASK_FAILED = 6
SUB_ORCHESTRATION_CREATED = 7
SUB_ORCHESTRATION_COMPLETED = 8
SUB_ORCHESTRATION_FAILED = 9
TIMER_CREATED = 10
TIMER_FIRED = 11
ORCHESTRATOR_STARTED = 12
ORCHESTRATOR_COMPLETED = 13
EVENT_SENT = 14
EVENT_RAISED = 15
CONTINUE_AS_NEW = 16
GENERIC_EVENT = 17

EVENT_NAMES = {
    EXECUTION_STARTED: "ExecutionStarted", EXECUTION_COMPLETED: "ExecutionCompleted",
    EXECUTION_FAILED: "ExecutionFailed", EXECUTION_TERMINATED: "ExecutionTerminated",
    TASK_SCHEDULED: "TaskScheduled", TASK_COMPLETED: "TaskCompleted",
    TASK_FAILED: "TaskFailed", SUB_ORCHESTRATION_CREATED: "SubOrchestrationInstanceCreated",
    SUB_ORCHESTRATION_COMPLETED: "SubOrchestrationInstanceCompleted",
    SUB_ORCHESTRATION_FAILED: "SubOrchestrationInstanceFailed", TIMER_CREATED: "TimerCreated",
    TIMER_FIRED: "TimerFired", ORCHESTRATOR_STARTED: "OrchestratorStarted",
    ORCHESTRATOR_COMPLETED: "OrchestratorCompleted", EVENT_SENT: "EventSent", EVENT_RAISED: "EventRaised",
    CONTINUE_AS_NEW: "ContinueAsNew", GENERIC_EVENT: "GenericEvent",
}

# Action types (azure.durable_functions.models.actions.ActionType)
CALL_ACTIVITY = 0
CALL_ACTIVITY_WITH_RETRY = 1
CALL_SUB_ORCHESTRATOR = 2
CALL_SUB_ORCHESTRATOR_WITH_RETRY = 3
CONTINUE_AS_NEW_ACTION = 4
CREATE_TIMER = 5
WAIT_FOR_EXTERNAL_EVENT = 6
CALL_ENTITY = 7
CALL_HTTP = 8
SIGNAL_ENTITY = 9
WHEN_ANY = 11
WHEN_ALL = 12

UPPER_SCHEMA_VERSION = 2
OUT_OF_PROC_MARKER = "$OutOfProcData$:"
TERMINAL = frozenset({"Completed", "Failed", "Terminated"})
ACTIVE = frozenset({"Pending", "Running", "ContinuedAsNew", "Suspended"})  # OverridableStates.NonRunningStates


def utcnow() -> datetime:
    return datetime.now(UTC)


def iso(dt: datetime) -> str:
    return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def status_time(dt: datetime) -> str:
    """``DateTime.ToString("s") + "Z"`` as the extension's status payload uses."""
    return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_event(event_type: int, event_id: int = -1, **fields: Any) -> dict[str, Any]:
    return {"EventType": event_type, "EventId": event_id, "IsPlayed": False, "Timestamp": iso(utcnow()), **fields}


def flatten_actions(actions: list[Any]) -> list[dict[str, Any]]:
    """``[[a, b], [c]]`` (schema V1) or ``[[a, {"actionType": 11, "compoundActions": [...]}]]`` → flat list."""
    flat: list[dict[str, Any]] = []

    def walk(item: Any) -> None:
        if isinstance(item, list):
            for child in item:
                walk(child)
        elif isinstance(item, dict) and item.get("actionType") in (WHEN_ANY, WHEN_ALL):
            walk(item.get("compoundActions", []))
        elif isinstance(item, dict):
            flat.append(item)

    walk(actions)
    return flat
