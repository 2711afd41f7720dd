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
from dataclasses import dataclass, field

from resilient.http.paces import STREAMED, Paces
from resilient.protocol.events import TERMINAL_EVENT_TYPES
from resilient.protocol.sse import KEEPALIVE
from resilient.storage.errors import NotFound, StorageUnavailable
from resilient.storage.feed import CommittedFeed, Subscription
from resilient.storage.ports import CommittedBlock, EventLog, ReadCursor, ReadResult, StoredEvent

log = logging.getLogger("resilient.http")

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
    paces: Paces = STREAMED,
    finished: Callable[[], Awaitable[bool]] | None = None,
    start: CommittedBlock | None = None,
    first_read: asyncio.Future[ReadResult] | None = None,
    widen: Callable[[], float] | None = None,
) -> AsyncIterator[bytes]:
    """Yield stored SSE frames with ``sequence_number > starting_after`` until the terminal one.

    ``finished`` (optional) tells whether the response reached a terminal status (see :class:`Paces` for
    when it is asked). ``start`` (optional) is a block this process just committed that begins right after
    ``starting_after`` (the stream of a create): the stream starts from it instead of reading storage.
    ``first_read`` (optional) is the first storage read, ``events.read_first(response_id, starting_after)``,
    already started by the caller. ``widen`` (optional, the process's load factor) stretches the paces.
    """
    try:
        with feed.subscribe(response_id) as local:
            tail = _Tail(events, response_id, starting_after, feed, local, paces, finished, first_read, widen)
            if start is not None and start.events and start.first_sequence_number <= starting_after + 1:
                tail.frames.add(start.events)  # the first read is from storage, unless it is known already
                tail.cursor = start.cursor
                tail.storage_due = tail.last_read + tail.delay
            async for chunk in tail.follow():
                yield chunk
    finally:
        if first_read is not None and not first_read.done():
            first_read.cancel()  # the client left before the first read was needed


class _StreamOver(Exception):
    """Nothing more will come from storage: the log was deleted, or storage stayed unavailable too long."""


@dataclass
class _Round:
    """What one round of the tail's loop found."""

    got_events: bool = False
    empty_read: bool = False  # a storage read that found nothing new
    more: bool = False  # the read stopped before the end of the log: read on at once
    deferred: bool = False  # another reader here was reading storage: its result stands for ours


@dataclass
class _Tail:
    """One tail's state between rounds: where it stands in the log, and when it reads storage next.

    Each round reads storage when due (or takes another reader's read here as its own), drains the blocks
    this process committed, sends what it collected, then schedules the next poll from where the run is
    being written: rarely while a phase streams here, at a moderate pace while the run's next activity is
    expected here, else backing off. Quiet rounds ask ``finished`` now and then and send keep-alives."""

    events: EventLog
    response_id: str
    starting_after: int
    feed: CommittedFeed
    local: Subscription  # the blocks this process commits to the response's log
    paces: Paces
    finished: Callable[[], Awaitable[bool]] | None
    first_read: asyncio.Future[ReadResult] | None
    widen: Callable[[], float] | None
    cursor: ReadCursor | None = None
    frames: _Frames = field(init=False)
    delay: float = field(init=False)  # the storage poll interval while no writer is known to be here
    last_read: float = field(default_factory=time.monotonic)
    storage_due: float = field(init=False)
    remote_until: float = 0.0  # until then a writer elsewhere is assumed: the marks here are not trusted
    unpublished: tuple[int, float] | None = None  # (sequence number storage had, deadline for the feed)
    last_output: float = field(default_factory=time.monotonic)
    outage_since: float | None = None
    next_finished_check: float = field(init=False)
    finished_seen: bool = False
    was_here: bool = False
    was_writing: bool = False  # a phase of this response streamed here at the last look
    phase_ended_at: float = 0.0  # when the last phase written here ended (the gap between activities began)
    expected_delay: float = field(init=False)  # the poll interval between activities expected here
    must_read: bool = False  # a gap in the feed: read storage, whatever other readers here found
    slack: float = 1.0

    def __post_init__(self) -> None:
        self.frames = _Frames(self.starting_after)
        self.delay = self.paces.poll_min
        self.storage_due = self.last_read
        self.next_finished_check = time.monotonic() + self.paces.finished_check_seconds
        self.expected_delay = self.paces.poll_while_expected

    async def follow(self) -> AsyncIterator[bytes]:
        """The tail's rounds, until the terminal event is sent or nothing more can come."""
        while True:
            found = _Round()
            self.slack = 1.0 if self.widen is None else self.widen()
            try:
                await self._read_storage_when_due(found)
            except _StreamOver:
                return
            gap = self._drain_feed(found)
            if self.frames.chunks:
                yield self.frames.take()
                if self.frames.terminal:
                    return
            now = time.monotonic()
            if found.got_events:
                self.last_output = now
                self.next_finished_check = now + self.paces.finished_check_seconds * self.slack
            if gap or found.more:
                self.storage_due, self.must_read = now, True
                continue
            here = self._schedule_next_poll(now, found)
            if found.got_events:
                continue
            if found.empty_read and self.finished_seen:
                return  # terminal status seen before this (empty) read: the terminal event was skipped
            if await self._finished_now(now, here):
                self.storage_due = time.monotonic()
                continue  # read once more: the terminal event may have landed just now
            if self._keepalive_due():
                yield KEEPALIVE
                self.last_output = time.monotonic()
            await self._wait(found.deferred)

    async def _read_storage_when_due(self, found: _Round) -> None:
        """Read storage if this tail's poll is due, unless another reader here just read (or is reading) it."""
        cursor, rid = self.cursor, self.response_id
        due = time.monotonic() >= self.storage_due
        shared = self.feed.last_storage_read(rid) if cursor is not None and not self.must_read else None
        if shared is not None and cursor is not None and due and \
                shared[0] > self.last_read and shared[1] <= cursor.last_sequence_number:
            # Another reader here read storage since we did and found nothing we lack: that was our poll.
            self.last_read = shared[0]
            self.delay = min(self.paces.poll_max * self.slack, self.delay * 2)
        elif cursor is not None and not self.must_read and due and self.feed.storage_read_since(rid, self.last_read):
            # Another reader here is reading the log right now (readers of one response poll on one
            # schedule): wait for its result, which is our poll unless it finds something we lack.
            found.deferred = True
        elif cursor is None or due:
            self.must_read = False
            with self.feed.storage_read(rid):  # ends after the read is noted: waiters see it
                result = await self._read()
                self.last_read = time.monotonic()
                if result is not None:
                    self._take(result, found)
            self.delay = self.paces.poll_min if found.got_events else \
                min(self.paces.poll_max * self.slack, self.delay * 2)

    async def _read(self) -> ReadResult | None:
        """One storage read after what this tail has; None while storage is unavailable (for a while)."""
        try:
            if self.cursor is None and self.first_read is not None:
                first, self.first_read = self.first_read, None
                result = await first
            elif self.cursor is None:
                result = await self.events.read_first(self.response_id, self.starting_after)
            else:
                result = await self.events.read_more(self.response_id, self.cursor)
        except NotFound:
            raise _StreamOver from None  # deleted while streaming: nothing more will come
        except StorageUnavailable:
            self.outage_since = self.outage_since or time.monotonic()
            if time.monotonic() - self.outage_since > STORAGE_OUTAGE_LIMIT_SECONDS:
                log.warning("storage unavailable too long; ending stream", extra={"response_id": self.response_id})
                raise _StreamOver from None  # the client reconnects with starting_after and misses nothing
            return None
        self.outage_since = None
        return result

    def _take(self, result: ReadResult, found: _Round) -> None:
        """Collect a storage read's events, and note whether the feed here had published them yet."""
        newest = result.events[-1].sequence_number if result.events else -1
        if newest > self.feed.published_through(self.response_id) and self.unpublished is None:
            self.unpublished = (newest, time.monotonic() + REMOTE_GRACE_SECONDS * self.slack)
        self.cursor = result.cursor
        found.got_events = bool(result.events)
        found.empty_read = not found.got_events
        found.more = result.more
        self.frames.add(result.events)
        self.feed.note_storage_read(self.response_id, self.last_read, self.cursor.last_sequence_number)

    def _drain_feed(self, found: _Round) -> bool:
        """Collect the blocks this process committed since the last round; True at a gap (storage has it all)."""
        if self.cursor is None:
            return False
        blocks, gap = self.local.drain()
        for block in blocks:
            continues = _continues(block, self.cursor)
            if continues is None:
                continue
            if not continues:
                return True  # committed before we subscribed, or dropped
            self.frames.add(block.events)
            self.cursor = block.cursor
            found.got_events = True
        return bool(gap)

    def _schedule_next_poll(self, now: float, found: _Round) -> bool:
        """When to poll storage next, from where the run is being written; True while it is written (or its
        next activity expected) here."""
        rid, paces, slack = self.response_id, self.paces, self.slack
        if self.unpublished is not None and self.feed.published_through(rid) >= self.unpublished[0]:
            self.unpublished = None  # the read only overtook a local writer's publish
        elif self.unpublished is not None and now >= self.unpublished[1]:
            self.unpublished, self.remote_until = None, now + REMOTE_WRITER_SECONDS  # written by another process
        trust_here = now >= self.remote_until
        if found.got_events:
            self.expected_delay = paces.poll_while_expected
        poll_from = self.last_read
        writing = trust_here and self.feed.writing_here(rid)
        if writing:
            interval, here = paces.poll_while_local * slack, True
        elif trust_here and self.feed.expected_here(rid):
            if self.was_writing:
                self.phase_ended_at = now
            if found.empty_read and self.was_here:  # backs off (in unwidened seconds) up to the local pace
                self.expected_delay = min(max(paces.poll_while_local, paces.poll_while_expected),
                                          self.expected_delay * 2)
            interval, here = max(self.expected_delay * slack, self.delay), True
            # Between two activities the next one cannot have appended before the phase here ended (the
            # orchestration schedules it only then), so the first poll of the gap is one interval after that
            # end, not one after the last read (which, after a long phase, is at once).
            poll_from = max(self.last_read, self.phase_ended_at)
        else:
            self.expected_delay = paces.poll_while_expected
            if self.was_here or found.got_events:
                self.delay = paces.poll_min  # the run left this process, or events flow: they may come from anywhere
            interval, here = self.delay, False
        self.was_here, self.was_writing = here, writing
        self.storage_due = poll_from + interval
        return here

    async def _finished_now(self, now: float, here: bool) -> bool:
        """Whether the run reached a terminal status, asked when its check is due and no phase runs here."""
        if self.finished is None or now < self.next_finished_check:
            return False
        self.next_finished_check = now + self.paces.finished_check_seconds * self.slack
        if here:
            return False  # a run here: it has not finished yet
        try:
            self.finished_seen = await self.finished()
        except (NotFound, StorageUnavailable):
            self.finished_seen = False
        return self.finished_seen

    def _keepalive_due(self) -> bool:
        keepalive = self.paces.keepalive_seconds
        return keepalive is not None and time.monotonic() - self.last_output >= keepalive

    async def _wait(self, deferred: bool) -> None:
        """Sleep until the next thing due; a block committed in this process wakes the tail at once."""
        # Deferred to another reader's read: its end wakes us (the bound is only a safety net).
        wait = self.paces.poll_max * self.slack if deferred else self.storage_due - time.monotonic()
        if self.paces.keepalive_seconds is not None:
            wait = min(wait, self.last_output + self.paces.keepalive_seconds - time.monotonic())
        if self.finished is not None:
            wait = min(wait, self.next_finished_check - time.monotonic())
        if self.unpublished is not None:
            wait = min(wait, self.unpublished[1] - time.monotonic())
        if wait > 0:
            await self.local.wait(wait)
