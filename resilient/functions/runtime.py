"""Per-process singletons the bindings share: settings, storage and the engine.

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
from resilient.engine import resume_notice
from resilient.engine.activities import Engine
from resilient.settings import Settings

if TYPE_CHECKING:
    from resilient.storage.factory import Storage

AgentFactory = Callable[[Settings], Agent]

_agent_factory: AgentFactory | None = None
_engines: dict[int, Engine] = {}
_lock = asyncio.Lock()


def configure(agent_factory: AgentFactory) -> None:
    """Called by the blueprint factory: which agent this app runs. Also turns on log context."""
    global _agent_factory
    _agent_factory = agent_factory
    logs.install()


async def storage() -> Storage:
    return (await engine()).storage


async def engine() -> Engine:
    """The engine for the running event loop (storage clients are bound to a loop)."""
    key = id(asyncio.get_running_loop())
    found = _engines.get(key)
    if found is not None:
        return found
    async with _lock:
        found = _engines.get(key)
        if found is None:
            if _agent_factory is None:
                raise RuntimeError("resilient.functions.runtime.configure(agent_factory) was not called")
            from resilient.storage.factory import open_storage  # the storage SDKs load with the first call

            settings = Settings.from_env()
            found = Engine(await open_storage(settings), _agent_factory(settings), settings)
            _engines[key] = found
            resume_notice.announce_once(found.storage, settings, time.time())  # one line, if runs resume
    return found
