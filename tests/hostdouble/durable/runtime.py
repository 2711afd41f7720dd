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

The runtime is split by concern, each a mixin of ``DurableRuntime`` over the shared state in ``core.py``:
``intake.py`` (messages taken in, claims, visibility renewal), ``sessions.py`` (one work loop per
instance), ``orchestrations.py`` (episodes and sends), ``activities.py``, ``entities.py``,
``management.py`` (the Durable HTTP API's operations); this module holds the lifecycle (open, close,
partitions gained and lost) and the stats.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from .activities import Activities
from .core import Counters, HostPort, RuntimeCore, Session, trace
from .entities import Entities
from .episode import Execution
from .intake import Intake
from .management import (
    InstanceConflict,
    InvalidInstanceId,
    Management,
    NotFailed,
    UnknownFunction,
    entity_instance_id,
    validate_instance_id,
)
from .messaging import Poller
from .orchestrations import Orchestrations
from .sessions import Sessions

__all__ = ["Counters", "DurableRuntime", "HostPort", "InstanceConflict", "InvalidInstanceId", "NotFailed",
           "Session", "UnknownFunction", "entity_instance_id", "trace", "validate_instance_id"]


class DurableRuntime(Intake, Sessions, Orchestrations, Activities, Entities, Management, RuntimeCore):
    # ------------------------------------------------------------------------------------------ lifecycle
    async def open(self) -> None:
        """Create the task hub if needed, take partition leases, start polling."""
        await self.storage.create_task_hub()
        await self.leases.start()
        self._work_poller = Poller(self.queues, self.names.work_item_queue, self.config.work_item_visibility,
                                   self.config.max_polling_interval, self._on_work_items, self.log,
                                   fetch_limit=lambda: self.max_activities - len(self.running_activities) -
                                   self._reserved_slots)
        self._work_poller_task = self._spawn(self._work_poller.run())

    def stop_taking_work(self) -> None:
        """Drain mode: poll no queue and take no message any more (work in flight goes on until
        :meth:`close`)."""
        self._stopping = True
        for task in [*self.pollers.values(), self._work_poller_task]:
            if task is not None:
                task.cancel()

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
            "leases_stolen": self.leases.stolen,
            "leases_lost": self.leases.lost,
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
