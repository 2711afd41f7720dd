"""Orchestration episodes (``CompleteTaskOrchestrationWorkItemAsync``): run the orchestrator over
history + new events, send, checkpoint, update the instance row, delete what was consumed."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from typing import Any

from azure.core.exceptions import ServiceRequestError

from ..failures import Answered, TimedOut, WorkerExited, orchestrator_worker_exit
from .core import RuntimeCore, Session, trace
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
)
from .history import EXECUTION_STARTED, EXECUTION_TERMINATED, iso, utcnow
from .messaging import Delivery, Envelope
from .store import HistoryConflict, LoadedHistory


class Orchestrations(RuntimeCore):
    """Orchestration episodes (``CompleteTaskOrchestrationWorkItemAsync``): run the orchestrator over
    history + new events, send, checkpoint, update the instance row, delete what was consumed."""

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
