"""Timer triggers, run on their schedule like the host's ``TimerListener`` does.

* the schedule is the binding's NCRONTAB expression (six fields, seconds first, UTC) or a TimeSpan
  (``"00:05:00"``: every five minutes);
* ``runOnStartup``: one invocation when the host starts;
* ``useMonitor`` (default on): the last and next occurrence are kept in the storage account
  (``azure-webjobs-hosts/timers/<host id>/Host.Functions.<name>/status``, ``ScheduleMonitor``); a host
  that starts after a ``Next`` that has passed runs the function once at once with ``IsPastDue`` true;
* the function gets ``{"Schedule": {"AdjustForDST": true}, "ScheduleStatus": {"Last", "Next",
  "LastUpdated"}, "IsPastDue"}``; a failed run is logged and not retried.

With several instances (``--instances N``) a timer runs on one host at a time, as the host's listener-level
singleton lock does: the timer listener is ``[Singleton(Mode = SingletonMode.Listener)]``
(azure-webjobs-sdk-extensions, ``TimerListener``), so the host starts it only while it holds a blob lease on
``azure-webjobs-hosts/locks/<host id>/Host.Functions.<name>.Listener`` (azure-webjobs-sdk,
``SingletonManager``, ``BlobLeaseDistributedLockManager``): taken for ``singleton.listenerLockPeriod``
(60 s), renewed at half of it; a host that did not get it tries again every
``singleton.listenerLockRecoveryPollingInterval`` (60 s). A host that stops cleanly releases it; one that
dies keeps it until the lease expires. One host alone takes no lock (nothing to contend with); so the
pause a real host sees after its own crash, until its dead lock expires, is not modelled there.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceNotFoundError
from azure.storage.blob.aio import BlobLeaseClient
from croniter import croniter  # type: ignore[import-untyped]

from .config import ConfigError, parse_timespan, resolve_setting_names
from .durable.store import Storage
from .failures import Answered, Outcome

HOSTS_CONTAINER = "azure-webjobs-hosts"
LISTENER_LOCK_PERIOD = timedelta(minutes=1)  # SingletonOptions.ListenerLockPeriod
LISTENER_LOCK_RECOVERY = timedelta(minutes=1)  # SingletonOptions.ListenerLockRecoveryPollingInterval


def next_occurrence(schedule: str, after: datetime) -> datetime:
    """The first occurrence strictly after ``after`` (UTC)."""
    text = schedule.strip()
    if ":" in text and " " not in text:  # a TimeSpan schedule
        interval = parse_timespan(text, "schedule")
        if interval <= timedelta(0):
            raise ConfigError(f"timer schedule {schedule!r} must be positive")
        return after + interval
    if not croniter.is_valid(text, second_at_beginning=True):
        raise ConfigError(f"timer schedule {schedule!r} is not a valid NCRONTAB expression")
    found: datetime = croniter(text, after, second_at_beginning=True).get_next(datetime)
    return found


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


class TimerScheduler:
    """One loop per timer-triggered function of the app."""

    def __init__(self, storage: Storage, host_id: str, log: Callable[[str], None],
                 invoke: Callable[[dict[str, Any], dict[str, Any]], Awaitable[Outcome]], *,
                 singleton: bool = False, lock_period: timedelta = LISTENER_LOCK_PERIOD,
                 lock_recovery: timedelta = LISTENER_LOCK_RECOVERY) -> None:
        self.singleton = singleton
        self.lock_period = lock_period
        self.lock_recovery = lock_recovery
        self.locks_held: set[str] = set()
        self._leases: dict[str, BlobLeaseClient] = {}
        self.storage = storage
        self.host_id = host_id
        self.log = log
        self.invoke = invoke
        self.container = storage.blobs.get_container_client(HOSTS_CONTAINER)
        self._blobs: dict[str, Any] = {}  # blob clients by name, each made once
        self.runs: dict[str, dict[str, Any]] = {}
        self._tasks: list[asyncio.Task[None]] = []

    def _blob(self, name: str) -> Any:
        blob = self._blobs.get(name)
        if blob is None:
            blob = self._blobs[name] = self.container.get_blob_client(name)
        return blob

    def _status_blob(self, function: str) -> Any:
        return self._blob(f"timers/{self.host_id}/Host.Functions.{function}/status")

    async def _read_status(self, function: str) -> dict[str, Any] | None:
        self.storage.calls.add("blob.download")
        try:
            downloaded = await self._status_blob(function).download_blob()
        except ResourceNotFoundError:
            return None
        loaded: dict[str, Any] = json.loads(await downloaded.readall())
        return loaded

    async def _write_status(self, function: str, last: datetime, following: datetime) -> dict[str, Any]:
        status = {"Last": _iso(last), "Next": _iso(following), "LastUpdated": _iso(datetime.now(UTC))}
        self.storage.calls.add("blob.upload")
        await self._status_blob(function).upload_blob(json.dumps(status).encode(), overwrite=True)
        return status

    async def start(self, functions: list[dict[str, Any]]) -> None:
        timers = [f for f in functions if f.get("trigger") == "timerTrigger"]
        if not timers:
            return
        self.storage.calls.add("blob.create")
        with contextlib.suppress(ResourceExistsError):
            await self.container.create_container()
        for meta in timers:
            # The schedule may name app settings (``%Name%``), resolved like every binding expression.
            meta = {**meta, "schedule": resolve_setting_names(str(meta.get("schedule")), os.environ)}
            try:
                next_occurrence(str(meta.get("schedule")), datetime.now(UTC))
            except ConfigError as error:
                self.log(f"timer function '{meta['name']}' is in error: {error}")
                continue
            self.runs[meta["name"]] = {"schedule": meta.get("schedule"), "invocations": 0, "past_due": 0,
                                       "last_outcome": None}
            loop = self._locked(meta) if self.singleton else self._loop(meta)
            self._tasks.append(asyncio.create_task(loop))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for name, lease in list(self._leases.items()):  # a clean stop gives the listener locks back
            with contextlib.suppress(Exception):
                self.storage.calls.add("blob.lease")
                await lease.release()
            self._leases.pop(name, None)
            self.locks_held.discard(name)

    def _lock_blob(self, function: str) -> Any:
        return self._blob(f"locks/{self.host_id}/Host.Functions.{function}.Listener")

    async def _try_lock(self, function: str) -> BlobLeaseClient | None:
        blob = self._lock_blob(function)
        self.storage.calls.add("blob.upload")
        with contextlib.suppress(ResourceExistsError, HttpResponseError):
            await blob.upload_blob(b"", overwrite=False)
        lease = BlobLeaseClient(blob, lease_id=str(uuid.uuid4()))
        self.storage.calls.add("blob.lease")
        try:
            await lease.acquire(lease_duration=int(self.lock_period.total_seconds()))
        except HttpResponseError:
            return None  # another host holds it
        return lease

    async def _locked(self, meta: dict[str, Any]) -> None:
        """The listener runs only while this host holds its singleton lock (see the module's docstring)."""
        name = meta["name"]
        while True:
            try:
                lease = await self._try_lock(name)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                self.log(f"timer '{name}': singleton lock attempt failed ({type(error).__name__})")
                lease = None
            if lease is None:
                await asyncio.sleep(self.lock_recovery.total_seconds())
                continue
            self._leases[name] = lease
            self.locks_held.add(name)
            self.log(f"timer '{name}': singleton listener lock acquired; the timer runs on this host")
            listener = asyncio.create_task(self._loop(meta))
            try:
                while True:
                    await asyncio.sleep(self.lock_period.total_seconds() / 2)
                    self.storage.calls.add("blob.lease")
                    try:
                        await lease.renew()
                    except HttpResponseError:
                        self.log(f"timer '{name}': singleton listener lock lost; the timer stops on this host")
                        break
            finally:
                listener.cancel()
                await asyncio.gather(listener, return_exceptions=True)
            self._leases.pop(name, None)
            self.locks_held.discard(name)

    async def _fire(self, meta: dict[str, Any], status: dict[str, Any] | None, past_due: bool) -> None:
        name = meta["name"]
        timer = {"Schedule": {"AdjustForDST": True}, "ScheduleStatus": status, "IsPastDue": past_due}
        outcome = await self.invoke(meta, timer)
        run = self.runs[name]
        run["invocations"] += 1
        run["past_due"] += int(past_due)
        succeeded = isinstance(outcome, Answered) and outcome.body.get("ok")
        run["last_outcome"] = "Succeeded" if succeeded else type(outcome).__name__ if not isinstance(
            outcome, Answered) else f"Failed: {outcome.body.get('error')}"
        self.log(f"Executed 'Functions.{name}' ({'Succeeded' if succeeded else 'Failed'}; timer, "
                 f"IsPastDue={past_due})")

    async def _loop(self, meta: dict[str, Any]) -> None:
        name, schedule = meta["name"], str(meta["schedule"])
        use_monitor = bool(meta.get("use_monitor", True))
        status: dict[str, Any] | None = None
        due: datetime | None = None
        while due is None:  # start-up: past-due check, runOnStartup, first status (retried if storage is down)
            try:
                now = datetime.now(UTC)
                status = await self._read_status(name) if use_monitor else None
                past_due = bool(status and _parse(status["Next"]) < now)
                if meta.get("run_on_startup") or past_due:
                    if past_due:
                        self.log(f"timer '{name}' is past due (next run was {status and status['Next']}): running now")
                    await self._fire(meta, status, past_due)
                due = next_occurrence(schedule, datetime.now(UTC))
                if use_monitor:
                    status = await self._write_status(name, _parse(status["Last"]) if status else now, due)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                self.log(f"timer '{name}': start-up failed ({type(error).__name__}); retrying in 5 s")
                due = None
                await asyncio.sleep(5.0)
        while True:
            await asyncio.sleep(max(0.0, (due - datetime.now(UTC)).total_seconds()))
            try:
                await self._fire(meta, status, False)
                following = next_occurrence(schedule, max(due, datetime.now(UTC)))
                if use_monitor:
                    status = await self._write_status(name, due, following)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                self.log(f"timer '{name}': run bookkeeping failed ({type(error).__name__})")
                following = next_occurrence(schedule, datetime.now(UTC))
            due = following


def _parse(text: Any) -> datetime:
    return datetime.fromisoformat(str(text).replace("Z", "+00:00"))
