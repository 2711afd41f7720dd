"""``store=false``: once a response is delivered or abandoned, nothing of it stays in the storage account.

A ``store=false`` response still needs storage while it runs (the run is a Durable orchestration of
activities that checkpoint items and append events, and the client's stream reads the event log), so
"not stored" means "deleted as soon as nobody can use it any more". Nobody else can ever read it: ``GET``
answers 404, and replay needs ``background=true``, which needs ``store=true``.

Who deletes, and when (every path ends in :func:`forget`, which is idempotent):

* the orchestration, after its run ended, waits for ``client_done`` (raised by the HTTP request that
  delivered the response or lost its client) or for ``unstored_grace_seconds`` (that request's worker
  died, so nobody will say), then calls the ``forget_response`` activity;
* a client that goes away before the end also sets the cancel flag, so the run stops at its next delta
  instead of spending model time on output nobody will read;
* the orchestration's own history and instance row can only be purged once it has completed, which is
  after the activity returned: the activity leaves a task in its worker that waits for the completion and
  purges (:func:`purge_history_when_done`); if that worker dies first, the maintenance timer's
  :func:`sweep` finds the finished instance by its input and purges it (and forgets its data again).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import suppress
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from resilient.storage.cas import ROW_CAS_ATTEMPTS, retry_cas
from resilient.storage.errors import NotFound
from resilient.storage.ports import ACTIVE_STATUSES

if TYPE_CHECKING:  # the storage SDKs load with the first storage open, not at import (cold start)
    from resilient.storage.factory import Storage

log = logging.getLogger("resilient.engine")

FINISHED_RUNTIME_STATUSES = frozenset({"Completed", "Failed", "Terminated"})
PURGE_WAIT_SECONDS = 120.0
PURGE_POLL_SECONDS = (0.05, 1.0)



async def forget(storage: Storage, response_id: str) -> None:
    """Delete every stored trace of a response: items (and their spill blobs), the event log (all
    segments and the index), its entry in the index of unfinished runs, then the row (and its spill
    blobs). Safe to repeat; the row goes last so a delete that dies halfway is found again."""
    await storage.items.delete_all(response_id)
    await storage.events.delete(response_id)
    await storage.active.remove(response_id)  # finalize leaves the index, but a run that never finalized
    await storage.responses.delete(response_id)
    log.info("forgotten (store=false)", extra={"response_id": response_id})


async def abandon(storage: Storage, response_id: str) -> None:
    """The client of a running ``store=false`` response went away: raise the cancel flag, as a cancel
    does, so the run stops at its next delta and settles as ``cancelled`` itself (a run not yet planned
    is cancelled at once). A run that already ended, or data already forgotten, is left alone."""

    async def attempt() -> None:  # a lost CAS: the run wrote the row meanwhile: look again
        record = await storage.responses.get(response_id)
        if record.status not in ACTIVE_STATUSES or record.cancel_requested:
            return
        if record.status == "queued":
            await storage.responses.replace(record, status="cancelled", cancel_requested=True)
        else:
            await storage.responses.replace(record, cancel_requested=True)

    with suppress(NotFound, _GaveUp):  # gone, or the run keeps writing the row: it is ending anyway
        await retry_cas(attempt, ROW_CAS_ATTEMPTS, _GaveUp)


class _GaveUp(Exception):
    """Every CAS of :func:`abandon` lost: the run keeps writing its row, so it is ending on its own; leave it."""


class Detached:
    """A worker's background work: what runs after the current invocation (or stream) has ended.

    Used where the caller cannot await: a stream whose client went away is being cancelled, and an
    activity cannot purge the orchestration that is waiting for it. Each task is kept referenced until
    it finishes (the event loop keeps only weak references) and its failure is logged; what it does must
    be repeatable by a later, durable path. One per worker (:class:`~resilient.engine.worker_state.WorkerState`)."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self, work: Coroutine[Any, Any, object], what: str) -> None:
        """Run ``work`` on the running event loop, detached."""

        async def guarded() -> None:
            try:
                await work
            except Exception:
                log.exception("detached %s failed", what)

        task = asyncio.get_running_loop().create_task(guarded())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def wait(self) -> None:
        """Wait for the detached work started here (tests, and a graceful shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)


class HistoryPort(Protocol):
    """What forgetting needs from the Durable client."""

    async def runtime_status(self, instance_id: str) -> str | None:
        """``Running``, ``Completed``, ... or None for an unknown instance."""
        ...

    async def purge(self, instance_id: str) -> None: ...

    async def finished_unstored(self, created_before: datetime) -> list[str]:
        """Ids of finished instances created before ``created_before`` whose input marks a store=false run."""
        ...


async def purge_history_when_done(history: HistoryPort, instance_id: str, *,
                                  wait_seconds: float = PURGE_WAIT_SECONDS,
                                  sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> bool:
    """Purge the orchestration's history and instance row as soon as it has finished.

    Purging a running instance would delete rows its last episode then writes again, so this waits
    for a finished runtime status (it comes within milliseconds of the ``forget_response`` activity's
    return). Returns whether it purged; on ``False`` the maintenance sweep does it later."""
    deadline = time.monotonic() + wait_seconds
    delay = PURGE_POLL_SECONDS[0]
    while time.monotonic() < deadline:
        status = await history.runtime_status(instance_id)
        if status is None:
            return True  # already purged (a sweep, or a repeated activity)
        if status in FINISHED_RUNTIME_STATUSES:
            await history.purge(instance_id)
            log.info("history purged (store=false)", extra={"response_id": instance_id})
            return True
        await sleep(delay)
        delay = min(PURGE_POLL_SECONDS[1], delay * 2)
    log.warning("history not purged: the orchestration did not finish in time (the sweep will)",
                extra={"response_id": instance_id})
    return False


async def sweep(storage: Storage, history: HistoryPort, *, now: datetime, older_than_seconds: float,
                limit: int = 200) -> list[str]:
    """Finish forgetting what a crash interrupted: every finished ``store=false`` orchestration created
    more than ``older_than_seconds`` ago has its data forgotten (again) and its history purged.

    A finished instance is one no repair will resume, so deleting under it races nothing."""
    cutoff = now - timedelta(seconds=older_than_seconds)
    found = (await history.finished_unstored(cutoff))[:limit]
    for instance_id in found:
        await forget(storage, instance_id)
        await history.purge(instance_id)
    if found:
        log.info("store=false sweep", extra={"purged": len(found)})
    return found
