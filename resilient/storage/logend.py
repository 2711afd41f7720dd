"""Appending at the end of a run's event log, and telling whether the log has ended.

Beside :mod:`resilient.storage.cas` for the same reason: it is the retry loop of one kind of conditional
write (a fenced append at the end of the log), over the ports alone, shared by planning, concluding,
reading and repair."""

from __future__ import annotations

from collections.abc import Callable

from resilient.protocol import events as ev
from resilient.storage.cas import LOG_END_ATTEMPTS
from resilient.storage.errors import LostOwnership, NotFound
from resilient.storage.ports import EventLog, EventWriter, JsonDict


async def append_at_end(events: EventLog, response_id: str,
                        decide: Callable[[JsonDict | None], list[JsonDict]]) -> EventWriter:
    """Append ``decide(last event)`` at the end of the log and return the writer.

    Tries the writer kept from this run's previous activity in this process first (no storage read;
    its append is fenced, so a stale one fails without appending), then freshly opened ones. When
    ``decide`` returns nothing no append confirms the writer, so it may only do that for a condition
    that stays true once true (e.g. "the terminal event is already there").
    """
    writer = events.take_writer(response_id)
    for _ in range(LOG_END_ATTEMPTS):
        if writer is None:
            writer = await events.open_writer(response_id)
        batch = decide(writer.last_event)
        if not batch:
            return writer
        try:
            await writer.append(batch)
            return writer
        except LostOwnership:
            writer = None  # somebody appended since this writer's last append: look again
    raise LostOwnership(f"could not append to the event log of {response_id}")


async def log_ended(events: EventLog, response_id: str) -> bool:
    """True when the event log ends with a terminal event (or there is no log any more)."""
    try:
        writer = await events.open_writer(response_id)
    except NotFound:
        return True
    return (writer.last_event or {}).get("type") in ev.TERMINAL_EVENT_TYPES
