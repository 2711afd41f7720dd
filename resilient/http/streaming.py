"""Tail a response's event log as SSE bytes: replay what is stored, then follow until the terminal event.

Both the live stream of ``POST /responses`` (stream=true) and ``GET …?stream=true&starting_after=N`` use
this, so a client only ever sees what a reconnect would see (R1) and a reconnect gets exactly the events
after N (R2).

Where events come from: the first read is always from storage. After that, blocks that a writer in this
process committed arrive through the worker's :class:`~resilient.storage.feed.CommittedFeed` (``feed``,
no storage round trip per frame); storage is read again whenever they do not continue exactly where this
reader stopped, and polled for writers in other processes. Polling backs off while the log is idle (each
poll is a billed storage call), snaps back to a short interval as soon as events flow, and is only a slow
safety net while a phase of this response streams, or is expected, in this process. Under load (the
process's load factor, up to 4×) these paces stretch, except the shortest: a run lasts longer then, and
fixed paces would read storage more often per event just when the process has the least CPU to spare.

Every read's frames are sent as one chunk (one socket write), not one write per frame.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from resilient.protocol.events import TERMINAL_EVENT_TYPES
from resilient.protocol.sse import KEEPALIVE
from resilient.storage.errors import NotFound, StorageUnavailable
from resilient.storage.feed import CommittedFeed
from resilient.storage.ports import CommittedBlock, EventLog, ReadCursor, ReadResult, StoredEvent

log = logging.getLogger("resilient.http")

POLL_MIN_SECONDS = 0.02
POLL_MAX_SECONDS = 0.5
# While a phase of the response streams in this process its blocks arrive through the feed; storage is then
# polled only this often, for a writer elsewhere (which would have fenced the local one off).
POLL_WHILE_LOCAL_SECONDS = 2.0
# Between activities of a run driven from this process: the next one probably runs here too (and then
# arrives through the feed at once), but may run on another instance; poll at the idle pace, not from
# POLL_MIN, and back off towards POLL_WHILE_LOCAL_SECONDS while nothing comes (under load the hop between
# two activities takes seconds, and a fixed pace would read storage more often per event just then).
POLL_WHILE_EXPECTED_SECONDS = POLL_MAX_SECONDS
# Events that storage had but the feed did not publish within REMOTE_GRACE_SECONDS (a writer in another
# process, not just a read that overtook the local writer's publish): poll normally this long.
REMOTE_WRITER_SECONDS = 5.0
REMOTE_GRACE_SECONDS = 1.0
STORAGE_OUTAGE_LIMIT_SECONDS = 120.0


class _Frames:
    """Frames collected for one write, and whether the terminal event is among them."""

    def __init__(self, last_sequence_number: int) -> None:
        self.last_seq = last_sequence_number
        self.chunks: list[bytes] = []
        self.terminal = False

    def add(self, events: tuple[StoredEvent, ...] | list[StoredEvent]) -> None:
        for event in events:
            if self.terminal or event.sequence_number <= self.last_seq:
                continue
            self.chunks.append(event.frame)
            self.last_seq = event.sequence_number
            if event.type in TERMINAL_EVENT_TYPES:
                self.terminal = True

    def take(self) -> bytes:
        data = b"".join(self.chunks)
        self.chunks = []
        return data


def _continues(block: CommittedBlock, cursor: ReadCursor) -> bool | None:
    """True: the block follows ``cursor`` (possibly overlapping it); None: nothing new; False: a gap."""
    if block.cursor.last_sequence_number <= cursor.last_sequence_number:
        return None
    return block.first_sequence_number <= cursor.last_sequence_number + 1


async def tail_events(
    events: EventLog,
    response_id: str,
    starting_after: int,
    *,
    feed: CommittedFeed,
    keepalive_seconds: float | None = 15.0,
    poll_min: float = POLL_MIN_SECONDS,
    poll_max: float = POLL_MAX_SECONDS,
    poll_while_local: float = POLL_WHILE_LOCAL_SECONDS,
    poll_while_expected: float = POLL_WHILE_EXPECTED_SECONDS,
    finished: Callable[[], Awaitable[bool]] | None = None,
    finished_check_seconds: float = 2.0,
    start: CommittedBlock | None = None,
    first_read: asyncio.Future[ReadResult] | None = None,
    widen: Callable[[], float] | None = None,
) -> AsyncIterator[bytes]:
    """Yield stored SSE frames with ``sequence_number > starting_after`` until the terminal one.

    ``finished`` (optional) tells whether the response reached a terminal status; it is asked only after
    ``finished_check_seconds`` without new events, so a client that asked for a ``starting_after`` past
    the terminal event gets an empty, closed stream instead of an endless one. ``start`` (optional) is a
    block this process just committed that begins right after ``starting_after`` (the stream of a create):
    the stream starts from it instead of reading storage. ``first_read`` (optional) is the first storage
    read, ``events.read_after(response_id, starting_after)``, already started by the caller. ``widen``
    (optional, the process's load factor) stretches every pace but the shortest: the safety-net polls while
    the run is written or expected here, the idle back-off's ceiling, the ``finished`` checks and the grace
    for a local writer's publish. Under load a run lasts longer, and fixed paces would read storage more
    often per event just then; events that flow are still followed at ``poll_min``.
    """
    try:
        with feed.subscribe(response_id) as local:
            cursor: ReadCursor | None = None
            frames = _Frames(starting_after)
            delay = poll_min  # the storage poll interval while no writer is known to be here (backs off)
            last_read = time.monotonic()  # the first read is from storage ...
            if start is not None and start.events and start.first_sequence_number <= starting_after + 1:
                frames.add(start.events)  # ... unless it is known already
                cursor = start.cursor
            remote_until = 0.0
            unpublished: tuple[int, float] | None = None  # (sequence number storage had, deadline for the feed)
            last_output = time.monotonic()
            outage_since: float | None = None
            next_finished_check = time.monotonic() + finished_check_seconds
            finished_seen = False
            was_here = False
            was_writing = False  # a phase of this response streamed here at the last look
            phase_ended_at = 0.0  # when the last phase written here ended (the gap between activities began)
            expected_delay = poll_while_expected  # the poll interval between activities expected here
            must_read = False  # a gap in the feed: read storage, whatever other readers here found
            storage_due = last_read + (0.0 if cursor is None else delay)
            while True:
                got_events = False
                empty_read = False
                deferred = False
                slack = 1.0 if widen is None else widen()
                shared = feed.last_storage_read(response_id) if cursor is not None and not must_read else None
                if shared is not None and cursor is not None and time.monotonic() >= storage_due and \
                        shared[0] > last_read and shared[1] <= cursor.last_sequence_number:
                    # Another reader here read storage since we did and found nothing we lack: that was our poll.
                    last_read = shared[0]
                    delay = min(poll_max * slack, delay * 2)
                elif cursor is not None and not must_read and time.monotonic() >= storage_due and \
                        feed.storage_read_since(response_id, last_read):
                    # Another reader here is reading the log right now (readers of one response poll on one
                    # schedule): wait for its result, which is our poll unless it finds something we lack.
                    deferred = True
                elif cursor is None or time.monotonic() >= storage_due:
                    must_read = False
                    with feed.storage_read(response_id):  # ends after the read is noted: waiters see it
                        try:
                            if cursor is None and first_read is not None:
                                result = await first_read
                                first_read = None
                            elif cursor is None:
                                result = await events.read_after(response_id, starting_after)
                            else:
                                result = await events.read_more(response_id, cursor)
                            outage_since = None
                        except NotFound:
                            return  # deleted while streaming: nothing more will come
                        except StorageUnavailable:
                            outage_since = outage_since or time.monotonic()
                            if time.monotonic() - outage_since > STORAGE_OUTAGE_LIMIT_SECONDS:
                                log.warning("storage unavailable too long; ending stream",
                                            extra={"response_id": response_id})
                                return  # the client reconnects with starting_after and misses nothing
                            result = None
                        last_read = time.monotonic()
                        if result is not None:
                            newest = result.events[-1].sequence_number if result.events else -1
                            if newest > feed.published_through(response_id) and unpublished is None:
                                unpublished = (newest, time.monotonic() + REMOTE_GRACE_SECONDS * slack)
                            cursor = result.cursor
                            got_events = bool(result.events)
                            empty_read = not got_events
                            frames.add(result.events)
                            feed.note_storage_read(response_id, last_read, cursor.last_sequence_number)
                    delay = poll_min if got_events else min(poll_max * slack, delay * 2)
                gap = False
                if cursor is not None:
                    blocks, gap = local.drain()
                    for block in blocks:
                        continues = _continues(block, cursor)
                        if continues is None:
                            continue
                        if not continues:
                            gap = True  # committed before we subscribed, or dropped: storage has it all
                            break
                        frames.add(block.events)
                        cursor = block.cursor
                        got_events = True
                if frames.chunks:
                    yield frames.take()
                    if frames.terminal:
                        return
                now = time.monotonic()
                if got_events:
                    last_output = now
                    next_finished_check = now + finished_check_seconds * slack
                if gap:
                    storage_due, must_read = now, True
                    continue
                # When to poll storage next: rarely while a phase streams here (its blocks come through the
                # feed), at a moderate pace while the run's next activity is expected here, else backing off.
                if unpublished is not None and feed.published_through(response_id) >= unpublished[0]:
                    unpublished = None  # the read only overtook a local writer's publish
                elif unpublished is not None and now >= unpublished[1]:
                    unpublished, remote_until = None, now + REMOTE_WRITER_SECONDS  # written by another process
                trust_here = now >= remote_until
                if got_events:
                    expected_delay = poll_while_expected
                poll_from = last_read
                writing = trust_here and feed.writing_here(response_id)
                if writing:
                    interval, here = poll_while_local * slack, True
                elif trust_here and feed.expected_here(response_id):
                    if was_writing:
                        phase_ended_at = now
                    if empty_read and was_here:  # backs off (in unwidened seconds) up to the local pace
                        expected_delay = min(max(poll_while_local, poll_while_expected), expected_delay * 2)
                    interval, here = max(expected_delay * slack, delay), True
                    # Between two activities the next one cannot have appended before the phase here ended
                    # (the orchestration schedules it only then), so the first poll of the gap is one interval
                    # after that end, not one after the last read (which, after a long phase, is at once).
                    poll_from = max(last_read, phase_ended_at)
                else:
                    expected_delay = poll_while_expected
                    if was_here or got_events:
                        delay = poll_min  # the run left this process, or events flow: they may come from anywhere
                    interval, here = delay, False
                was_here, was_writing = here, writing
                storage_due = poll_from + interval
                if got_events:
                    continue
                if empty_read and finished_seen:
                    return  # terminal status seen before this (empty) read: the terminal event was skipped
                if finished is not None and now >= next_finished_check and here:
                    next_finished_check = now + finished_check_seconds * slack  # a run here: it has not finished yet
                elif finished is not None and now >= next_finished_check:
                    next_finished_check = now + finished_check_seconds * slack
                    try:
                        finished_seen = await finished()
                    except (NotFound, StorageUnavailable):
                        finished_seen = False
                    if finished_seen:
                        storage_due = time.monotonic()
                        continue  # read once more: the terminal event may have landed just now
                if keepalive_seconds is not None and time.monotonic() - last_output >= keepalive_seconds:
                    yield KEEPALIVE
                    last_output = time.monotonic()
                # Deferred to another reader's read: its end wakes us (the bound is only a safety net).
                wait = poll_max * slack if deferred else storage_due - time.monotonic()
                if keepalive_seconds is not None:
                    wait = min(wait, last_output + keepalive_seconds - time.monotonic())
                if finished is not None:
                    wait = min(wait, next_finished_check - time.monotonic())
                if unpublished is not None:
                    wait = min(wait, unpublished[1] - time.monotonic())
                if wait > 0:
                    await local.wait(wait)  # a block committed in this process wakes us at once
    finally:
        if first_read is not None and not first_read.done():
            first_read.cancel()  # the client left before the first read was needed
