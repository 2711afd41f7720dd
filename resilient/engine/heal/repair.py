"""Repair: find runs whose orchestration died and resume them from their last checkpoint.

Why it exists: on the real Functions host nothing retries an orchestration whose orchestrator episode was
in flight when the worker process died: the Durable extension marks it **Failed** for good. An operator may
**terminate** one. One may be **missing**: the worker that served ``POST /responses`` died between writing
the response and starting its orchestration, or the history was purged. In each case the response row
still says ``queued``/``in_progress`` and, on a chain, the chain lock stays held, so later turns would wait
forever. The same holds for an orchestration that **completed** without landing its terminal status
(finalize kept failing for minutes).

How a run is resumed: a new execution of the same orchestrator with the **same instance id**
(``start_new`` over a terminal instance). The Durable extension's default ``OverridableExistingInstanceStates``
(``NonRunningStates``) allows that over Completed/Failed/Terminated instances and refuses it over Pending/
Running/Suspended ones. The new execution resumes exactly because every activity is idempotent over this
app's own storage: the plan is stored, checkpointed phases return without streaming, the interrupted phase
recovers with one ``response.in_progress`` reset (at most one phase repeated), finalize is a CAS. Durable's
*rewind* was not used: it applies to Failed instances only (not Terminated or missing), and on the Azure
Storage backend it rewrites history rows one by one (preview). Durable's *restart* API is ``start_new`` with
the stored input, but needs the old instance to exist.

Never two writers:

1. only an instance Durable reports as not running (Failed, Terminated, Completed, Canceled, or missing
   after ``missing_grace_seconds``: a create that is still starting its orchestration is not missing);
2. the claim is an ETag compare-and-swap on the response row, read *after* the status: a finalize that
   landed in between, or another repairer's claim, makes it fail; a claim also starts a cool-down;
3. the extension refuses a start over a Pending/Running instance;
4. the event log's append fencing stays the guard against a still-running activity of the dead execution.

The chain lock: the new execution acquires again. ``acquire`` is idempotent for the holder, so a holder
gets the lock back and hands it on at its end; a queued turn is queued again and its recheck loop heals a
grant that was lost while it was dead. An execution marked ``repair`` first inspects its response: if the
run is already over it only writes what is missing and leaves the chain (release + hand on).

Giving up: after ``max_repairs`` claims the repairer finalizes the run ``failed`` itself and signals
``remove`` to the chain lock, so no run stays active forever.

Where it runs: :func:`Repairer.sweep` on a timer (every minute), and :func:`Repairer.nudge` when a client
reads an unfinished response (``GET``, or a stream that sees no progress), throttled to one check per
response per ``check_interval_seconds`` per process, so polling does not add a Durable status call per poll.

Finding candidates: the ``<prefix>active`` index holds one row per unfinished response (see
:mod:`resilient.storage.active`); a sweep lists it (about one request per thousand runs in flight) and checks
at most ``sweep_limit`` entries, picked at random so a large backlog is covered over several sweeps.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from resilient.engine.orchestration.terms import CHAIN_LOCK_ENTITY, FORGET_AFTER_KEY, OWNS_LOCK_KEY
from resilient.storage.errors import NotFound, PreconditionFailed
from resilient.storage.logend import log_ended
from resilient.storage.ports import TERMINAL_STATUSES, JsonDict, ResponseRecord
from resilient.telemetry import metrics

if TYPE_CHECKING:
    from resilient.storage.factory import Storage

log = logging.getLogger("resilient.repair")

# Durable runtime statuses of an instance that is (or is about to be) running: never start over those.
RUNNING_STATES = frozenset({"Running", "Pending", "Suspended", "ContinuedAsNew"})

Finalizer = Callable[[str, JsonDict], Awaitable[JsonDict]]


class DurableControl(Protocol):
    """What the repair path needs from Durable Functions."""

    async def start(self, instance_id: str, payload: dict[str, Any]) -> None:
        """Start the response orchestrator (over a terminal instance too)."""
        ...

    async def status(self, instance_id: str) -> str | None:
        """The instance's runtime status (``Running``, ``Failed``, ...), or None when there is none."""
        ...

    async def signal_entity(self, entity_name: str, key: str, operation: str, payload: Any) -> None:
        """One-way entity operation."""
        ...


@dataclass(frozen=True)
class RepairPolicy:
    missing_grace_seconds: float = 60.0
    cooldown_seconds: float = 15.0
    max_repairs: int = 5
    min_age_seconds: float = 20.0  # the sweep leaves younger runs alone
    check_interval_seconds: float = 10.0  # on-demand throttle, per response and process
    scan_limit: int = 5000
    sweep_limit: int = 500
    concurrency: int = 8
    check_timeout_seconds: float = 10.0
    nudge_timeout_seconds: float = 3.0  # a client's read waits at most this long for an on-demand check


@dataclass(frozen=True)
class Verdict:
    """What one check found and did. ``action``: finished (index entry dropped), running, starting
    (missing but within the grace period), cooling, raced, restarted, gave_up, unknown (status unreadable),
    start_failed."""

    response_id: str
    action: str
    orchestration: str | None = None
    detail: str = ""


class Throttle:
    """Per-process memory of when each response was last checked on demand (bounded, oldest dropped)."""

    def __init__(self, max_entries: int = 10_000) -> None:
        self._seen: OrderedDict[str, float] = OrderedDict()
        self._max = max_entries

    def allow(self, key: str, interval: float, now: float) -> bool:
        last = self._seen.get(key)
        if last is not None and now - last < interval:
            return False
        self._seen[key] = now
        self._seen.move_to_end(key)
        while len(self._seen) > self._max:
            self._seen.popitem(last=False)
        return True


class Repairer:
    """Checks unfinished responses against their orchestration and resumes the ones that died."""

    def __init__(self, storage: Storage, durable: DurableControl, finalize: Finalizer,
                 policy: RepairPolicy | None = None, *, throttle: Throttle,
                 clock: Callable[[], float] = time.time) -> None:
        self.storage = storage
        self.durable = durable
        self.finalize = finalize
        self.policy = policy or RepairPolicy()
        self.clock = clock
        self.throttle = throttle  # the worker's (WorkerState.repair_checks): one check per interval per process

    # ----------------------------------------------------------------------------------- entry points
    async def nudge(self, response_id: str) -> Verdict | None:
        """A client read an unfinished response: check it, at most once per interval per process.
        Never raises (the client's request must not fail because of it)."""
        if not self.throttle.allow(response_id, self.policy.check_interval_seconds, time.monotonic()):
            return None
        try:
            return await asyncio.wait_for(self.check(response_id), self.policy.nudge_timeout_seconds)
        except Exception:
            log.warning("on-demand repair check failed", exc_info=True, extra={"response_id": response_id})
            return None

    async def sweep(self) -> list[Verdict]:
        """Check the unfinished responses in the index (the timer's job)."""
        policy = self.policy
        entries = await self.storage.active.list(policy.scan_limit)
        now = self.clock()
        due = [entry.response_id for entry in entries if now - entry.since >= policy.min_age_seconds]
        random.shuffle(due)
        gate = asyncio.Semaphore(policy.concurrency)

        async def one(response_id: str) -> Verdict:
            async with gate:
                try:
                    return await asyncio.wait_for(self.check(response_id), policy.check_timeout_seconds)
                except Exception as error:
                    log.warning("repair check failed", exc_info=True, extra={"response_id": response_id})
                    return Verdict(response_id, "unknown", detail=repr(error)[:200])

        verdicts = list(await asyncio.gather(*(one(rid) for rid in due[: policy.sweep_limit])))
        acted = [v for v in verdicts if v.action in ("restarted", "gave_up")]
        if acted:
            log.warning("repair sweep", extra={"checked": len(verdicts), "repaired": len(acted)})
        return verdicts

    # ------------------------------------------------------------------------------------ one response
    async def check(self, response_id: str) -> Verdict:
        """Look at one response; restart its orchestration if it died (see the module docstring)."""
        finished = await self._finished(response_id)
        if finished is not None:
            return finished
        try:
            status = await self.durable.status(response_id)
        except Exception as error:
            return Verdict(response_id, "unknown", detail=repr(error)[:200])
        if status in RUNNING_STATES:
            return Verdict(response_id, "running", status)
        # Read the row again *after* the status: a run that finished meanwhile shows here, and the claim
        # below compares against this read's ETag.
        try:
            record = await self.storage.responses.get(response_id)
        except NotFound:
            return await self._forget(response_id, None)
        if record.status in TERMINAL_STATUSES and await log_ended(self.storage.events, response_id):
            return await self._forget(response_id, status)
        now = self.clock()
        if status is None and now - float(record.doc.get("created_at") or 0) < self.policy.missing_grace_seconds:
            return Verdict(response_id, "starting", None)
        repairs = record.doc.get("repair") if isinstance(record.doc.get("repair"), dict) else {}
        count = int(repairs.get("count", 0)) if repairs else 0
        if repairs and now - float(repairs.get("at", 0)) < self.policy.cooldown_seconds:
            return Verdict(response_id, "cooling", status)
        found = status or "missing"
        try:
            record = await self.storage.responses.replace(
                record, doc_changes={"repair": {"count": count + 1, "at": now, "found": found}})
        except PreconditionFailed:
            return Verdict(response_id, "raced", status)
        if count >= self.policy.max_repairs:
            return await self._give_up(record, found, count)
        chain_id = record.doc.get("chain_id")
        payload: dict[str, Any] = {"response_id": response_id, "chain_id": str(chain_id) if chain_id else None,
                                   "repair": count + 1}
        if chain_id == response_id:  # a root turn holds its chain's lock from the start, as at its create
            payload[OWNS_LOCK_KEY] = True
        if record.doc.get(FORGET_AFTER_KEY) is not None:  # a store=false run still deletes itself at its end
            payload[FORGET_AFTER_KEY] = record.doc[FORGET_AFTER_KEY]
        try:
            await self.durable.start(response_id, payload)
        except Exception as error:  # e.g. a start raced in meanwhile: the next check looks again
            log.warning("repair start failed", exc_info=True, extra={"response_id": response_id})
            return Verdict(response_id, "start_failed", status, repr(error)[:200])
        log.warning("repaired", extra={"response_id": response_id, "found": found, "repair": count + 1,
                                       "status": record.status})
        metrics.REPAIRS.add(1, {"action": "restarted", "found": found})
        return Verdict(response_id, "restarted", status)

    async def _finished(self, response_id: str) -> Verdict | None:
        """The cheap first look: a response that is gone or whose run is over only leaves the index."""
        try:
            control = await self.storage.responses.get_control(response_id)
        except NotFound:
            return await self._forget(response_id, None)
        if control.status in TERMINAL_STATUSES and await log_ended(self.storage.events, response_id):
            return await self._forget(response_id, None)
        return None

    async def _forget(self, response_id: str, status: str | None) -> Verdict:
        await self.storage.active.remove(response_id)
        return Verdict(response_id, "finished", status)

    async def _give_up(self, record: ResponseRecord, found: str, count: int) -> Verdict:
        """The run kept dying: end it ``failed`` here and free its place on the chain."""
        response_id = record.response_id
        message = (f"The run's orchestration stopped ({found}) and was restarted {count} times without "
                   "finishing; it was abandoned.")
        await self.finalize(response_id, {"status": "failed", "error": {"code": "server_error",
                                                                         "message": message}})
        chain_id = record.doc.get("chain_id")
        if chain_id:
            await self.durable.signal_entity(CHAIN_LOCK_ENTITY, str(chain_id), "remove",
                                             {"response_id": response_id})
        await self.storage.active.remove(response_id)
        log.error("repair gave up", extra={"response_id": response_id, "found": found})
        metrics.REPAIRS.add(1, {"action": "gave_up", "found": found})
        return Verdict(response_id, "gave_up", found)
