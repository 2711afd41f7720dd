"""Activity work items: run, report TaskCompleted/TaskFailed to the instance, delete the work item;
at most ``maxConcurrentActivityFunctions`` at once."""

from __future__ import annotations

import contextlib

from ..failures import Answered, HostStopping, Outcome, TimedOut, WorkerExited, activity_failure
from .core import RuntimeCore, trace
from .history import TASK_COMPLETED, TASK_FAILED, new_event
from .messaging import Delivery, Envelope


class Activities(RuntimeCore):
    """Activity work items: run, report TaskCompleted/TaskFailed to the instance, delete the work item;
    at most ``maxConcurrentActivityFunctions`` at once."""

    def _free_activity_slots(self) -> int:
        """Slots neither running, nor reserved by an episode's sends, nor being filled by a poll in flight."""
        fetching = self._work_poller.fetching if self._work_poller is not None else 0
        return self.max_activities - len(self.running_activities) - self._reserved_slots - fetching

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
