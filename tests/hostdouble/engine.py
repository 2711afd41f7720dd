"""The Durable Functions part of the host double: orchestration instances, history, actions, entities.

State lives in this (host) process's memory only: if the host process dies, every instance and entity is
lost. The worker process may die at any time: episodes are re-run, in-flight activities re-delivered, entity
batches re-run (their state is only committed once the worker answers).

Wire formats follow the Python SDK (azure-functions-durable 1.7):

* episode input: ``{"history": [...], "instanceId", "isReplaying", "parentInstanceId", "input",
  "upperSchemaVersion", ...}`` where ``history`` starts with OrchestratorStarted (12) + ExecutionStarted (0,
  with ``Version``); every later episode appends OrchestratorStarted + exactly one new event; the events the
  actions produced (TaskScheduled 4, TimerCreated 10, EventSent 14, SubOrchestrationInstanceCreated 7) and
  OrchestratorCompleted (13) close each episode;
* episode output: ``{"isDone", "actions": [[...]], "output", "customStatus", "schemaVersion"}`` — all
  actions so far, flattened here (WhenAny/WhenAll compound actions included); the new ones are the tail;
* sequence numbers (``EventId``/``TaskScheduledId``/``TimerId``) are allocated like the SDK does: one per
  action except wait-for-external-event (6), plus the implicit retry timer and re-scheduled attempt of
  ``call_activity_with_retry``/``call_sub_orchestrator_with_retry`` (DTFx's retry interceptor, emulated);
* entity batches: ``{"self": {"name", "key"}, "exists", "state", "batch": [{"name", "input"}]}``, operation
  inputs JSON-encoded twice; a call's answer is an EventRaised named after the request id whose Input is
  ``{"result": <json>}`` (plus ``exceptionType`` on failure).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from dateutil.parser import isoparse

# History event types (azure.durable_functions.models.history.HistoryEventType)
EXECUTION_STARTED = 0
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

# Action types (azure.durable_functions.models.actions.ActionType)
CALL_ACTIVITY = 0
CALL_ACTIVITY_WITH_RETRY = 1
CALL_SUB_ORCHESTRATOR = 2
CALL_SUB_ORCHESTRATOR_WITH_RETRY = 3
CONTINUE_AS_NEW = 4
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


def utcnow() -> datetime:
    return datetime.now(UTC)


def iso(dt: datetime) -> str:
    return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def status_time(dt: datetime) -> str:
    """``DateTime.ToString("s") + "Z"`` as the extension's status payload uses."""
    return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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


def _event(event_type: int, event_id: int = -1, **fields: Any) -> dict[str, Any]:
    return {"EventType": event_type, "EventId": event_id, "IsPlayed": False, "Timestamp": iso(utcnow()), **fields}


@dataclass
class RetryState:
    """An activity/sub-orchestration called ``..._with_retry``: DTFx's retry interceptor, emulated."""

    kind: str  # "activity" | "suborchestration"
    name: str
    input: str | None
    max_attempts: int
    interval_ms: int
    attempts: int = 1
    sub_instance_id: str | None = None


@dataclass
class Instance:
    instance_id: str
    name: str
    input: Any  # the start request body parsed once: for the Python client, the input's JSON text
    version: str
    parent: tuple[str, str, int] | None = None  # (parent instance id, parent execution id, task seq)
    status: str = "Pending"
    output: Any = None
    custom_status: Any = None
    created: datetime = field(default_factory=utcnow)
    updated: datetime = field(default_factory=utcnow)
    history: list[dict[str, Any]] = field(default_factory=list)
    inbox: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (source, event)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    execution_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    action_seqs: list[int | None] = field(default_factory=list)  # seq of each action seen (None: wait event)
    next_seq: int = 0
    timers: dict[int, asyncio.Task[Any]] = field(default_factory=dict)
    retry_by_attempt: dict[int, RetryState] = field(default_factory=dict)
    retry_by_timer: dict[int, RetryState] = field(default_factory=dict)
    runner: asyncio.Task[Any] | None = None
    episodes: int = 0

    def payload(self, show_input: bool = True, show_history: bool = False) -> dict[str, Any]:
        body: dict[str, Any] = {
            "name": self.name,
            "instanceId": self.instance_id,
            "runtimeStatus": self.status,
            "input": self.input if show_input else None,
            "customStatus": self.custom_status,
            "output": self.output,
            "createdTime": status_time(self.created),
            "lastUpdatedTime": status_time(self.updated),
        }
        if show_history:
            body["historyEvents"] = self.history
        return body


@dataclass
class EntityRecord:
    name: str  # lower case, as EntityId scheduler ids are
    key: str
    exists: bool = False
    state: str | None = None
    queue: list[dict[str, Any]] = field(default_factory=list)
    worker: asyncio.Task[Any] | None = None
    batches: int = 0


class InstanceConflict(Exception):
    """``start`` on an instance id that is still Pending/Running."""


class UnknownFunction(Exception):
    """No orchestrator function of that name."""


class DurableEngine:
    """Runs orchestrations and entities against the worker through ``host`` (see :class:`HostCalls`)."""

    def __init__(self, host: Any, log: Any) -> None:
        self.host = host
        self.log = log
        self.instances: dict[str, Instance] = {}
        self.entities: dict[tuple[str, str], EntityRecord] = {}
        self.activity_deliveries: Counter[str] = Counter()
        self.activity_redeliveries: Counter[str] = Counter()
        self.activity_completions: Counter[str] = Counter()
        self.episode_reruns = 0
        self.entity_batch_reruns = 0
        self.in_flight: dict[str, dict[str, Any]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    # ---------------------------------------------------------------------------------------------- helpers
    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for inst in self.instances.values():
            for timer in inst.timers.values():
                timer.cancel()
            if inst.runner is not None:
                inst.runner.cancel()

    def stats(self) -> dict[str, Any]:
        counts = Counter(i.status for i in self.instances.values())
        return {
            "activity_deliveries": dict(self.activity_deliveries),
            "activity_redeliveries": dict(self.activity_redeliveries),
            "activity_completions": dict(self.activity_completions),
            "redeliveries": sum(self.activity_redeliveries.values()),
            "episodes": sum(i.episodes for i in self.instances.values()),
            "episode_reruns": self.episode_reruns,
            "entity_batches": sum(e.batches for e in self.entities.values()),
            "entity_batch_reruns": self.entity_batch_reruns,
            "in_flight_activities": list(self.in_flight.values()),
            "instances": dict(counts),
        }

    # ----------------------------------------------------------------------------------------- client API
    def start(self, name: str, instance_id: str | None, input_: Any, version: str = "",
              parent: tuple[str, str, int] | None = None) -> Instance:
        if self.host.orchestrator_function(name) is None:
            raise UnknownFunction(
                f"The function '{name}' doesn't exist, is disabled, or is not an orchestrator function. "
                "Additional info: No orchestrator functions are currently registered!")
        instance_id = instance_id or uuid.uuid4().hex
        existing = self.instances.get(instance_id)
        if existing is not None and existing.status not in TERMINAL:
            raise InstanceConflict(
                f"An Orchestration instance with the status {existing.status} already exists.")
        if existing is not None:
            self._retire(existing)
        inst = Instance(instance_id, name, input_, version, parent)
        self.instances[instance_id] = inst
        inst.inbox.append(("system", _event(EXECUTION_STARTED, Name=name, Version=version, Input=input_,
                                            OrchestrationInstance={"InstanceId": instance_id,
                                                                   "ExecutionId": inst.execution_id})))
        inst.runner = self._spawn(self._run(inst))
        inst.wake.set()
        return inst

    def raise_event(self, inst: Instance, name: str, data: Any) -> None:
        """``data`` is the request body parsed once (a JToken on the real host) or ``None``."""
        event = _event(EVENT_RAISED, Name=name, Input=None if data is None else json.dumps(data))
        self._deliver(inst.instance_id, None, event, source="external")

    def terminate(self, inst: Instance, reason: str | None) -> None:
        inst.status = "Terminated"
        inst.output = reason
        inst.updated = utcnow()
        self._retire(inst, keep=True)
        self._notify_parent(inst)

    def purge(self, instance_id: str) -> bool:
        inst = self.instances.pop(instance_id, None)
        if inst is None:
            return False
        self._retire(inst)
        return True

    def signal_entity(self, name: str, key: str, operation: str, input_: str | None,
                      reply: tuple[str, str, str] | None = None) -> None:
        """``input_`` is the operation input as the SDK wants it in the batch (a JSON string of JSON)."""
        record = self.entities.get((name.lower(), key))
        if record is None:
            record = self.entities[(name.lower(), key)] = EntityRecord(name.lower(), key)
        record.queue.append({"name": operation, "input": "null" if input_ is None else input_, "reply": reply})
        if record.worker is None or record.worker.done():
            record.worker = self._spawn(self._entity_loop(record))

    def read_entity(self, name: str, key: str) -> EntityRecord | None:
        record = self.entities.get((name.lower(), key))
        if record is None or not record.exists:
            return None
        return record

    # ---------------------------------------------------------------------------------------------- internals
    def _retire(self, inst: Instance, keep: bool = False) -> None:
        for timer in inst.timers.values():
            timer.cancel()
        inst.timers.clear()
        inst.inbox.clear()
        inst.retry_by_attempt.clear()
        inst.retry_by_timer.clear()
        if not keep:
            inst.status = "Terminated" if inst.status not in TERMINAL else inst.status
        inst.wake.set()

    def _deliver(self, instance_id: str, execution_id: str | None, event: dict[str, Any],
                 source: str = "task") -> None:
        inst = self.instances.get(instance_id)
        if inst is None or inst.status in TERMINAL:
            return
        if execution_id is not None and execution_id != inst.execution_id:
            return
        inst.inbox.append((source, event))
        inst.wake.set()

    async def _run(self, inst: Instance) -> None:
        """One instance's episodes, strictly one after the other, one new event per episode."""
        while inst.status not in TERMINAL:
            if not inst.inbox:
                inst.wake.clear()
                await inst.wake.wait()
                continue
            _source, event = inst.inbox.pop(0)
            try:
                await self._episode(inst, event)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a bug in the double must not hang the instance silently
                self.log(f"instance {inst.instance_id}: episode crashed in the host double: {exc!r}")
                self._complete(inst, "Failed", f"host double error: {exc!r}")

    def _alloc(self, inst: Instance) -> int:
        seq = inst.next_seq
        inst.next_seq += 1
        return seq

    async def _episode(self, inst: Instance, event: dict[str, Any]) -> None:
        inst.status = "Running"
        inst.episodes += 1
        started = _event(ORCHESTRATOR_STARTED)
        new_events = [started, event]
        produced: list[dict[str, Any]] = []  # history events produced by this episode's decisions
        post: list[Any] = []  # work to start once the episode is committed
        self._retry_bookkeeping(inst, event, produced, post)
        past = [dict(e, IsPlayed=True) for e in inst.history]
        context = {
            "history": past + new_events,
            "instanceId": inst.instance_id,
            "isReplaying": False,
            "parentInstanceId": inst.parent[0] if inst.parent else None,
            "input": inst.input,
            "upperSchemaVersion": UPPER_SCHEMA_VERSION,
            "upperSchemaVersionNew": UPPER_SCHEMA_VERSION,
            "maximumShortTimerDuration": "6.00:00:00",
            "longRunningTimerIntervalDuration": "3.00:00:00",
        }
        execution_id = inst.execution_id
        answer = await self.host.run_orchestrator(inst.name, json.dumps(context))
        if inst.execution_id != execution_id or inst.status in TERMINAL:
            return  # terminated/replaced while the worker was busy
        inst.history.extend(new_events)
        state: dict[str, Any]
        error: str | None = None
        if answer.get("ok"):
            result = answer["result"]
            state = json.loads(result) if isinstance(result, str) else result
        else:
            message = str(answer.get("error", "unknown error"))
            error, _, state_json = message.partition(OUT_OF_PROC_MARKER)
            error = error.strip()
            try:
                state = json.loads(state_json) if state_json else {}
            except json.JSONDecodeError:
                state = {}
            error = state.get("error") or error or "orchestrator failed"
        inst.custom_status = state.get("customStatus")
        actions = flatten_actions(state.get("actions", []))
        self._cancel_timers(inst, actions)
        new_actions = actions[len(inst.action_seqs):]
        continue_as_new: dict[str, Any] | None = None
        if error is None:
            for action in new_actions:
                kind = action.get("actionType")
                if kind == WAIT_FOR_EXTERNAL_EVENT:
                    inst.action_seqs.append(None)
                    continue
                seq = self._alloc(inst)
                inst.action_seqs.append(seq)
                if kind == CONTINUE_AS_NEW:
                    continue_as_new = action
                    continue
                unsupported = self._schedule(inst, seq, action, produced, post)
                if unsupported:
                    error = unsupported
                    break
        inst.history.extend(produced)
        inst.history.append(_event(ORCHESTRATOR_COMPLETED))
        inst.updated = utcnow()
        if error is not None:
            self._complete(inst, "Failed", f"Orchestrator function '{inst.name}' failed: {error}")
            return
        for start in post:
            start()
        if state.get("isDone"):
            if continue_as_new is not None:
                self._continue_as_new(inst, continue_as_new.get("input"))
            else:
                self._complete(inst, "Completed", state.get("output"))

    def _complete(self, inst: Instance, status: str, output: Any) -> None:
        inst.status = status
        inst.output = output
        inst.updated = utcnow()
        for timer in inst.timers.values():
            timer.cancel()
        inst.timers.clear()
        self._notify_parent(inst)
        self.log(f"instance {inst.instance_id} ({inst.name}) {status}")

    def _notify_parent(self, inst: Instance) -> None:
        if inst.parent is None:
            return
        parent_id, parent_exec, seq = inst.parent
        if inst.status == "Completed":
            event = _event(SUB_ORCHESTRATION_COMPLETED, TaskScheduledId=seq, Result=json.dumps(inst.output))
        else:
            event = _event(SUB_ORCHESTRATION_FAILED, TaskScheduledId=seq, Reason=str(inst.output), Details=None)
        self._deliver(parent_id, parent_exec, event)

    def _continue_as_new(self, inst: Instance, new_input: Any) -> None:
        for timer in inst.timers.values():
            timer.cancel()
        kept = [(s, e) for s, e in inst.inbox if s == "external"]
        inst.timers.clear()
        inst.retry_by_attempt.clear()
        inst.retry_by_timer.clear()
        inst.history = []
        inst.action_seqs = []
        inst.next_seq = 0
        inst.execution_id = uuid.uuid4().hex
        inst.input = new_input
        inst.custom_status = None
        inst.inbox = [("system", _event(EXECUTION_STARTED, Name=inst.name, Version=inst.version,
                                        Input=new_input)), *kept]
        inst.wake.set()

    def _cancel_timers(self, inst: Instance, actions: list[dict[str, Any]]) -> None:
        """A timer the orchestrator cancelled (``isCanceled`` on its old action) never fires."""
        for action, seq in zip(actions, inst.action_seqs, strict=False):
            if seq is not None and action.get("actionType") == CREATE_TIMER and action.get("isCanceled"):
                timer = inst.timers.pop(seq, None)
                if timer is not None:
                    timer.cancel()

    def _retry_bookkeeping(self, inst: Instance, event: dict[str, Any], produced: list[dict[str, Any]],
                           post: list[Any]) -> None:
        """Emulate DTFx's retry interceptor for the one event this episode consumes.

        The SDK allocates, while processing the event and before user code resumes: on a failed attempt a
        retry timer; when that timer fires and attempts remain, the re-scheduled attempt.
        """
        kind = event["EventType"]
        if kind in (TASK_COMPLETED, SUB_ORCHESTRATION_COMPLETED):
            inst.retry_by_attempt.pop(event.get("TaskScheduledId"), None)  # type: ignore[arg-type]
        elif kind in (TASK_FAILED, SUB_ORCHESTRATION_FAILED):
            retry = inst.retry_by_attempt.pop(event.get("TaskScheduledId"), None)  # type: ignore[arg-type]
            if retry is not None:
                timer_seq = self._alloc(inst)
                fire_at = utcnow() + timedelta(milliseconds=retry.interval_ms)
                inst.retry_by_timer[timer_seq] = retry
                produced.append(_event(TIMER_CREATED, timer_seq, FireAt=iso(fire_at)))
                post.append(lambda: self._start_timer(inst, timer_seq, fire_at))
        elif kind == TIMER_FIRED:
            retry = inst.retry_by_timer.pop(event.get("TimerId"), None)  # type: ignore[arg-type]
            if retry is not None and retry.attempts < retry.max_attempts:
                retry.attempts += 1
                seq = self._alloc(inst)
                inst.retry_by_attempt[seq] = retry
                if retry.kind == "activity":
                    produced.append(_event(TASK_SCHEDULED, seq, Name=retry.name, Input=retry.input))
                    post.append(lambda: self._start_activity(inst, seq, retry.name, retry.input))
                else:
                    sub_id = f"{retry.sub_instance_id or inst.instance_id}:{seq}"
                    produced.append(_event(SUB_ORCHESTRATION_CREATED, seq, Name=retry.name,
                                           InstanceId=sub_id, Input=retry.input))
                    post.append(lambda: self._start_sub(inst, seq, retry.name, sub_id, retry.input))

    def _schedule(self, inst: Instance, seq: int, action: dict[str, Any], produced: list[dict[str, Any]],
                  post: list[Any]) -> str | None:
        """Record the history event for one new action and queue its start; returns an error if unsupported."""
        kind = action.get("actionType")
        if kind in (CALL_ACTIVITY, CALL_ACTIVITY_WITH_RETRY):
            name, input_ = action["functionName"], action.get("input")
            produced.append(_event(TASK_SCHEDULED, seq, Name=name, Input=input_))
            if kind == CALL_ACTIVITY_WITH_RETRY:
                options = action.get("retryOptions") or {}
                inst.retry_by_attempt[seq] = RetryState(
                    "activity", name, input_, int(options.get("maxNumberOfAttempts", 1)),
                    int(options.get("firstRetryIntervalInMilliseconds", 1000)))
            post.append(lambda: self._start_activity(inst, seq, name, input_))
        elif kind == CREATE_TIMER:
            fire_at = isoparse(action["fireAt"])
            if fire_at.tzinfo is None:
                fire_at = fire_at.replace(tzinfo=UTC)
            produced.append(_event(TIMER_CREATED, seq, FireAt=action["fireAt"]))
            if not action.get("isCanceled"):
                post.append(lambda: self._start_timer(inst, seq, fire_at, action["fireAt"]))
        elif kind in (CALL_ENTITY, SIGNAL_ENTITY):
            scheduler_id = action["instanceId"]  # "@name@key"
            _, name, key = scheduler_id.split("@", 2)
            request_id = str(uuid.uuid4())
            is_signal = kind == SIGNAL_ENTITY
            message = {"id": request_id, "op": action.get("operation"), "signal": is_signal,
                       "input": action.get("input"), "parent": None if is_signal else inst.instance_id,
                       "parentExecution": None if is_signal else inst.execution_id}
            produced.append(_event(EVENT_SENT, seq, InstanceId=scheduler_id, Name="op",
                                   Input=json.dumps(message)))
            reply = None if is_signal else (inst.instance_id, inst.execution_id, request_id)
            batch_input = json.dumps(action.get("input"))
            post.append(lambda: self.signal_entity(name, key, action.get("operation", ""), batch_input, reply))
        elif kind in (CALL_SUB_ORCHESTRATOR, CALL_SUB_ORCHESTRATOR_WITH_RETRY):
            name, input_ = action["functionName"], action.get("input")
            sub_id = action.get("instanceId") or f"{inst.instance_id}:{seq}"
            produced.append(_event(SUB_ORCHESTRATION_CREATED, seq, Name=name, InstanceId=sub_id, Input=input_))
            if kind == CALL_SUB_ORCHESTRATOR_WITH_RETRY:
                options = action.get("retryOptions") or {}
                inst.retry_by_attempt[seq] = RetryState(
                    "suborchestration", name, input_, int(options.get("maxNumberOfAttempts", 1)),
                    int(options.get("firstRetryIntervalInMilliseconds", 1000)), sub_instance_id=sub_id)
            post.append(lambda: self._start_sub(inst, seq, name, sub_id, input_))
        else:
            return f"action type {kind} is not supported by the host double: {json.dumps(action)[:200]}"
        return None

    # ------------------------------------------------------------------------------------------ work items
    def _start_timer(self, inst: Instance, seq: int, fire_at: datetime, fire_at_text: str | None = None) -> None:
        execution_id = inst.execution_id

        async def fire() -> None:
            delay = (fire_at - utcnow()).total_seconds()
            if delay > 0:
                await asyncio.sleep(delay)
            inst.timers.pop(seq, None)
            self._deliver(inst.instance_id, execution_id,
                          _event(TIMER_FIRED, TimerId=seq, FireAt=fire_at_text or iso(fire_at)))

        inst.timers[seq] = self._spawn(fire())

    def _start_activity(self, inst: Instance, seq: int, name: str, input_: str | None) -> None:
        execution_id = inst.execution_id
        key = f"{inst.instance_id}#{execution_id[:8]}#{seq}"

        async def run() -> None:
            self.in_flight[key] = {"instance_id": inst.instance_id, "seq": seq, "name": name}
            try:
                function = self.host.activity_function(name)
                if function is None:
                    answer = {"ok": False, "reason": f"The function '{name}' doesn't exist, is disabled, or "
                              "is not an activity function.", "details": None}
                else:
                    answer = await self.host.run_activity(function, name, input_, inst.instance_id)
            finally:
                self.in_flight.pop(key, None)
            if answer.get("ok"):
                self.activity_completions[name] += 1
                event = _event(TASK_COMPLETED, TaskScheduledId=seq, Result=answer.get("result"))
            else:
                event = _event(TASK_FAILED, TaskScheduledId=seq, Reason=answer.get("reason"),
                               Details=answer.get("details"))
            self._deliver(inst.instance_id, execution_id, event)

        self._spawn(run())

    def _start_sub(self, inst: Instance, seq: int, name: str, sub_id: str, input_: str | None) -> None:
        try:
            self.start(name, sub_id, input_, parent=(inst.instance_id, inst.execution_id, seq))
        except (UnknownFunction, InstanceConflict) as exc:
            self._deliver(inst.instance_id, inst.execution_id,
                          _event(SUB_ORCHESTRATION_FAILED, TaskScheduledId=seq, Reason=str(exc), Details=None))

    async def _entity_loop(self, record: EntityRecord) -> None:
        while record.queue:
            batch, record.queue = record.queue, []
            function = self.host.entity_function(record.name)
            context = {"self": {"name": record.name, "key": record.key}, "exists": record.exists,
                       "state": record.state, "batch": [{"name": op["name"], "input": op["input"]} for op in batch]}
            if function is None:
                answer: dict[str, Any] = {"ok": False, "error": f"The function '{record.name}' doesn't exist, "
                                          "is disabled, or is not an entity function."}
            else:
                answer = await self.host.run_entity(function, json.dumps(context))
            record.batches += 1
            results: list[dict[str, Any]]
            if answer.get("ok"):
                outcome = json.loads(answer["result"])
                record.exists = bool(outcome.get("entityExists"))
                record.state = outcome.get("entityState") if record.exists else None
                results = outcome.get("results", [])
            else:
                failure = json.dumps(str(answer.get("error")))
                results = [{"isError": True, "result": failure} for _ in batch]
            for op, result in zip(batch, results, strict=False):
                if op["reply"] is None:
                    continue
                instance_id, execution_id, request_id = op["reply"]
                message: dict[str, Any] = {"result": result.get("result")}
                if result.get("isError"):
                    message["exceptionType"] = "System.Exception"
                self._deliver(instance_id, execution_id, _event(EVENT_RAISED, Name=request_id,
                                                                Input=json.dumps(message)))

