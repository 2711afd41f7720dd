"""Tail a response's event log as SSE bytes: replay what is stored, then follow until the terminal event.

Both the live stream of ``POST /responses`` (stream=true) and ``GET …?stream=true&starting_after=N`` use
this, so a client only ever sees what a reconnect would see (R1) and a reconnect gets exactly the events
after N (R2). Polling backs off while the log is idle (each poll is a billed storage call) and snaps
back to a short interval as soon as events flow.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from resilient.protocol.events import TERMINAL_EVENT_TYPES
from resilient.protocol.sse import KEEPALIVE
from resilient.storage.errors import NotFound, StorageUnavailable
from resilient.storage.ports import EventLog, ReadCursor, ReadResult
from resilient.storage.signals import APPENDS

log = logging.getLogger("resilient.http")

POLL_MIN_SECONDS = 0.02
POLL_MAX_SECONDS = 0.5
STORAGE_OUTAGE_LIMIT_SECONDS = 120.0


async def tail_events(
    events: EventLog,
    response_id: str,
    starting_after: int,
    *,
    keepalive_seconds: float | None = 15.0,
    poll_min: float = POLL_MIN_SECONDS,
    poll_max: float = POLL_MAX_SECONDS,
    finished: Callable[[], Awaitable[bool]] | None = None,
    finished_check_seconds: float = 2.0,
) -> AsyncIterator[bytes]:
    """Yield stored SSE frames with ``sequence_number > starting_after`` until the terminal one.

    ``finished`` (optional) tells whether the response reached a terminal status; it is asked only after
    ``finished_check_seconds`` without new events, so a client that asked for a ``starting_after`` past
    the terminal event gets an empty, closed stream instead of an endless one.
    """
    result: ReadResult | None = None
    cursor: ReadCursor | None = None
    delay = poll_min
    last_output = time.monotonic()
    outage_since: float | None = None
    next_finished_check = time.monotonic() + finished_check_seconds
    finished_seen = False
    while True:
        try:
            if cursor is None:
                result = await events.read_after(response_id, starting_after)
            else:
                result = await events.read_more(response_id, cursor)
            outage_since = None
        except NotFound:
            return  # deleted while streaming: nothing more will come
        except StorageUnavailable:
            outage_since = outage_since or time.monotonic()
            if time.monotonic() - outage_since > STORAGE_OUTAGE_LIMIT_SECONDS:
                log.warning("storage unavailable too long; ending stream", extra={"response_id": response_id})
                return  # the client reconnects with starting_after and misses nothing
            result = None
        if result is not None:
            cursor = result.cursor
            for event in result.events:
                yield event.frame
                if event.type in TERMINAL_EVENT_TYPES:
                    return
            if result.events:
                delay = poll_min
                last_output = time.monotonic()
                next_finished_check = last_output + finished_check_seconds
                continue
            if finished_seen:
                return  # terminal status seen before this (empty) read: the terminal event was skipped
            if finished is not None and time.monotonic() >= next_finished_check:
                next_finished_check = time.monotonic() + finished_check_seconds
                try:
                    finished_seen = await finished()
                except (NotFound, StorageUnavailable):
                    finished_seen = False
                if finished_seen:
                    continue  # read once more: the terminal event may have landed just now
        if keepalive_seconds is not None and time.monotonic() - last_output >= keepalive_seconds:
            yield KEEPALIVE
            last_output = time.monotonic()
        await APPENDS.wait(response_id, delay)  # an append in this process wakes us at once
        delay = min(poll_max, delay * 2)
