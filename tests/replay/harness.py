"""Orchestration replay harness: builds Durable history JSON and feeds it to the REAL SDK handle.

This plays the Durable extension's side of the out-of-process protocol, as azure-functions-durable's
``TaskOrchestrationExecutor`` (``azure/durable_functions/models/TaskOrchestrationExecutor.py``) reads it:
each episode starts with ``OrchestratorStarted`` followed by the new events, the whole history is handed
to the orchestrator's ``handle(context_json)``, and the returned actions are turned into ``TaskScheduled``
/ ``TimerCreated`` / ``EventSent`` records before the episode closes with ``OrchestratorCompleted``.
Nothing of the SDK is mocked.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from azure.durable_functions.models.actions.ActionType import ActionType
from azure.durable_functions.models.history.HistoryEventType import HistoryEventType as History


def orchestrator_handle(app: Any, name: str) -> Any:
    """The SDK handle of a registered orchestrator, found the way the worker finds it."""
    functions = {f.get_function_name(): f for f in app.get_functions()}
    return functions[name].get_user_function()


def flatten_actions(raw: Any) -> list[dict[str, Any]]:
    """The SDK returns ``[[a, b], [c]]`` (schema v1) or one inner list plus ``schemaVersion``; a
    ``task_any``/``task_all`` arrives as one compound action whose children are the real actions."""
    out: list[dict[str, Any]] = []
    for entry in raw or []:
        if isinstance(entry, list):
            out += flatten_actions(entry)
        elif isinstance(entry, dict) and "compoundActions" in entry:
            out += flatten_actions(entry["compoundActions"])  # task_any / task_all (types 11 / 10)
        elif isinstance(entry, dict):
            out.append(entry)
    return out


@dataclass
class Episode:
    """What one orchestrator invocation returned."""

    actions: list[dict[str, Any]]
    new_actions: list[dict[str, Any]]
    is_done: bool
    output: Any
    custom_status: Any
    error: str | None
    raw: dict[str, Any]


@dataclass
class Replay:
    """A scripted Durable host for one orchestration instance."""

    handle: Any
    input: Any
    instance_id: str = "resp_replay"
    name: str = "responses_orchestrator"
    now: datetime = field(default_factory=lambda: datetime(2026, 1, 1, tzinfo=UTC))
    history: list[dict[str, Any]] = field(default_factory=list)
    _pending: list[dict[str, Any]] = field(default_factory=list)
    _recorded_actions: int = 0
    _sequence: int = 0
    _ids: dict[int, int] = field(default_factory=dict)  # flattened action position -> task id
    _entity_request_ids: dict[int, str] = field(default_factory=dict)
    started: bool = False
    version: str = ""  # what the host stamps on ExecutionStarted (host.json defaultVersion; "" before it)

    # -- history records, as the extension writes them -----------------------------------------
    def _event(self, event_type: int, event_id: int = -1, **fields: Any) -> dict[str, Any]:
        self.now += timedelta(milliseconds=10)
        return {"EventType": event_type, "EventId": event_id, "IsPlayed": False,
                "Timestamp": self.now.isoformat().replace("+00:00", "Z"), **fields}

    def run(self) -> Episode:
        """Run one episode with the events queued since the last one; record the new actions."""
        self.history.append(self._event(History.ORCHESTRATOR_STARTED))
        if not self.started:
            self.history.append(self._event(History.EXECUTION_STARTED, Name=self.name, Version=self.version,
                                            Input=json.dumps(self.input), OrchestrationInstance={}))
            self.started = True
        self.history += self._pending
        self._pending = []
        for event in self.history:
            event["IsPlayed"] = False
        context = {
            "history": self.history,
            "input": json.dumps(self.input),
            "instanceId": self.instance_id,
            "isReplaying": False,
            "parentInstanceId": None,
            "upperSchemaVersion": 1,
        }
        error = None
        try:
            state = json.loads(self.handle(json.dumps(context)))
        except Exception as exc:  # the SDK reports orchestrator exceptions this way
            text = str(exc)
            marker = "$OutOfProcData$:"
            state = json.loads(text.split(marker, 1)[1]) if marker in text else {"actions": []}
            error = text.split(marker, 1)[0]
        actions = flatten_actions(state.get("actions"))
        new = actions[self._recorded_actions:]
        for position, action in enumerate(new, start=self._recorded_actions):
            self._record(position, action)
        self._recorded_actions = len(actions)
        self.history.append(self._event(History.ORCHESTRATOR_COMPLETED))
        return Episode(actions=actions, new_actions=new, is_done=bool(state.get("isDone")),
                       output=state.get("output"), custom_status=state.get("customStatus"),
                       error=error, raw=state)

    def _record(self, position: int, action: dict[str, Any]) -> None:
        kind = action.get("actionType")
        if kind == ActionType.WAIT_FOR_EXTERNAL_EVENT:
            return  # waits take no sequence number and leave no history record
        task_id = self._sequence
        self._sequence += 1
        self._ids[position] = task_id
        if kind == ActionType.CALL_ACTIVITY:
            self.history.append(self._event(History.TASK_SCHEDULED, task_id, Name=action["functionName"],
                                            Input=action.get("input")))
        elif kind == ActionType.CREATE_TIMER:
            self.history.append(self._event(History.TIMER_CREATED, task_id, FireAt=action["fireAt"]))
        elif kind in (ActionType.CALL_ENTITY, ActionType.SIGNAL_ENTITY):
            request_id = str(uuid.uuid4())
            self._entity_request_ids[position] = request_id
            payload = {"op": action.get("operation"), "id": request_id, "input": action.get("input"),
                       "signal": kind == ActionType.SIGNAL_ENTITY}
            self.history.append(self._event(History.EVENT_SENT, task_id, Name="op",
                                            InstanceId=action.get("instanceId"), Input=json.dumps(payload)))

    # -- completions, delivered in the next episode ----------------------------------------------
    def position_of(self, action: dict[str, Any], actions: list[dict[str, Any]]) -> int:
        for i, a in enumerate(actions):
            if a is action:
                return i
        raise KeyError("action not in this episode's list")

    def complete(self, position: int, result: Any) -> None:
        self._pending.append(self._event(History.TASK_COMPLETED, TaskScheduledId=self._ids[position],
                                         Result=json.dumps(result)))

    def fail(self, position: int, reason: str = "boom", details: str = "Traceback ...") -> None:
        self._pending.append(self._event(History.TASK_FAILED, TaskScheduledId=self._ids[position],
                                         Reason=reason, Details=details))

    def fire_timer(self, position: int, fire_at: str) -> None:
        self._pending.append(self._event(History.TIMER_FIRED, TimerId=self._ids[position], FireAt=fire_at))

    def raise_event(self, name: str, payload: Any) -> None:
        self._pending.append(self._event(History.EVENT_RAISED, Name=name, Input=json.dumps(payload)))

    def entity_result(self, position: int, result: Any) -> None:
        """An entity call's answer arrives as an EventRaised named by the request id."""
        response = {"result": json.dumps(result)}
        self._pending.append(self._event(History.EVENT_RAISED, Name=self._entity_request_ids[position],
                                         Input=json.dumps(response)))

    def entity_error(self, position: int, message: str) -> None:
        """An entity operation that threw: the answer carries ``exceptionType`` (the SDK raises it)."""
        response = {"result": json.dumps(message), "exceptionType": "System.Exception"}
        self._pending.append(self._event(History.EVENT_RAISED, Name=self._entity_request_ids[position],
                                         Input=json.dumps(response)))

    def timer_delays(self) -> list[float]:
        """Seconds from each recorded timer's episode start (the orchestration's clock) to its ``FireAt``."""
        delays: list[float] = []
        started = None
        for event in self.history:
            if event["EventType"] == History.ORCHESTRATOR_STARTED:
                started = datetime.fromisoformat(event["Timestamp"].replace("Z", "+00:00"))
            elif event["EventType"] == History.TIMER_CREATED and started is not None:
                fire_at = datetime.fromisoformat(str(event["FireAt"]).replace("Z", "+00:00"))
                if fire_at.tzinfo is None:
                    fire_at = fire_at.replace(tzinfo=UTC)
                delays.append(round((fire_at - started).total_seconds(), 3))
        return delays


def drive(replay: Replay, respond: Any, max_episodes: int = 500) -> Episode:
    """Run episodes, answering every new action with ``respond(kind, action, position)`` until done.

    ``respond`` returns ``("ok", value)``, ``("fail", reason)`` (an activity's TaskFailed, or an entity
    operation that threw), ``("event", (name, payload))`` or ``None`` to leave the action pending.
    """
    episode = replay.run()
    for _ in range(max_episodes):
        if episode.is_done or episode.error:
            return episode
        start = len(episode.actions) - len(episode.new_actions)
        answered = False
        for position, action in enumerate(episode.new_actions, start=start):
            answer = respond(action.get("actionType"), action, position)
            if answer is None:
                continue
            verb, value = answer
            answered = True
            if verb == "ok":
                if action.get("actionType") in (ActionType.CALL_ENTITY,):
                    replay.entity_result(position, value)
                elif action.get("actionType") == ActionType.CREATE_TIMER:
                    replay.fire_timer(position, action["fireAt"])
                else:
                    replay.complete(position, value)
            elif verb == "fail" and action.get("actionType") == ActionType.CALL_ENTITY:
                replay.entity_error(position, str(value))
            elif verb == "fail":
                replay.fail(position, reason=str(value))
            elif verb == "event":
                replay.raise_event(*value)
        if not answered:
            return episode
        episode = replay.run()
    raise AssertionError("orchestration did not finish")
