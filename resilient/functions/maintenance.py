"""Maintenance bindings: the timer-triggered retention clean-up and repair sweep."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime

import azure.functions as func

from resilient.engine.heal import unstored
from resilient.engine.heal.retention import purge_expired
from resilient.functions.client import repairer
from resilient.functions.durable_bindings import DurableBlueprint, DurableClient
from resilient.functions.history import ClientHistory
from resilient.functions.runtime import ProcessRuntime

log = logging.getLogger("resilient.retention")

CLEANUP_SCHEDULE = "0 */15 * * * *"  # every 15 minutes (NCRONTAB with seconds)
REPAIR_SCHEDULE = "30 * * * * *"  # every minute, at second 30


def maintenance_blueprint(process: ProcessRuntime) -> DurableBlueprint:
    bp = DurableBlueprint()

    @bp.timer_trigger(schedule=CLEANUP_SCHEDULE, arg_name="timer", run_on_startup=False, use_monitor=True)
    @bp.durable_client_input(client_name="client")
    async def cleanup_expired(timer: func.TimerRequest, client: str) -> None:
        engine = await process.engine()
        durable = DurableClient(client)

        async def purge_history(instance_id: str) -> None:
            await durable.get().purge_instance_history(instance_id)

        purged = await purge_expired(engine.storage, retention_minutes=engine.settings.replay_retention_minutes,
                                     now_epoch_seconds=time.time(), purge_history=purge_history)
        # store=false runs whose own clean-up a crash interrupted (their history, or data and history).
        forgotten = await unstored.sweep(engine.storage, ClientHistory(durable), now=datetime.now(UTC),
                                         older_than_seconds=engine.settings.unstored_grace_seconds + 600)
        # A line only when it removed something: a timer that logs every run buries what matters.
        log.log(logging.INFO if purged or forgotten else logging.DEBUG, "cleanup_expired ran",
                extra={"purged": len(purged), "forgotten": len(forgotten), "past_due": timer.past_due})

    @bp.timer_trigger(schedule=REPAIR_SCHEDULE, arg_name="timer", run_on_startup=False, use_monitor=True)
    @bp.durable_client_input(client_name="client")
    async def repair_stuck_runs(timer: func.TimerRequest, client: str) -> None:
        """Resume runs whose orchestration died (Failed, Terminated, missing) while their row is unfinished.
        Runs on one instance at a time (timer triggers hold a singleton lock)."""
        verdicts = await repairer(DurableClient(client), await process.engine()).sweep()
        repaired = sum(v.action in ("restarted", "gave_up") for v in verdicts)
        # Every minute forever: a line only when it repaired something (the repairer logs each repair).
        log.log(logging.INFO if repaired else logging.DEBUG, "repair_stuck_runs ran",
                extra={"checked": len(verdicts), "repaired": repaired, "past_due": timer.past_due})

    return bp
