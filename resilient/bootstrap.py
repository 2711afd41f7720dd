"""The one place that wires a worker: storage, the worker's in-memory state, the engine and the service.

Why one place: every process-local cache (the run memo, the kept log writers, the control board, the
committed feed with its recent-log memory, the on-demand repair throttle) must be the same object for
storage, the engine and the HTTP layer of a worker, or one of them would miss what another learnt. None of
them lives at module level: each worker's are built here. :class:`~resilient.engine.worker_state.
WorkerState` holds them and states what each may see stale; this module builds one per event loop and
hands it to all three.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from resilient.agents.base import Agent
from resilient.engine.activities import Engine
from resilient.engine.heal.repair import Repairer
from resilient.engine.worker_state import WorkerState
from resilient.settings import Settings

if TYPE_CHECKING:
    from resilient.http.service import DurableRuntime, ResponsesService
    from resilient.storage.factory import CreatedLocations, Storage


@dataclass
class Worker:
    """What one worker event loop runs on: its storage, its in-memory state (caches, shutdown signal,
    background tasks) and its engine."""

    storage: Storage
    engine: Engine
    state: WorkerState = field(repr=False)

    @property
    def settings(self) -> Settings:
        return self.engine.settings

    def service(self, runtime: DurableRuntime, repairer: Repairer | None = None) -> ResponsesService:
        """The HTTP endpoints over this worker (cheap: built per request around the request's Durable client)."""
        from resilient.http.service import ResponsesService

        return ResponsesService(self.storage, runtime, self.settings, repairer=repairer,
                                on_created=self.engine.remember_created, worker=self.state)


async def bootstrap(settings: Settings, agent: Agent, *, state: WorkerState | None = None,
                    created: CreatedLocations | None = None) -> Worker:
    """Open storage over one worker state (its caches) and build the engine over both. ``created``: the
    storage locations whose tables and containers this process created already (see
    :func:`~resilient.storage.factory.open_storage`).

    The storage SDKs load here, at the first activity or request, not when a new worker indexes the app."""
    from resilient.storage.factory import open_storage

    state = state if state is not None else WorkerState()
    storage = await open_storage(settings, feed=state.feed, controls=state.controls, kept=state.kept,
                                 created=created)
    return Worker(storage, Engine(storage, agent, settings, worker=state), state)
