"""Is another attempt of this phase writing the log right now? Then wait for it instead of taking over.

A phase is normally attempted by one activity at a time, but the Durable backend can deliver the same
phase twice at once: it sends an orchestrator episode's activity messages *before* it checkpoints the
episode, so a host that dies in between re-runs the episode after its restart and schedules the phase
again while the first message reappears too; and a host too busy to renew a message's visibility in time
lets a second delivery start beside the first. Both deliveries would find the log ending inside an item.
Taking over at once is safe (appends are fenced by position, the loser stops), but the phase is then
streamed again by each attempt that takes over, and each takeover is one more recovery reset a client
sees.

The same holds for a log ending right after an item that has no checkpoint: the live attempt appends the
item's closing events and then writes its checkpoint, and a duplicate that read the checkpoints in between
would take the item for a crashed attempt's.

So an attempt that finds the log ending inside an item (or after one with no checkpoint) first asks when
the log was last written (the storage service's Last-Modified, read with the writer). A log quiet for
``quiet_s`` belongs to a dead attempt: take it over at once, which is every crash recovery (the
orchestrator's crash timer and the queue visibility timeout are longer). A log written more recently is
watched: if the phase gets checkpointed, this attempt is a duplicate and returns the checkpoint; once the
log has been quiet for ``quiet_s`` (its writer died, or paused longer than any live writer's append
window) this attempt takes over, fenced like any other. Watching costs two storage reads per ``poll_s`` and happens
only on that rare path.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from resilient.storage.ports import EventLog, EventWriter, ItemStore, JsonDict

log = logging.getLogger("resilient.engine")


@dataclass(frozen=True)
class Liveness:
    """``quiet_s``: how long a log must go unwritten before its writer counts as dead. It must exceed the
    longest pause of a live writer between two appends (the append window, widened up to 4× under load:
    0.8 s at the defaults) and stay under the shortest wait before a crashed phase is retried (the
    orchestrator's 3 s crash timer), so a crash recovery never waits here. ``poll_s``: how often a waiting
    attempt looks again."""

    quiet_s: float = 2.0
    poll_s: float = 0.5


def seconds_since(written_at: datetime | None) -> float | None:
    """Age of a Last-Modified stamp by this machine's clock; None if unknown. The stamp has 1 s resolution
    (it is rounded down, so the age errs long: at worst a takeover comes up to a second early)."""
    if written_at is None:
        return None
    return max(0.0, (datetime.now(UTC) - written_at).total_seconds())


async def behind_live_writer(
    events: EventLog, items: ItemStore, response_id: str, index: int, writer: EventWriter,
    liveness: Liveness, deadline: float | None = None,
) -> EventWriter | list[JsonDict]:
    """``writer`` (freshly opened, the log ending inside an item or after one with no checkpoint) if its
    writer is dead; else wait. Returns the checkpoints (at least ``index + 1`` of them) if the live attempt
    finishes the phase, or a freshly opened writer once the log has gone quiet. ``deadline`` (monotonic):
    stop waiting by then and take over, so waiting never runs this activity into the host's function
    timeout."""
    age = seconds_since(writer.written_at)
    if age is None or age >= liveness.quiet_s:
        return writer
    log.warning("another attempt is writing this phase; waiting for it",
                extra={"response_id": response_id, "phase": index, "log_age_s": round(age, 3)})
    quiet_since = time.monotonic() - age
    seen = writer.next_sequence_number
    while deadline is None or time.monotonic() < deadline:
        await asyncio.sleep(liveness.poll_s)
        checkpoints = await items.list_output_items(response_id)
        if len(checkpoints) > index:
            log.info("the other attempt checkpointed the phase",
                     extra={"response_id": response_id, "phase": index})
            return checkpoints
        writer = await events.open_writer(response_id)
        if writer.next_sequence_number != seen:
            seen = writer.next_sequence_number
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= liveness.quiet_s:
            break
    log.warning("the other attempt went quiet; taking the phase over",
                extra={"response_id": response_id, "phase": index})
    return writer
