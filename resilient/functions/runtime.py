"""Per-process state the bindings share: the worker (settings, storage, caches, engine) per event loop, and
the storage locations whose tables and containers this process created. The Functions host imports the app
once per process and gives it nowhere else to keep them; everything a worker caches lives in its worker.

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
from resilient.engine import resume_notice
from resilient.engine.activities import Engine
from resilient.settings import Settings
from resilient.telemetry import setup as telemetry

if TYPE_CHECKING:
    from resilient.storage.factory import CreatedLocations

AgentFactory = Callable[[Settings], Agent]

_agent_factory: AgentFactory | None = None
_workers: dict[int, Worker] = {}
_created: CreatedLocations = set()  # storage locations created here: a new worker's open skips them
_lock = asyncio.Lock()


def configure(agent_factory: AgentFactory) -> None:
    """Called by the blueprint factory: which agent this app runs. Also turns on log context, and
    traces and metrics when an app setting names where to send them (nothing is loaded otherwise)."""
    global _agent_factory
    _agent_factory = agent_factory
    logs.install()
    telemetry.configure()


async def engine() -> Engine:
    """The engine for the running event loop (storage clients are bound to a loop)."""
    return (await worker()).engine


async def worker() -> Worker:
    """The worker for the running event loop, wired once by :func:`resilient.bootstrap.bootstrap`."""
    key = id(asyncio.get_running_loop())
    found = _workers.get(key)
    if found is not None:
        return found
    async with _lock:
        found = _workers.get(key)
        if found is None:
            if _agent_factory is None:
                raise RuntimeError("resilient.functions.runtime.configure(agent_factory) was not called")
            settings = Settings.from_env()
            found = await bootstrap(settings, _agent_factory(settings), created=_created)  # storage SDKs load here
            if not _workers:  # the process's first worker: one line, if runs resume
                resume_notice.announce_detached(found.engine.storage, settings, time.time(), found.caches.detached)
            _workers[key] = found
            # SIGTERM (scale-in, host stop): running steps stop and run again elsewhere (engine/shutdown.py)
            found.engine.caches.shutdown.install(asyncio.get_running_loop())
    return found
