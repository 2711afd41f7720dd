"""Timer triggers, run on their schedule like the host's ``TimerListener`` does.

* the schedule is the binding's NCRONTAB expression (six fields, seconds first, UTC) or a TimeSpan
  (``"00:05:00"``: every five minutes);
* ``runOnStartup``: one invocation when the host starts;
* ``useMonitor`` (default on): the last and next occurrence are kept in the storage account
  (``azure-webjobs-hosts/timers/<host id>/Host.Functions.<name>/status``, ``ScheduleMonitor``); a host
  that starts after a ``Next`` that has passed runs the function once at once with ``IsPastDue`` true;
* the function gets ``{"Schedule": {"AdjustForDST": true}, "ScheduleStatus": {"Last", "Next",
  "LastUpdated"}, "IsPastDue"}``; a failed run is logged and not retried.

Not modelled: the singleton lock that keeps two hosts of one app from both running a timer (the double is
one host).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError
from croniter import croniter  # type: ignore[import-untyped]

from .config import ConfigError, parse_timespan, resolve_setting_names
from .durable.store import Storage
from .failures import Answered, Outcome

HOSTS_CONTAINER = "azure-webjobs-hosts"


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
                 invoke: Callable[[dict[str, Any], dict[str, Any]], Awaitable[Outcome]]) -> None:
        self.storage = storage
        self.host_id = host_id
        self.log = log
        self.invoke = invoke
        self.container = storage.blobs.get_container_client(HOSTS_CONTAINER)
        self.runs: dict[str, dict[str, Any]] = {}
        self._tasks: list[asyncio.Task[None]] = []

    def _status_blob(self, function: str) -> Any:
        return self.container.get_blob_client(f"timers/{self.host_id}/Host.Functions.{function}/status")

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
            self._tasks.append(asyncio.create_task(self._loop(meta)))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

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
