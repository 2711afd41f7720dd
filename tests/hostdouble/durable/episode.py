"""One orchestration execution: which messages an episode takes, the SDK's input, and what its answer means.

No I/O here: :class:`Execution` turns consumed events plus the worker's answer into new history events,
outbound messages and (maybe) a completion; the runtime does the storage and the invocation. Rules:

* sequence numbers (``EventId``/``TaskScheduledId``/``TimerId``) are allocated like the SDK does: one per
  action except wait-for-external-event, plus the implicit retry timer and re-scheduled attempt of
  ``call_activity_with_retry``/``call_sub_orchestrator_with_retry`` (DTFx's retry interceptor, emulated);
* a completion (TaskCompleted/Failed, TimerFired, SubOrchestration*) whose task is not in the history yet
  is *deferred* (DTFx: an out-of-order message, abandoned and seen again later); one whose task already
  completed is a duplicate and dropped; so are messages for another execution;
* entity calls are EventSent + an ``op`` message to ``@name@key``; the answer is an EventRaised named
  after the request id whose Input is ``{"result": <json>}`` (plus ``exceptionType`` on failure).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from dateutil.parser import isoparse  # type: ignore[import-untyped]

from .history import (
    CALL_ACTIVITY,
    CALL_ACTIVITY_WITH_RETRY,
    CALL_ENTITY,
    CALL_SUB_ORCHESTRATOR,
    CALL_SUB_ORCHESTRATOR_WITH_RETRY,
    CONTINUE_AS_NEW_ACTION,
    CREATE_TIMER,
    EVENT_RAISED,
    EVENT_SENT,
    EXECUTION_COMPLETED,
    EXECUTION_STARTED,
    EXECUTION_TERMINATED,
    GENERIC_EVENT,
    ORCHESTRATOR_COMPLETED,
    ORCHESTRATOR_STARTED,
    OUT_OF_PROC_MARKER,
    SIGNAL_ENTITY,
    SUB_ORCHESTRATION_COMPLETED,
    SUB_ORCHESTRATION_CREATED,
    SUB_ORCHESTRATION_FAILED,
    TASK_COMPLETED,
    TASK_FAILED,
    TASK_SCHEDULED,
    TIMER_CREATED,
    TIMER_FIRED,
    UPPER_SCHEMA_VERSION,
    WAIT_FOR_EXTERNAL_EVENT,
    flatten_actions,
    iso,
    new_event,
    utcnow,
)

ACCEPT, DROP, DEFER = "accept", "drop", "defer"
_COMPLETIONS = {TASK_COMPLETED: TASK_SCHEDULED, TASK_FAILED: TASK_SCHEDULED, TIMER_FIRED: TIMER_CREATED,
                SUB_ORCHESTRATION_COMPLETED: SUB_ORCHESTRATION_CREATED,
                SUB_ORCHESTRATION_FAILED: SUB_ORCHESTRATION_CREATED}


def completion_id(event: dict[str, Any]) -> int | None:
    kind = event["EventType"]
    if kind == TIMER_FIRED:
        return int(event["TimerId"])
    if kind in _COMPLETIONS:
        return int(event["TaskScheduledId"])
    return None


@dataclass
class Outbound:
    """A message an episode sends once its history is committed."""

    kind: str  # "activity" | "instance"
    instance_id: str  # the target instance (for an activity: the orchestration it reports to)
    event: dict[str, Any]
    execution_id: str | None = None
    delay_s: float = 0.0  # a timer: visible only at its fire time


@dataclass
class Completion:
    status: str  # Completed | Failed | ContinuedAsNew | Terminated
    output: Any  # JSON value for Completed; text for Failed/Terminated; the new input for ContinuedAsNew
    details: str | None = None


@dataclass
class EpisodeResult:
    produced: list[dict[str, Any]] = field(default_factory=list)
    outbound: list[Outbound] = field(default_factory=list)
    completion: Completion | None = None
    custom_status: Any = None
    unsupported: str | None = None


def fresh_state() -> dict[str, Any]:
    return {"seqs": [], "next": 0, "retry_attempt": {}, "retry_timer": {}, "cancelled": [], "rewound": []}


class Execution:
    """The current execution of one orchestration instance, as committed (plus the episode being built)."""

    def __init__(self, instance_id: str, execution_id: str, events: list[dict[str, Any]],
                 state: dict[str, Any], started: dict[str, Any] | None = None) -> None:
        """``started``: the ExecutionStarted of a new execution whose first episode is being built."""
        self.instance_id = instance_id
        self.execution_id = execution_id
        self.events = events
        self.state = state or fresh_state()
        found = started or next((e for e in events if e["EventType"] == EXECUTION_STARTED), None)
        self.started: dict[str, Any] = found or {}

    # ------------------------------------------------------------------------------------------ reading
    @property
    def name(self) -> str:
        return str(self.started.get("Name", ""))

    @property
    def parent(self) -> dict[str, Any] | None:
        parent = self.started.get("ParentInstance")
        return parent if isinstance(parent, dict) else None

    @property
    def status(self) -> str:
        for event in reversed(self.events):
            if event["EventType"] == EXECUTION_COMPLETED:
                return str(event.get("OrchestrationStatus", "Completed"))
            if event["EventType"] == EXECUTION_TERMINATED:
                return "Terminated"
        return "Running" if self.started else "Pending"

    @property
    def active(self) -> bool:
        return self.status == "Running"

    def _has(self, event_type: int, event_id: int, pending: list[dict[str, Any]]) -> bool:
        return any(e["EventType"] == event_type and int(e.get("EventId", -1)) == event_id
                   for e in (*self.events, *pending))

    def _completed(self, event: dict[str, Any], pending: list[dict[str, Any]]) -> bool:
        family, target = _COMPLETIONS[event["EventType"]], completion_id(event)
        return any(e["EventType"] in _COMPLETIONS and _COMPLETIONS[e["EventType"]] == family
                   and completion_id(e) == target for e in (*self.events, *pending))

    def classify(self, event: dict[str, Any], execution_id: str | None,
                 pending: list[dict[str, Any]] | None = None) -> str:
        """What to do with one consumed message in the current (active) execution.

        ``pending``: events already accepted into the episode being built (and their produced events).
        """
        pending = pending or []
        if execution_id is not None and execution_id != self.execution_id:
            return DROP  # for an earlier (or later) execution of this instance
        kind = event["EventType"]
        if kind in _COMPLETIONS:
            target = completion_id(event)
            assert target is not None
            if kind == TIMER_FIRED and target in self.state["cancelled"]:
                return DROP
            if self._completed(event, pending):
                return DROP
            if not self._has(_COMPLETIONS[kind], target, pending):
                return DEFER
        return ACCEPT

    # ------------------------------------------------------------------------------------------ episode
    def _alloc(self) -> int:
        seq = int(self.state["next"])
        self.state["next"] = seq + 1
        return seq

    def context(self, new_events: list[dict[str, Any]]) -> dict[str, Any]:
        """The SDK's episode input: past events marked played, then the new ones."""
        past = [dict(e, IsPlayed=True) for e in self.events]
        parent = self.parent
        return {
            "history": past + new_events,
            "instanceId": self.instance_id,
            "isReplaying": False,
            "parentInstanceId": parent.get("InstanceId") if parent else None,
            "input": self.started.get("Input"),
            "upperSchemaVersion": UPPER_SCHEMA_VERSION,
            "upperSchemaVersionNew": UPPER_SCHEMA_VERSION,
            "maximumShortTimerDuration": "6.00:00:00",
            "longRunningTimerIntervalDuration": "3.00:00:00",
        }

    def retry_bookkeeping(self, event: dict[str, Any], result: EpisodeResult) -> None:
        """DTFx's retry interceptor for one consumed event, before user code resumes (see module doc)."""
        kind = event["EventType"]
        attempts: dict[str, Any] = self.state["retry_attempt"]
        timers: dict[str, Any] = self.state["retry_timer"]
        if kind in (TASK_COMPLETED, SUB_ORCHESTRATION_COMPLETED):
            attempts.pop(str(event.get("TaskScheduledId")), None)
        elif kind in (TASK_FAILED, SUB_ORCHESTRATION_FAILED):
            retry = attempts.pop(str(event.get("TaskScheduledId")), None)
            if retry is not None:
                timer_seq = self._alloc()
                fire_at = utcnow() + timedelta(milliseconds=int(retry["interval_ms"]))
                timers[str(timer_seq)] = retry
                result.produced.append(new_event(TIMER_CREATED, timer_seq, FireAt=iso(fire_at)))
                result.outbound.append(self._timer(timer_seq, fire_at, iso(fire_at)))
        elif kind == TIMER_FIRED:
            retry = timers.pop(str(event.get("TimerId")), None)
            if retry is not None and int(retry["attempts"]) < int(retry["max_attempts"]):
                retry["attempts"] = int(retry["attempts"]) + 1
                seq = self._alloc()
                attempts[str(seq)] = retry
                if retry["kind"] == "activity":
                    result.produced.append(new_event(TASK_SCHEDULED, seq, Name=retry["name"], Input=retry["input"]))
                    result.outbound.append(self._activity(seq, retry["name"], retry["input"]))
                else:
                    sub_id = f"{retry.get('sub_instance_id') or self.instance_id}:{seq}"
                    result.produced.append(new_event(SUB_ORCHESTRATION_CREATED, seq, Name=retry["name"],
                                                     InstanceId=sub_id, Input=retry["input"]))
                    result.outbound.append(self._start_child(seq, retry["name"], sub_id, retry["input"]))

    def apply_answer(self, answer: dict[str, Any], result: EpisodeResult) -> None:
        """The worker's answer (``{"ok": true, "result": <state>}`` or an orchestrator failure)."""
        error: str | None = None
        if answer.get("ok"):
            raw = answer["result"]
            state: dict[str, Any] = json.loads(raw) if isinstance(raw, str) else raw
        else:
            message = str(answer.get("error", "unknown error"))
            error, _, state_json = message.partition(OUT_OF_PROC_MARKER)
            try:
                state = json.loads(state_json) if state_json else {}
            except json.JSONDecodeError:
                state = {}
            error = state.get("error") or error.strip() or "orchestrator failed"
        result.custom_status = state.get("customStatus")
        actions = flatten_actions(state.get("actions", []))
        seqs: list[int | None] = self.state["seqs"]
        for action, seq in zip(actions, seqs, strict=False):
            if seq is not None and action.get("actionType") == CREATE_TIMER and action.get("isCanceled") \
                    and seq not in self.state["cancelled"]:
                self.state["cancelled"].append(seq)
        for action, seq in zip(actions, seqs, strict=False):  # tasks a rewind un-scheduled: schedule again
            if seq is not None and seq in self.state["rewound"]:
                self.state["rewound"].remove(seq)
                result.unsupported = result.unsupported or self._schedule(seq, action, result)
        continue_as_new: dict[str, Any] | None = None
        if error is None:
            error = self._replayed_differently(actions, seqs)
        if error is None:
            for action in actions[len(seqs):]:
                kind = action.get("actionType")
                if kind == WAIT_FOR_EXTERNAL_EVENT:
                    seqs.append(None)
                    continue
                seq = self._alloc()
                seqs.append(seq)
                if kind == CONTINUE_AS_NEW_ACTION:
                    continue_as_new = action
                    continue
                problem = self._schedule(seq, action, result)
                if problem:
                    error = problem
                    break
        if error is not None:
            result.completion = Completion("Failed", f"Orchestrator function '{self.name}' failed: {error}")
        elif state.get("isDone"):
            if continue_as_new is not None:
                result.completion = Completion("ContinuedAsNew", continue_as_new.get("input"))
            else:
                result.completion = Completion("Completed", state.get("output"))

    def _replayed_differently(self, actions: list[dict[str, Any]], seqs: list[int | None]) -> str | None:
        """DTFx's non-determinism check (``TaskOrchestrationContext.HandleTaskScheduledEvent``): an activity
        the history scheduled at a sequence number must be replayed as an activity of the same name (case
        insensitive). It trips when the orchestrator's code changed under a running instance; the
        orchestration then fails for good, as on the real host."""
        scheduled = {int(e["EventId"]): str(e.get("Name", "")) for e in self.events
                     if e["EventType"] == TASK_SCHEDULED}
        for action, seq in zip(actions, seqs, strict=False):
            if seq is None or seq not in scheduled:
                continue
            name = scheduled[seq]
            if action.get("actionType") not in (CALL_ACTIVITY, CALL_ACTIVITY_WITH_RETRY):
                return (f"Non-Deterministic workflow detected: A previous execution of this orchestration scheduled an "
                        f"activity task with sequence number {seq} named '{name}', but the current orchestration "
                        f"replay instead produced another action with this sequence number. Was a change made to "
                        f"the orchestrator code after this instance had already started running?")
            replayed = str(action.get("functionName", ""))
            if replayed.lower() != name.lower():
                return (f"Non-Deterministic workflow detected: A previous execution of this orchestration scheduled an "
                        f"activity task with sequence number {seq} named '{name}', but the current orchestration "
                        f"replay instead scheduled one named '{replayed}'. Was a change made to the orchestrator code "
                        f"after this instance had already started running?")
        return None

    def _activity(self, seq: int, name: str, input_: Any) -> Outbound:
        event = new_event(TASK_SCHEDULED, seq, Name=name, Input=input_)
        return Outbound("activity", self.instance_id, event, self.execution_id)

    def _timer(self, seq: int, fire_at: datetime, fire_at_text: str) -> Outbound:
        delay = (fire_at - utcnow()).total_seconds()
        return Outbound("instance", self.instance_id, new_event(TIMER_FIRED, TimerId=seq, FireAt=fire_at_text),
                        self.execution_id, delay_s=max(0.0, delay))

    def _start_child(self, seq: int, name: str, child_id: str, input_: Any) -> Outbound:
        child_execution = uuid.uuid4().hex
        parent = {"InstanceId": self.instance_id, "ExecutionId": self.execution_id, "TaskScheduledId": seq,
                  "Name": self.name}
        event = new_event(EXECUTION_STARTED, Name=name, Version="", Input=input_, ParentInstance=parent,
                          OrchestrationInstance={"InstanceId": child_id, "ExecutionId": child_execution})
        return Outbound("instance", child_id, event, child_execution)

    def _schedule(self, seq: int, action: dict[str, Any], result: EpisodeResult) -> str | None:
        """History event + outbound message for one new action; returns an error text if unsupported."""
        kind = action.get("actionType")
        produced = result.produced
        if kind in (CALL_ACTIVITY, CALL_ACTIVITY_WITH_RETRY):
            name, input_ = action["functionName"], action.get("input")
            produced.append(new_event(TASK_SCHEDULED, seq, Name=name, Input=input_))
            if kind == CALL_ACTIVITY_WITH_RETRY:
                options = action.get("retryOptions") or {}
                self.state["retry_attempt"][str(seq)] = {
                    "kind": "activity", "name": name, "input": input_, "attempts": 1,
                    "max_attempts": int(options.get("maxNumberOfAttempts", 1)),
                    "interval_ms": int(options.get("firstRetryIntervalInMilliseconds", 1000))}
            result.outbound.append(self._activity(seq, name, input_))
        elif kind == CREATE_TIMER:
            fire_at = isoparse(action["fireAt"])
            if fire_at.tzinfo is None:
                fire_at = fire_at.replace(tzinfo=UTC)
            produced.append(new_event(TIMER_CREATED, seq, FireAt=action["fireAt"]))
            if action.get("isCanceled"):
                self.state["cancelled"].append(seq)
            else:
                result.outbound.append(self._timer(seq, fire_at, action["fireAt"]))
        elif kind in (CALL_ENTITY, SIGNAL_ENTITY):
            scheduler_id = action["instanceId"]  # "@name@key"
            is_signal = kind == SIGNAL_ENTITY
            request = {"id": str(uuid.uuid4()), "op": action.get("operation", ""), "signal": is_signal,
                       "input": json.dumps(action.get("input")),
                       "parent": None if is_signal else self.instance_id,
                       "parentExecution": None if is_signal else self.execution_id}
            produced.append(new_event(EVENT_SENT, seq, InstanceId=scheduler_id, Name="op",
                                      Input=json.dumps({k: v for k, v in request.items() if k != "input"}
                                                       | {"input": action.get("input")})))
            result.outbound.append(Outbound("instance", scheduler_id,
                                            new_event(EVENT_RAISED, Name="op", Input=json.dumps(request))))
        elif kind in (CALL_SUB_ORCHESTRATOR, CALL_SUB_ORCHESTRATOR_WITH_RETRY):
            name, input_ = action["functionName"], action.get("input")
            child_id = action.get("instanceId") or f"{self.instance_id}:{seq}"
            produced.append(new_event(SUB_ORCHESTRATION_CREATED, seq, Name=name, InstanceId=child_id, Input=input_))
            if kind == CALL_SUB_ORCHESTRATOR_WITH_RETRY:
                options = action.get("retryOptions") or {}
                self.state["retry_attempt"][str(seq)] = {
                    "kind": "suborchestration", "name": name, "input": input_, "attempts": 1,
                    "max_attempts": int(options.get("maxNumberOfAttempts", 1)),
                    "interval_ms": int(options.get("firstRetryIntervalInMilliseconds", 1000)),
                    "sub_instance_id": child_id}
            result.outbound.append(self._start_child(seq, name, child_id, input_))
        else:
            return f"action type {kind} is not supported by the host double: {json.dumps(action)[:200]}"
        return None

    def completion_events(self, completion: Completion) -> tuple[list[dict[str, Any]], list[Outbound]]:
        """History events and messages that end this execution (parent notified; continue-as-new started)."""
        events: list[dict[str, Any]] = []
        outbound: list[Outbound] = []
        if completion.status == "Terminated":
            events.append(new_event(EXECUTION_TERMINATED, Input=completion.output))
        else:
            result = completion.output if completion.status in ("Failed",) else json.dumps(completion.output)
            events.append(new_event(EXECUTION_COMPLETED, OrchestrationStatus=completion.status, Result=result,
                                    Details=completion.details))
        if completion.status == "ContinuedAsNew":
            new_execution = uuid.uuid4().hex
            started = new_event(EXECUTION_STARTED, Name=self.name, Version=self.started.get("Version", ""),
                                Input=completion.output, ParentInstance=self.parent,
                                OrchestrationInstance={"InstanceId": self.instance_id, "ExecutionId": new_execution},
                                ContinuedFrom=self.execution_id)
            outbound.append(Outbound("instance", self.instance_id, started, new_execution))
            return events, outbound
        parent = self.parent
        if parent:
            seq = int(parent["TaskScheduledId"])
            if completion.status == "Completed":
                notice = new_event(SUB_ORCHESTRATION_COMPLETED, TaskScheduledId=seq,
                                   Result=json.dumps(completion.output))
            else:
                notice = new_event(SUB_ORCHESTRATION_FAILED, TaskScheduledId=seq, Reason=str(completion.output),
                                   Details=completion.details)
            outbound.append(Outbound("instance", str(parent["InstanceId"]), notice, parent.get("ExecutionId")))
        return events, outbound


def episode_frame(new_events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OrchestratorStarted + the consumed events, as the episode presents them."""
    return [new_event(ORCHESTRATOR_STARTED), *new_events]


def episode_end() -> dict[str, Any]:
    return new_event(ORCHESTRATOR_COMPLETED)


def rewind_event(event: dict[str, Any]) -> dict[str, Any]:
    """``RewindHistoryAsync``: a failure (and the TaskScheduled it answers) becomes a GenericEvent."""
    return {"EventType": GENERIC_EVENT, "EventId": event.get("EventId", -1), "IsPlayed": False,
            "Timestamp": event.get("Timestamp"), "Data": f"Rewound: {event.get('EventType')}"}
