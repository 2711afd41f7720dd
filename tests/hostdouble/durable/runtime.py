"""The Durable runtime of the double: orchestration, entity and activity dispatchers over the task hub in
storage, and the management operations behind the Durable HTTP API.

Flow of one orchestration episode (``AzureStorageOrchestrationService.CompleteTaskOrchestrationWorkItemAsync``):
take every message pending for the instance → run the orchestrator once over history + new events →
(1) send the outbound messages, (2) commit history + sentinel in one conditional Table batch, (3) update
the instance row, (4) delete the consumed messages. A crash between the steps is safe: (1) without (2)
repeats the episode with the same decisions (duplicates are dropped on arrival), (2) without (4)
redelivers messages whose ids the history already holds (dropped).

An activity: run it, send TaskCompleted/TaskFailed to the instance's control queue, delete the work item;
a crash in between re-runs it after the work-item visibility timeout. An entity batch: every pending
operation at once, committed on the entity's row with its ETag; a batch whose worker died is aborted
(nothing committed) and retried after the abandon back-off.

How invocations end (worker death, ``functionTimeout``) is decided by the host (``HostPort``); here it
becomes TaskFailed (activity), a Failed orchestration or an aborted episode (orchestrator), an aborted
batch or failed operations (entity), exactly as in the README's crash-semantics table.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
import uuid
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol

from azure.core.exceptions import ServiceRequestError

from ..config import DurableConfig
from ..failures import (
    Answered,
    HostStopping,
    Outcome,
    TimedOut,
    WorkerExited,
    activity_failure,
    orchestrator_worker_exit,
)
from .episode import (
    ACCEPT,
    DEFER,
    Completion,
    EpisodeResult,
    Execution,
    Outbound,
    episode_end,
    episode_frame,
    fresh_state,
    rewind_event,
)
from .history import (
    ACTIVE,
    EVENT_RAISED,
    EXECUTION_COMPLETED,
    EXECUTION_STARTED,
    EXECUTION_TERMINATED,
    GENERIC_EVENT,
    SUB_ORCHESTRATION_FAILED,
    TASK_COMPLETED,
    TASK_FAILED,
    TASK_SCHEDULED,
    iso,
    new_event,
    utcnow,
)
from .leases import PartitionLeases
from .messaging import Delivery, Envelope, MessageGone, Poller, Queues, renew_period_s
from .store import HistoryConflict, LoadedHistory, Storage, TaskHubNames

MAX_PROCESSED_REQUESTS = 500  # entity request ids remembered to drop re-delivered operations
INVALID_ID_CHARS = set("/\\#?")
# HOSTDOUBLE_TRACE=1: one line per step of the Durable work (monotonic ms, instance id tail, step) on the
# host's output, to see where a run's time goes (docs/PERFORMANCE.md, "Where the time goes"). Off by default.
TRACE = os.environ.get("HOSTDOUBLE_TRACE") == "1"


def trace(step: str, instance_id: str) -> None:
    if TRACE:
        print(f"TRACE {time.monotonic() * 1000:.1f} {instance_id[-6:]} {step}", flush=True)


class UnknownFunction(Exception):
    """No orchestrator function of that name (the extension's ``ArgumentException``)."""


class InvalidInstanceId(Exception):
    """An instance id the extension refuses (``@`` first, ``/ \\ # ?``, control characters, > 256)."""


class InstanceConflict(Exception):
    """``start`` over an instance that is Pending/Running/ContinuedAsNew/Suspended (``NonRunningStates``)."""


class NotFailed(Exception):
    """``rewind`` of an instance that is not Failed (the client's ``InvalidOperationException``)."""


class HostPort(Protocol):
    """What the runtime needs from the host: function lookup and invocations through the worker."""

    def orchestrator_function(self, name: str) -> str | None: ...

    def activity_function(self, name: str) -> str | None: ...

    def entity_function(self, name: str) -> str | None: ...

    async def invoke_orchestrator(self, function: str, instance_id: str, context: str) -> Outcome: ...

    async def invoke_activity(self, function: str, name: str, instance_id: str, input_: Any,
                              on_attempt: Callable[[bool], None]) -> Outcome: ...

    async def invoke_entity(self, function: str, entity_id: str, context: str) -> Outcome: ...


@dataclass
class Session:
    """One instance (orchestration or entity) this host is working on, with what it holds of it."""

    instance_id: str
    partition: int
    pending: list[Delivery] = field(default_factory=list)
    held: dict[str, Delivery] = field(default_factory=dict)
    task: asyncio.Task[None] | None = None
    history: LoadedHistory | None = None
    entity: dict[str, Any] | None = None
    # Activities the current episode sent whose checkpoint has not been written yet: if the episode is then
    # abandoned, its re-run sends them again (DTFx sends before it checkpoints: at-least-once).
    sent_unsettled: Counter[str] = field(default_factory=Counter)

    @property
    def is_entity(self) -> bool:
        return self.instance_id.startswith("@")


@dataclass
class Counters:
    activity_deliveries: Counter[str] = field(default_factory=Counter)
    activity_redeliveries: Counter[str] = field(default_factory=Counter)
    activity_completions: Counter[str] = field(default_factory=Counter)
    activity_failures_worker_exit: Counter[str] = field(default_factory=Counter)
    activity_timeouts: Counter[str] = field(default_factory=Counter)
    # Activity messages sent by an episode whose checkpoint then failed: each may be delivered twice.
    activity_sends_before_a_failed_checkpoint: Counter[str] = field(default_factory=Counter)
    episodes: int = 0
    episodes_failed_worker_exit: int = 0
    episodes_aborted: int = 0
    entity_batches: int = 0
    entity_batches_aborted: int = 0
    history_conflicts: int = 0


def validate_instance_id(instance_id: str) -> None:
    if instance_id.startswith("@"):
        raise InvalidInstanceId("Orchestration instance ids must not start with @.")
    if any(c in INVALID_ID_CHARS or ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in instance_id):
        raise InvalidInstanceId("Orchestration instance ids must not contain /, \\, #, ?, or control characters.")
    if len(instance_id) > 256:
        raise InvalidInstanceId("Instance ID lengths must not exceed 256 characters.")


def entity_instance_id(name: str, key: str) -> str:
    return f"@{name.lower()}@{key}"


class DurableRuntime:
    def __init__(self, host: HostPort, config: DurableConfig, connection_string: str,
                 log: Callable[[str], None]) -> None:
        self.host = host
        self.config = config
        self.log = log
        self.names = TaskHubNames(config.hub_name, config.partition_count)
        self.storage = Storage(connection_string, self.names)
        self.queues = Queues(self.storage)
        self.leases = PartitionLeases(self.storage, config, log, self._partition_acquired, self._partition_lost)
        self.sessions: dict[str, Session] = {}
        self.owned: set[int] = set()
        self.pollers: dict[int, asyncio.Task[None]] = {}
        self.running_activities: dict[str, dict[str, Any]] = {}
        self.max_activities = config.max_activities  # maxConcurrentActivityFunctions
        self.counters = Counters()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._stopping = False
        self._work_poller: Poller | None = None
        self._reserved_slots = 0  # activity slots taken by locally sent activities not started yet
        # a test hook: (activity name, seconds, "kill" | "storage") — that long after the next episode that
        # schedules that activity has sent its messages, before it checkpoints, the whole host dies (a
        # container crash there) or the checkpoint's storage call fails; see _maybe_crash_before_checkpoint
        self.crash_before_checkpoint: tuple[str, float, str] | None = None

    # ------------------------------------------------------------------------------------------ lifecycle
    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def open(self) -> None:
        """Create the task hub if needed, take partition leases, start polling."""
        await self.storage.create_task_hub()
        await self.leases.start()
        self._work_poller = Poller(self.queues, self.names.work_item_queue, self.config.work_item_visibility,
                                   self.config.max_polling_interval, self._on_work_items, self.log,
                                   fetch_limit=lambda: self.max_activities - len(self.running_activities) -
                                   self._reserved_slots)
        self._spawn(self._work_poller.run())

    def _free_activity_slots(self) -> int:
        """Slots neither running, nor reserved by an episode's sends, nor being filled by a poll in flight."""
        fetching = self._work_poller.fetching if self._work_poller is not None else 0
        return self.max_activities - len(self.running_activities) - self._reserved_slots - fetching

    async def close(self, *, graceful: bool, drain_s: float = 10.0) -> None:
        """Stop dispatching. Graceful: let running work finish (it is told the host stops), give the
        partition leases back. Messages held but not finished reappear after their visibility timeout."""
        self._stopping = True
        for task in list(self.pollers.values()):
            task.cancel()
        busy = [s.task for s in self.sessions.values() if s.task is not None]
        if graceful and busy:
            await asyncio.wait(busy, timeout=drain_s)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.leases.stop(release=graceful)
        await self.storage.close()

    def _partition_acquired(self, partition: int) -> None:
        self.owned.add(partition)
        poller = Poller(self.queues, self.names.control_queue(partition), self.config.control_visibility,
                        self.config.max_polling_interval, self._on_control, self.log)
        self.pollers[partition] = self._spawn(poller.run())

    def _partition_lost(self, partition: int) -> None:
        self.owned.discard(partition)
        task = self.pollers.pop(partition, None)
        if task is not None:
            task.cancel()
        for instance_id, session in list(self.sessions.items()):
            if session.partition == partition and session.task is None:
                del self.sessions[instance_id]

    # -------------------------------------------------------------------------------------------- intake
    async def _on_control(self, deliveries: list[Delivery]) -> None:
        for delivery in deliveries:
            self._accept(delivery)

    def _accept(self, delivery: Delivery) -> None:
        """A control-queue message this host now holds: queue it on its instance's session."""
        instance_id = delivery.envelope.instance_id
        partition = self.names.partition_of(instance_id)
        if partition not in self.owned or self._stopping:
            return  # not ours (any more): it reappears after its visibility timeout
        session = self.sessions.get(instance_id)
        if session is None:
            session = self.sessions[instance_id] = Session(instance_id, partition)
        held = session.held.get(delivery.message_id)
        if held is not None:  # the same message again (re-dequeued): keep the newest pop receipt
            held.pop_receipt, held.visible_at = delivery.pop_receipt, delivery.visible_at
            held.dequeue_count = delivery.dequeue_count
            return
        session.held[delivery.message_id] = delivery
        session.pending.append(delivery)
        if session.task is None:
            session.task = self._spawn(self._session_loop(session))

    def _claim_later(self, delivery: Delivery, kind: str) -> None:
        """Claim a message of ours when it becomes visible (a timer, an abandoned message) and dispatch it.

        The claim is an ``update_message`` with the pop receipt we got when sending: if anyone dequeued
        the message meanwhile (our own poller included), the receipt is stale and the claim does nothing.
        """

        async def claim() -> None:
            await asyncio.sleep(max(0.0, delivery.visible_at - time.time()))
            if self._stopping:
                return
            if kind == "control":
                if self.names.partition_of(delivery.envelope.instance_id) not in self.owned:
                    return
                visibility = self.config.control_visibility
            else:
                if len(self.running_activities) >= self.max_activities:
                    return  # the work-item poller takes it when a slot frees up
                visibility = self.config.work_item_visibility
            try:
                await self.queues.update(delivery, visibility.total_seconds())
            except MessageGone:
                return
            except Exception as error:
                self.log(f"claim of a {kind} message failed ({type(error).__name__}); the poller will find it")
                return
            delivery.dequeue_count += 1
            if kind == "control":
                self._accept(delivery)
            else:
                self._start_activity(delivery)

        self._spawn(claim())

    async def _renew(self, deliveries: Callable[[], list[Delivery]], visibility: timedelta) -> None:
        """Keep held messages invisible while we work on them (``RenewUntil``)."""
        period = renew_period_s(visibility)
        while True:
            await asyncio.sleep(period)
            for delivery in deliveries():
                try:
                    await self.queues.update(delivery, visibility.total_seconds())
                except MessageGone:
                    pass
                except Exception as error:
                    self.log(f"renewing a message failed ({type(error).__name__})")

    # ------------------------------------------------------------------------------------------ sessions
    async def _session_loop(self, session: Session) -> None:
        renewer = self._spawn(self._renew(lambda: list(session.held.values()), self.config.control_visibility))
        try:
            while session.pending and not self._stopping:
                batch, session.pending = session.pending, []
                try:
                    if session.is_entity:
                        await self._entity_batch(session, batch)
                    else:
                        await self._orchestration_batch(session, batch)
                except asyncio.CancelledError:
                    raise
                except Exception as error:
                    self.log(f"instance {session.instance_id}: work item aborted ({type(error).__name__}: "
                             f"{error}); its messages come back after the abandon back-off")
                    self._unsettle(session)
                    session.history = session.entity = None
                    await self._abandon(session, batch)
        finally:
            renewer.cancel()
            session.task = None
            if not session.held and not session.pending and not self._keep_cached(session):
                self.sessions.pop(session.instance_id, None)

    def _unsettle(self, session: Session) -> None:
        """The episode is abandoned after it sent activities: count them (a re-run sends them again)."""
        self.counters.activity_sends_before_a_failed_checkpoint.update(session.sent_unsettled)
        session.sent_unsettled.clear()

    @staticmethod
    def _keep_cached(session: Session) -> bool:
        if session.is_entity:
            return True
        history = session.history
        if history is None or history.execution_id is None:
            return False
        return Execution(session.instance_id, history.execution_id, history.events, history.state).active

    async def _finish(self, session: Session, deliveries: list[Delivery]) -> None:
        """Delete messages whose effect is committed (or that are dropped)."""
        await asyncio.gather(*(self.queues.delete(d) for d in deliveries), return_exceptions=True)
        for delivery in deliveries:
            session.held.pop(delivery.message_id, None)

    async def _abandon(self, session: Session, deliveries: list[Delivery]) -> None:
        """Give messages back with the abandon back-off; claim them again ourselves when they reappear."""
        for delivery in deliveries:
            session.held.pop(delivery.message_id, None)
            try:
                await self.queues.abandon(delivery)
            except Exception as error:
                self.log(f"abandon failed ({type(error).__name__}); the message reappears after its visibility")
                continue
            if not self._stopping:
                self._claim_later(delivery, "control")

    # ------------------------------------------------------------------------------------ orchestrations
    async def _orchestration_batch(self, session: Session, batch: list[Delivery]) -> None:
        instance_id = session.instance_id
        loaded = session.history or await self.storage.load_history(instance_id)
        session.history = loaded
        current = Execution(instance_id, loaded.execution_id, loaded.events, loaded.state) \
            if loaded.execution_id else None
        drops: list[Delivery] = []
        defers: list[Delivery] = []
        taken: list[tuple[Delivery, dict[str, Any]]] = []
        start: tuple[Delivery, dict[str, Any]] | None = None
        for delivery in batch:
            event = delivery.envelope.event
            if delivery.envelope.id in loaded.msg_ids:
                drops.append(delivery)  # already in the history: a re-delivery
            elif event["EventType"] == EXECUTION_STARTED and start is None \
                    and (current is None or not current.active) and await self._start_is_current(delivery):
                start = (delivery, event)
            elif event["EventType"] == EXECUTION_STARTED:
                drops.append(delivery)
        execution = current
        if start is not None:
            execution = Execution(instance_id, str(start[0].envelope.execution_id), [], fresh_state(), start[1])
        accepted_events: list[dict[str, Any]] = [start[1]] if start else []
        terminate: dict[str, Any] | None = None
        for delivery in batch:
            event = delivery.envelope.event
            if delivery in drops or (start is not None and delivery is start[0]):
                continue
            if execution is None or (not execution.active and start is None):
                if execution is None and await self._is_pending(instance_id):
                    defers.append(delivery)  # its start has not been processed yet
                else:
                    drops.append(delivery)  # no such instance, or it has ended
                continue
            if event["EventType"] == EXECUTION_TERMINATED:
                terminate = terminate or event
                taken.append((delivery, event))
                continue
            verdict = execution.classify(event, delivery.envelope.execution_id, accepted_events)
            if verdict == ACCEPT:
                taken.append((delivery, event))
                accepted_events.append(event)
            elif verdict == DEFER:
                defers.append(delivery)
            else:
                drops.append(delivery)
        if execution is None or (start is None and not taken):
            await self._finish(session, drops)
            await self._abandon(session, defers)
            return
        await self._run_episode(session, execution, start, taken, terminate, drops, defers)

    async def _start_is_current(self, delivery: Delivery) -> bool:
        """DTFx de-duplicates top-level starts against the Instances row: a start whose row names another
        execution (or no row at all: purged) is stale and dropped."""
        event = delivery.envelope.event
        if event.get("ParentInstance"):
            return True
        row = await self.storage.read_instance(delivery.envelope.instance_id)
        if row is None:
            return False
        return row.get("ExecutionId") in (delivery.envelope.execution_id, event.get("ContinuedFrom") or "-")

    async def _is_pending(self, instance_id: str) -> bool:
        row = await self.storage.read_instance(instance_id)
        return row is not None and row.get("RuntimeStatus") == "Pending"

    async def _run_episode(self, session: Session, execution: Execution,
                           start: tuple[Delivery, dict[str, Any]] | None,
                           taken: list[tuple[Delivery, dict[str, Any]]], terminate: dict[str, Any] | None,
                           drops: list[Delivery], defers: list[Delivery]) -> None:
        instance_id = session.instance_id
        loaded = session.history
        assert loaded is not None
        consumed = ([start] if start else []) + [t for t in taken if t[1] is not terminate]
        frame = episode_frame([event for _, event in consumed])
        trace("episode start", instance_id)
        result = EpisodeResult()
        self.counters.episodes += 1
        if terminate is not None:
            result.completion = Completion("Terminated", terminate.get("Input"))
        else:
            for _, event in consumed:
                execution.retry_bookkeeping(event, result)
            function = self.host.orchestrator_function(execution.name)
            if function is None:
                result.completion = Completion(
                    "Failed", f"The function '{execution.name}' doesn't exist, is disabled, or is not an "
                              "orchestrator function.")
            else:
                outcome = await self.host.invoke_orchestrator(function, instance_id,
                                                              json.dumps(execution.context(frame)))
                trace("episode invoked", instance_id)
                if isinstance(outcome, Answered):
                    execution.apply_answer(outcome.body, result)
                elif isinstance(outcome, WorkerExited):
                    # TaskOrchestrationShim: the orchestration fails for good; nothing retries it.
                    output, details = orchestrator_worker_exit(execution.name, outcome.exit_code)
                    result.completion = Completion("Failed", output, details)
                    self.counters.episodes_failed_worker_exit += 1
                    self.log(f"instance {instance_id} ({execution.name}): orchestrator episode in flight when the "
                             f"worker died: Failed ({outcome.message})")
                else:  # TimedOut / HostStopping: SessionAbortedException, the messages are retried
                    self.counters.episodes_aborted += 1
                    why = outcome.message if isinstance(outcome, TimedOut) else "the host is stopping"
                    self.log(f"instance {instance_id}: episode aborted ({why}); retried after the back-off")
                    session.history = None
                    await self._finish(session, drops)
                    await self._abandon(session, [d for d, _ in consumed] + defers +
                                        [d for d, e in taken if e is terminate])
                    return
        if result.unsupported and result.completion is None:
            result.completion = Completion("Failed", f"Orchestrator function '{execution.name}' failed: "
                                                     f"{result.unsupported}")
        end_events: list[dict[str, Any]] = []
        outbound = list(result.outbound)
        if result.completion is not None:
            end_events, end_outbound = execution.completion_events(result.completion)
            outbound += end_outbound
        new_events = frame + result.produced + end_events + [episode_end()]
        # (1) outbound messages first (DTFx: their results are de-duplicated if this commit fails)
        local_control: list[Delivery] = []
        local_activities: list[Delivery] = []
        # Activities start here only into free slots, reserved before the sends (other episodes and the
        # poller take slots meanwhile); the rest go to the queue for the poller.
        activities = [o for o in outbound if o.kind == "activity"]
        reserved = max(0, min(len(activities), self._free_activity_slots()))
        held = {id(o) for o in activities[:reserved]}
        self._reserved_slots += reserved

        async def send(outbound_message: Outbound) -> None:
            await self._send(outbound_message, local_control, local_activities, hold=id(outbound_message) in held)
            if outbound_message.kind == "activity":  # out: a re-run of this episode would send it again
                session.sent_unsettled[str(outbound_message.event.get("Name"))] += 1

        try:
            await asyncio.gather(*(send(o) for o in outbound))
        finally:
            self._reserved_slots -= reserved
        # What was just sent is visible to the real backend's pollers now, and it wakes its own pollers on a
        # send: an activity or another instance's message is picked up while this episode checkpoints, not
        # after. (Messages to this instance wait for this session, as on the real backend.)
        trace("episode sent", instance_id)
        for delivery in local_control:
            self._accept(delivery)
        for delivery in local_activities:
            self._start_activity(delivery)
        await self._maybe_crash_before_checkpoint(instance_id, outbound)
        # (2) the checkpoint: history rows + sentinel, conditioned on the sentinel's ETag
        new_execution = start is not None
        first_index = 0 if new_execution else len(loaded.events)
        msg_ids = {1 + i: delivery.envelope.id for i, (delivery, _) in enumerate(consumed)}
        if terminate is not None:
            terminating = next(d for d, e in taken if e is terminate)
            msg_ids[len(frame) + len(result.produced)] = terminating.envelope.id
        try:
            etag = await self.storage.commit_history(instance_id, execution.execution_id, first_index, new_events,
                                                     msg_ids, loaded.etag, execution.state)
        except HistoryConflict:
            self.counters.history_conflicts += 1
            self.log(f"instance {instance_id}: history changed under us (another host?); episode discarded")
            self._unsettle(session)
            session.history = None
            await self._abandon(session, [d for d, _ in taken] + ([start[0]] if start else []) + defers)
            await self._finish(session, drops)
            return
        trace("episode committed", instance_id)
        session.sent_unsettled.clear()  # in the history now: a re-run of these messages is dropped, sends nothing
        # (3) the instance row
        await self.storage.write_instance(instance_id, self._instance_fields(execution, start, result))
        trace("episode row written", instance_id)
        committed = ([] if new_execution else loaded.events) + new_events
        msg_set = set() if new_execution else set(loaded.msg_ids)
        msg_set.update(msg_ids.values())
        session.history = LoadedHistory(execution.execution_id, committed, etag, msg_set, execution.state)
        # (4) delete what was consumed; give back what must wait
        await self._finish(session, [d for d, _ in taken] + ([start[0]] if start else []) + drops)
        await self._abandon(session, defers)
        if result.completion is not None:
            why = f": {str(result.completion.output)[:300]}" if result.completion.status == "Failed" else ""
            self.log(f"instance {instance_id} ({execution.name}) {result.completion.status}{why}")

    async def _maybe_crash_before_checkpoint(self, instance_id: str, outbound: list[Outbound]) -> None:
        """The armed fault between an episode's sends and its checkpoint: its messages are out (its
        activities may be running), its history is not committed. ``kill``: a container crash, SIGKILL to
        the whole process group, as ``HostDouble.kill_host`` does. ``storage``: the checkpoint's storage
        call fails (a connection lost for good); the work item is abandoned and runs again."""
        armed = self.crash_before_checkpoint
        if armed is None or not any(o.kind == "activity" and o.event.get("Name") == armed[0] for o in outbound):
            return
        self.crash_before_checkpoint = None
        name, delay, how = armed
        if how == "storage":
            self.log(f"instance {instance_id}: episode sent {name!r}; its checkpoint fails {delay:.2f} s later "
                     "(armed storage fault)")
            await asyncio.sleep(delay)
            raise ServiceRequestError("armed storage fault: the checkpoint's connection was lost")
        self.log(f"instance {instance_id}: episode sent {name!r}; the whole host dies {delay:.2f} s "
                 f"later, before the checkpoint (armed crash)")
        await asyncio.sleep(delay)
        os.killpg(os.getpgrp(), signal.SIGKILL)

    def _instance_fields(self, execution: Execution, start: tuple[Delivery, dict[str, Any]] | None,
                         result: EpisodeResult) -> dict[str, Any]:
        now = iso(utcnow())
        fields: dict[str, Any] = {
            "Name": execution.name, "ExecutionId": execution.execution_id, "LastUpdatedTime": now,
            "RuntimeStatus": "Running", "CustomStatus": json.dumps(result.custom_status),
            "TaskHubName": self.names.hub,
        }
        if start is not None:
            event = start[1]
            fields.update({"CreatedTime": event.get("Timestamp") or now, "Input": json.dumps(event.get("Input")),
                           "Version": event.get("Version", ""), "Output": "null", "CompletedTime": ""})
        completion = result.completion
        if completion is not None:
            fields["RuntimeStatus"] = completion.status
            if completion.status != "ContinuedAsNew":
                fields["CompletedTime"] = now
            fields["Output"] = json.dumps(completion.output)
        return fields

    async def _send(self, outbound: Outbound, local_control: list[Delivery],
                    local_activities: list[Delivery], *, hold: bool = True) -> None:
        envelope = Envelope(outbound.instance_id, outbound.event, outbound.execution_id)
        if outbound.kind == "activity":
            if not hold:
                # every activity slot is taken: like the real dispatcher (WorkItemDispatcher fetches only
                # after taking a concurrency slot), leave it in the queue for the poller
                await self.queues.send(self.names.work_item_queue, envelope)
                if self._work_poller is not None:
                    self._work_poller.wake()  # TaskHubQueue.AddMessageAsync resets its poller's back-off
                return
            sent = await self.queues.send(self.names.work_item_queue, envelope,
                                          self.config.work_item_visibility.total_seconds(), held=True)
            local_activities.append(sent)
            return
        await self._send_to_instance(envelope, outbound.delay_s, local_control)

    async def _send_to_instance(self, envelope: Envelope, delay_s: float = 0.0,
                                local: list[Delivery] | None = None) -> None:
        """A message to an instance's control queue; held by us at once when we own that partition."""
        partition = self.names.partition_of(envelope.instance_id)
        queue = self.names.control_queue(partition)
        if delay_s > 0:
            sent = await self.queues.send(queue, envelope, delay_s)
            if partition in self.owned:
                self._claim_later(sent, "control")
            return
        if partition in self.owned and not self._stopping:
            sent = await self.queues.send(queue, envelope, self.config.control_visibility.total_seconds(), held=True)
            if local is None:
                self._accept(sent)
            else:
                local.append(sent)
            return
        await self.queues.send(queue, envelope)

    # ---------------------------------------------------------------------------------------- activities
    async def _on_work_items(self, deliveries: list[Delivery]) -> None:
        for delivery in deliveries:
            self._start_activity(delivery)

    def _start_activity(self, delivery: Delivery) -> None:
        if delivery.message_id in self.running_activities or self._stopping:
            return
        event = delivery.envelope.event
        self.running_activities[delivery.message_id] = {
            "instance_id": delivery.envelope.instance_id, "seq": event.get("EventId"), "name": event.get("Name")}
        self._spawn(self._run_activity(delivery))

    async def _run_activity(self, delivery: Delivery) -> None:
        envelope = delivery.envelope
        event = envelope.event
        name, seq = str(event.get("Name")), int(event.get("EventId", -1))
        if delivery.dequeue_count > 1:  # a host died (or gave up) holding it: the real backend re-runs it
            self.counters.activity_redeliveries[name] += 1
            self.log(f"re-delivering activity '{name}' of instance {envelope.instance_id} (its work item "
                     f"reappeared, dequeue count {delivery.dequeue_count})")
        renewer = self._spawn(self._renew(lambda: [delivery], self.config.work_item_visibility))
        trace(f"activity {name} start", envelope.instance_id)

        def attempt(redelivery: bool) -> None:
            self.counters.activity_deliveries[name] += 1
            if redelivery:
                self.counters.activity_redeliveries[name] += 1
                self.log(f"re-delivering activity '{name}' of instance {envelope.instance_id}")

        try:
            function = self.host.activity_function(name)
            if function is None:
                self.counters.activity_deliveries[name] += 1
                outcome: Outcome = Answered({"ok": False, "error": f"The function '{name}' doesn't exist, is "
                                             "disabled, or is not an activity function.", "stack": ""})
            else:
                outcome = await self.host.invoke_activity(function, name, envelope.instance_id, event.get("Input"),
                                                          attempt)
        finally:
            renewer.cancel()
        trace(f"activity {name} end", envelope.instance_id)
        try:
            if isinstance(outcome, HostStopping):
                with contextlib.suppress(Exception):
                    await self.queues.abandon(delivery)
                return
            if isinstance(outcome, Answered) and outcome.body.get("ok"):
                self.counters.activity_completions[name] += 1
                result = new_event(TASK_COMPLETED, TaskScheduledId=seq, Result=outcome.body.get("result"))
            else:
                reason, details = activity_failure(name, outcome)
                # the Durable extension's EndToEndTraceHelper.FunctionFailed line, with the instance id
                self.log(f"{envelope.instance_id}: Function '{name} (Activity)' failed with an error. "
                         f"Reason: {reason.splitlines()[0] if reason else ''}")
                if isinstance(outcome, WorkerExited):
                    self.counters.activity_failures_worker_exit[name] += 1
                elif isinstance(outcome, TimedOut):
                    self.counters.activity_timeouts[name] += 1
                result = new_event(TASK_FAILED, TaskScheduledId=seq, Reason=reason, Details=details)
            await self._send_to_instance(Envelope(envelope.instance_id, result, envelope.execution_id))
            trace(f"activity {name} result sent", envelope.instance_id)
            await self.queues.delete(delivery)
        except Exception as error:
            self.log(f"activity '{name}' of {envelope.instance_id}: could not report its result "
                     f"({type(error).__name__}); it runs again when its work item reappears")
        finally:
            was_full = len(self.running_activities) >= self.max_activities
            self.running_activities.pop(delivery.message_id, None)
            if was_full and self._work_poller is not None:
                self._work_poller.wake()  # the dispatcher fetches as soon as it gets a slot back

    # ------------------------------------------------------------------------------------------ entities
    async def _entity_batch(self, session: Session, batch: list[Delivery]) -> None:
        instance_id = session.instance_id
        trace("entity batch", instance_id)
        if session.entity is None:
            row = await self.storage.read_instance(instance_id)
            session.entity = {
                "exists": bool(row and row.get("EntityExists")),
                "state": (row.get("EntityState") or None) if row else None,
                "processed": json.loads(row.get("ProcessedRequests") or "[]") if row else [],
                "etag": row["etag"] if row else None,
            }
        entity = session.entity
        ops: list[tuple[Delivery, dict[str, Any]]] = []
        drops: list[Delivery] = []
        for delivery in batch:
            event = delivery.envelope.event
            if event.get("EventType") != EVENT_RAISED or event.get("Name") != "op":
                drops.append(delivery)
                continue
            request = json.loads(event["Input"])
            if request["id"] in entity["processed"] or any(r["id"] == request["id"] for _, r in ops):
                drops.append(delivery)  # a re-delivered operation that was already committed
                continue
            ops.append((delivery, request))
        if not ops:
            await self._finish(session, drops)
            return
        _, name, key = instance_id.split("@", 2)
        context = {"self": {"name": name, "key": key}, "exists": entity["exists"], "state": entity["state"],
                   "batch": [{"name": r["op"], "input": "null" if r.get("input") is None else r["input"]}
                             for _, r in ops]}
        function = self.host.entity_function(name)
        self.counters.entity_batches += 1
        if function is None:
            outcome: Outcome = Answered({"ok": False, "error": f"The function '{name}' doesn't exist, is disabled, "
                                         "or is not an entity function."})
        else:
            outcome = await self.host.invoke_entity(function, instance_id, json.dumps(context))
        if isinstance(outcome, WorkerExited | HostStopping):
            # EntityMiddleware: internal error → SessionAbortedException: nothing committed, batch retried.
            self.counters.entity_batches_aborted += 1
            why = outcome.message if isinstance(outcome, WorkerExited) else "the host is stopping"
            self.log(f"entity {instance_id}: batch of {len(ops)} aborted ({why}); retried after the back-off")
            await self._finish(session, drops)
            await self._abandon(session, [d for d, _ in ops])
            return
        exists, state = entity["exists"], entity["state"]
        if isinstance(outcome, TimedOut):  # TaskEntityShim: every operation fails with the timeout message
            results = [{"isError": True, "result": json.dumps(outcome.message)} for _ in ops]
        elif outcome.body.get("ok"):
            answer = json.loads(outcome.body["result"])
            exists = bool(answer.get("entityExists"))
            state = answer.get("entityState") if exists else None
            results = answer.get("results", [])
        else:
            failure = json.dumps(str(outcome.body.get("error")))
            results = [{"isError": True, "result": failure} for _ in ops]
        sends = []
        for (_, request), result in zip(ops, results, strict=False):
            if request.get("signal") or not request.get("parent"):
                continue
            message: dict[str, Any] = {"result": result.get("result")}
            if result.get("isError"):
                message["exceptionType"] = "System.Exception"
            reply = new_event(EVENT_RAISED, Name=request["id"], Input=json.dumps(message))
            sends.append(Envelope(request["parent"], reply, request.get("parentExecution")))
        await asyncio.gather(*(self._send_to_instance(e) for e in sends))
        processed = (entity["processed"] + [r["id"] for _, r in ops])[-MAX_PROCESSED_REQUESTS:]
        fields = {"Name": f"@{name}", "RuntimeStatus": "Running", "EntityExists": exists,
                  "EntityState": state if state is not None else "", "ProcessedRequests": json.dumps(processed),
                  "LastUpdatedTime": iso(utcnow()), "TaskHubName": self.names.hub}
        try:
            etag = await self.storage.write_instance(instance_id, fields, etag=entity["etag"],
                                                     create=entity["etag"] is None, replace=True)
        except Exception as error:  # another writer (412/409): drop the cache, retry the batch later
            self.counters.history_conflicts += 1
            self.log(f"entity {instance_id}: state changed under us ({type(error).__name__}); batch retried")
            session.entity = None
            await self._finish(session, drops)
            await self._abandon(session, [d for d, _ in ops])
            return
        session.entity = {"exists": exists, "state": state, "processed": processed, "etag": etag}
        await self._finish(session, [d for d, _ in ops] + drops)

    # ---------------------------------------------------------------------------------------- management
    async def start_new(self, name: str, instance_id: str | None, input_: Any, version: str = "") -> str:
        """``StartNewAsync``: a new execution, unless one is Pending/Running (``NonRunningStates``)."""
        if self.host.orchestrator_function(name) is None:
            raise UnknownFunction(
                f"The function '{name}' doesn't exist, is disabled, or is not an orchestrator function. "
                "Additional info: No orchestrator functions are currently registered!")
        instance_id = instance_id or uuid.uuid4().hex
        validate_instance_id(instance_id)
        existing = await self.storage.read_instance(instance_id)
        if existing is not None and existing.get("RuntimeStatus") in ACTIVE:
            raise InstanceConflict(f"An Orchestration instance with the status {existing['RuntimeStatus']} "
                                   "already exists.")
        execution_id = uuid.uuid4().hex
        now = iso(utcnow())
        fields = {"Name": name, "Version": version, "RuntimeStatus": "Pending", "ExecutionId": execution_id,
                  "Input": json.dumps(input_), "Output": "null", "CustomStatus": "null", "CreatedTime": now,
                  "LastUpdatedTime": now, "CompletedTime": "", "TaskHubName": self.names.hub}
        try:
            if existing is None:
                await self.storage.write_instance(instance_id, fields, create=True, replace=True)
            else:
                await self.storage.write_instance(instance_id, fields, etag=existing["etag"], replace=True)
        except Exception as error:  # someone started it in between
            raise InstanceConflict(f"An Orchestration instance with the status Pending already exists. "
                                   f"({type(error).__name__})") from error
        started = new_event(EXECUTION_STARTED, Name=name, Version=version, Input=input_,
                            OrchestrationInstance={"InstanceId": instance_id, "ExecutionId": execution_id})
        started["Timestamp"] = now
        trace("start message sending", instance_id)
        await self._send_to_instance(Envelope(instance_id, started, execution_id))
        trace("start message sent", instance_id)
        return instance_id

    async def status(self, instance_id: str) -> dict[str, Any] | None:
        return await self.storage.read_instance(instance_id)

    async def history(self, instance_id: str) -> list[dict[str, Any]]:
        return (await self.storage.load_history(instance_id)).events

    async def raise_event(self, instance_id: str, name: str, data: Any) -> None:
        """``data`` is the request body parsed once (a JToken on the real host) or ``None``."""
        event = new_event(EVENT_RAISED, Name=name, Input=None if data is None else json.dumps(data))
        await self._send_to_instance(Envelope(instance_id, event))

    async def terminate(self, instance_id: str, reason: str | None) -> None:
        await self._send_to_instance(Envelope(instance_id, new_event(EXECUTION_TERMINATED, Input=reason)))

    async def purge(self, instance_id: str) -> bool:
        row = await self.storage.read_instance(instance_id)
        if row is None:
            return False
        await self.storage.delete_history(instance_id)
        await self.storage.delete_instance(instance_id)
        await self.storage.delete_large_blobs(instance_id)
        session = self.sessions.get(instance_id)
        if session is not None and session.task is None:
            del self.sessions[instance_id]
        elif session is not None:
            session.history = None
        return True

    async def restart(self, instance_id: str, new_instance_id: bool) -> str:
        """``RestartAsync``: the original input again, under a new id or the same one."""
        row = await self.storage.read_instance(instance_id)
        if row is None:
            raise KeyError(instance_id)
        input_ = json.loads(row.get("Input") or "null")
        return await self.start_new(str(row.get("Name")), None if new_instance_id else instance_id, input_,
                                str(row.get("Version") or ""))

    async def rewind(self, instance_id: str, reason: str | None) -> None:
        """``RewindHistoryAsync`` + a GenericEvent: failures of the last execution are cleared from the
        history (each TaskFailed and its TaskScheduled become GenericEvents, so the task runs again), the
        status goes back to Pending, and the instance replays. Failed sub-orchestrations are not rewound."""
        row = await self.storage.read_instance(instance_id)
        if row is None:
            raise KeyError(instance_id)
        if row.get("RuntimeStatus") != "Failed":
            raise NotFailed("The rewind operation is only supported on failed orchestration instances.")
        loaded = await self.storage.load_history(instance_id)
        count = len(loaded.events)
        keys = sorted(r["RowKey"] for r in await self.storage.history_rows(instance_id)
                      if r["RowKey"] != "sentinel" and int(r["RowKey"], 16) < count
                      and r.get("ExecutionId") == loaded.execution_id)
        events = dict(zip(keys, loaded.events, strict=True))
        failed_tasks = {int(e["TaskScheduledId"]) for e in events.values() if e["EventType"] == TASK_FAILED}
        updates = []
        for row_key, event in events.items():
            kind = event["EventType"]
            if kind in (TASK_FAILED, SUB_ORCHESTRATION_FAILED) or (
                    kind == EXECUTION_COMPLETED and event.get("OrchestrationStatus") == "Failed") or (
                    kind == TASK_SCHEDULED and int(event.get("EventId", -1)) in failed_tasks):
                updates.append((row_key, rewind_event(event)))
        await self.storage.rewrite_history_rows(instance_id, updates)
        state = dict(loaded.state or fresh_state())
        state["rewound"] = sorted(set(state.get("rewound", [])) | failed_tasks)
        await self.storage.commit_history(instance_id, str(loaded.execution_id), count, [], {}, loaded.etag, state)
        await self.storage.write_instance(instance_id, {"RuntimeStatus": "Pending", "Output": "null",
                                                        "CompletedTime": "", "LastUpdatedTime": iso(utcnow())})
        session = self.sessions.get(instance_id)
        if session is not None:
            session.history = None
        await self._send_to_instance(Envelope(instance_id, new_event(GENERIC_EVENT, Data=reason or "")))

    async def list_instances(self, statuses: set[str], prefix: str) -> list[dict[str, Any]]:
        return await self.storage.query_instances(statuses=statuses or None, prefix=prefix)

    async def signal_entity(self, name: str, key: str, operation: str, input_: str | None) -> None:
        """``input_`` is the operation input as the SDK wants it in the batch (a JSON string of JSON)."""
        request = {"id": str(uuid.uuid4()), "op": operation, "signal": True, "input": input_,
                   "parent": None, "parentExecution": None}
        event = new_event(EVENT_RAISED, Name="op", Input=json.dumps(request))
        await self._send_to_instance(Envelope(entity_instance_id(name, key), event))

    async def read_entity(self, name: str, key: str) -> dict[str, Any] | None:
        row = await self.storage.read_instance(entity_instance_id(name, key))
        if row is None or not row.get("EntityExists"):
            return None
        return row

    # ------------------------------------------------------------------------------------------ reporting
    def stats(self) -> dict[str, Any]:
        c = self.counters
        statuses: Counter[str] = Counter()
        for session in self.sessions.values():
            history = session.history
            if history is not None and history.execution_id is not None:
                statuses[Execution(session.instance_id, history.execution_id, history.events,
                                   history.state).status] += 1
        return {
            "task_hub": self.names.hub,
            "partitions_owned": sorted(self.owned),
            "activity_deliveries": dict(c.activity_deliveries),
            "activity_redeliveries": dict(c.activity_redeliveries),
            "activity_completions": dict(c.activity_completions),
            "activity_failures_worker_exit": dict(c.activity_failures_worker_exit),
            "activity_timeouts": dict(c.activity_timeouts),
            "activity_sends_before_a_failed_checkpoint": dict(c.activity_sends_before_a_failed_checkpoint),
            "redeliveries": sum(c.activity_redeliveries.values()),
            "episodes": c.episodes,
            "episodes_failed_worker_exit": c.episodes_failed_worker_exit,
            "episodes_aborted": c.episodes_aborted,
            "entity_batches": c.entity_batches,
            "entity_batches_aborted": c.entity_batches_aborted,
            "history_conflicts": c.history_conflicts,
            "in_flight_activities": list(self.running_activities.values()),
            "instances_cached": dict(statuses),
            "storage_calls": self.storage.calls.snapshot(),
            "storage_calls_total": self.storage.calls.total,
        }
