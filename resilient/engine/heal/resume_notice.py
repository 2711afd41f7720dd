"""One log line when a worker starts and finds unfinished runs: how many, and by when they resume.

Why: after a restart (``scripts/run.sh`` again, a deployment, a crash) an operator sees responses stuck at
``in_progress`` and wonders whether anything will pick them up. Nothing needs doing: orchestrations that
are still alive continue as soon as the host takes their queues, and the repair sweep
(:mod:`resilient.engine.heal.repair`, every minute at second 30) restarts those whose orchestration died once
they are old enough. This line says so, once per worker process, and only when there is something to say.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from resilient.storage.ports import ActiveEntry

if TYPE_CHECKING:
    from resilient.engine.heal.unstored import Detached
    from resilient.settings import Settings
    from resilient.storage.factory import Storage

log = logging.getLogger("resilient.repair")

SWEEP_SECOND = 30  # the repair timer's schedule, "30 * * * * *" (resilient/functions/maintenance.py)
SCAN_LIMIT = 5000  # as many as one sweep lists


def _clock(epoch_seconds: float) -> str:
    return datetime.fromtimestamp(epoch_seconds, UTC).strftime("%H:%M:%S UTC")


def next_sweep(at_or_after: float) -> float:
    """The first repair sweep at or after ``at_or_after`` (epoch seconds)."""
    minute = math.floor(at_or_after / 60) * 60
    sweep = minute + SWEEP_SECOND
    return sweep if sweep >= at_or_after else sweep + 60


def notice(entries: Sequence[ActiveEntry], now: float, repair_grace_seconds: float) -> str | None:
    """The line to log for ``entries`` (the unfinished runs), or None when there are none."""
    if not entries:
        return None
    oldest = min(entry.since for entry in entries)
    newest = max(entry.since for entry in entries)
    latest = next_sweep(max(now, newest + repair_grace_seconds))
    runs = "run" if len(entries) == 1 else "runs"
    return (f"{len(entries)} unfinished {runs} (oldest created {_clock(oldest)}) will resume: live orchestrations "
            f"continue as soon as the host takes their queues (normally within seconds); one whose orchestration "
            f"died is restarted by the repair sweep by about {_clock(latest)}, or at once when a client reads it")


async def announce(storage: Storage, settings: Settings, now: float) -> str | None:
    """List the unfinished runs and log the notice (info); return it."""
    line = notice(await storage.active.list(SCAN_LIMIT), now, settings.repair_grace_seconds)
    if line is not None:
        log.info(line)
    return line


def announce_detached(storage: Storage, settings: Settings, now: float, detached: Detached) -> None:
    """Detached: start-up must not wait for it, and a failure only costs the line. Called once per
    process, by the first worker's wiring (:meth:`resilient.functions.runtime.ProcessRuntime.worker`)."""

    async def run() -> None:
        try:
            await announce(storage, settings, now)
        except Exception:
            log.debug("could not list unfinished runs at start-up", exc_info=True)

    detached.start(run(), "start-up notice")
