"""The Durable runtime's shared state: the host it invokes through (``HostPort``), the sessions it
holds (one per instance), its counters, and what every part of the runtime reads and writes."""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..config import DurableConfig
from ..failures import Outcome
from .leases import PartitionLeases
from .messaging import Delivery, Poller, Queues
from .store import LoadedHistory, Storage, TaskHubNames

# HOSTDOUBLE_TRACE=1: one line per step of the Durable work (monotonic ms, instance id tail, step) on the
# host's output, to see where a run's time goes (docs/PERFORMANCE.md, "Where the time goes"). Off by default.
TRACE = os.environ.get("HOSTDOUBLE_TRACE") == "1"


def trace(step: str, instance_id: str) -> None:
    if TRACE:
        print(f"TRACE {time.monotonic() * 1000:.1f} {instance_id[-6:]} {step}", flush=True)


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


class RuntimeCore:
    """The state every part of the runtime works on (the parts are mixins of ``DurableRuntime``)."""

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
        self._work_poller_task: asyncio.Task[Any] | None = None
        self._reserved_slots = 0  # activity slots taken by locally sent activities not started yet
        # a test hook: (activity name, seconds, "kill" | "storage") — that long after the next episode that
        # schedules that activity has sent its messages, before it checkpoints, the whole host dies (a
        # container crash there) or the checkpoint's storage call fails; see _maybe_crash_before_checkpoint
        self.crash_before_checkpoint: tuple[str, float, str] | None = None

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task
