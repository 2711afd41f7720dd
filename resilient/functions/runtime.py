"""Per-process state the bindings share: the worker (settings, storage, in-memory state, engine) per event loop, and
the storage locations whose tables and containers this process created, held by one :class:`ProcessRuntime`
that ``function_app.py`` builds. Everything a worker caches lives in its worker.

Why lazy: the Functions worker imports ``function_app.py`` during indexing, before any app setting may
be usable, and indexing must not touch storage. The first activity or request opens storage once per
worker process and event loop, and only then imports the storage SDKs (about a third of a second that a
cold instance would otherwise spend before it can even be indexed).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from resilient import logs
from resilient.agents.base import Agent
from resilient.bootstrap import Worker, bootstrap
from resilient.engine.activities import Engine
from resilient.engine.heal import resume_notice
from resilient.settings import Settings
from resilient.telemetry import setup as telemetry

if TYPE_CHECKING:
    from resilient.storage.factory import CreatedLocations

AgentFactory = Callable[[Settings], Agent]


class ProcessRuntime:
    """What the app's functions share in one worker process: which agent runs, one worker per event loop,
    and the storage locations created here (a new worker's open skips them).

    ``function_app.py`` builds one and hands it to every blueprint, whose functions close over it: the
    Functions host imports the app once per process and calls module-level functions, so this object is
    the one place the process keeps them. Building it also turns on log context, and traces and metrics
    when an app setting names where to send them (process-wide by nature; nothing is loaded otherwise)."""

    def __init__(self, agent_factory: AgentFactory) -> None:
        self._agent_factory = agent_factory
        self._workers: dict[int, Worker] = {}
        self._created: CreatedLocations = set()
        self._lock = asyncio.Lock()
        logs.install()
        telemetry.configure()

    async def engine(self) -> Engine:
        """The engine for the running event loop (storage clients are bound to a loop)."""
        return (await self.worker()).engine

    async def worker(self) -> Worker:
        """The worker for the running event loop, wired once by :func:`resilient.bootstrap.bootstrap`."""
        key = id(asyncio.get_running_loop())
        found = self._workers.get(key)
        if found is not None:
            return found
        async with self._lock:
            found = self._workers.get(key)
            if found is None:
                settings = Settings.from_env()
                found = await bootstrap(settings, self._agent_factory(settings), created=self._created)
                if not self._workers:  # the process's first worker: one line, if runs resume
                    resume_notice.announce_detached(found.engine.storage, settings, time.time(),
                                                    found.state.detached)
                self._workers[key] = found
                # SIGTERM (scale-in, host stop): running steps stop and run again elsewhere (engine/run/shutdown.py)
                found.engine.worker.shutdown.install(asyncio.get_running_loop())
        return found
