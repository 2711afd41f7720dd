"""In-process feed of committed events: a reader in the writer's process gets them without a storage read.

Why: the HTTP stream of a run and the activity that writes its log usually live in the same worker
process. Reading every append back from storage costs each reader one round trip (and about a
millisecond of CPU in the storage SDK) per poll. So a writer publishes each block *after* storage accepted
it, together with the log position right after it, and a reader in the same process consumes the block
when it continues exactly where the reader stopped. Anything else (a gap, a reader that fell behind, a
writer in another process) is read from storage, which stays the source of truth for other instances,
for replay and after restarts. Nothing is ever published that is not already in the blob (R1).

The feed also knows whether a phase of a run is streaming in this process right now: while one is, a
reader's storage polls are only a safety net (any other writer would fence the local one off). Between
the activities of a run driven from here it knows that the next one is *expected* here: likely on one
instance, a coin toss on many (the Durable runtime hands activities to any instance), so readers then
poll at a moderate pace instead of backing off from the shortest interval.

Thread-safe: a publisher on another thread or event loop hands blocks over with ``call_soon_threadsafe``;
on the subscriber's own loop (the common case) they are handed over directly, without waking the loop
through its self-pipe.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Iterator
from contextlib import contextmanager

from resilient.storage.ports import CommittedBlock
from resilient.storage.recent import RecentLogs

__all__ = ["CommittedBlock", "CommittedFeed", "Subscription"]

# A subscriber that does not keep up (a slow client) holds at most this much; past it the pending blocks
# are dropped and the reader catches up from storage instead (memory stays bounded per reader).
MAX_PENDING_BYTES = 4 * 1024 * 1024
# How many responses the feed remembers the last published sequence number of (a few dozen bytes each).
PUBLISHED_MEMORY = 4096


class Subscription:
    """One reader's inbox for one response. Use it from the event loop that created it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, max_pending_bytes: int) -> None:
        self.loop = loop
        self._max_bytes = max_pending_bytes
        self._pending: deque[CommittedBlock] = deque()
        self._bytes = 0
        self._overflowed = False
        self._wake = asyncio.Event()

    def _push(self, block: CommittedBlock | None) -> None:
        """Runs on the subscriber's loop. ``None`` only wakes the reader (a writer started or stopped)."""
        if block is not None:
            self._pending.append(block)
            self._bytes += block.size
            if self._bytes > self._max_bytes:
                self._pending.clear()
                self._bytes = 0
                self._overflowed = True
        self._wake.set()

    def drain(self) -> tuple[list[CommittedBlock], bool]:
        """``(blocks received since the last drain, whether some were dropped)``."""
        blocks = list(self._pending)
        overflowed = self._overflowed
        self._pending.clear()
        self._bytes = 0
        self._overflowed = False
        self._wake.clear()
        return blocks, overflowed

    async def wait(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds or until something is published (True) for this response."""
        if self._wake.is_set():
            return True
        try:
            await asyncio.wait_for(self._wake.wait(), timeout)
            return True
        except TimeoutError:
            return False


class CommittedFeed:
    def __init__(self, max_pending_bytes: int = MAX_PENDING_BYTES) -> None:
        self._subscribers: dict[str, set[Subscription]] = {}
        self._active_writers: dict[str, int] = {}
        self._expected: dict[str, float] = {}  # response id -> monotonic time until which a run is expected
        self._published: OrderedDict[str, int] = OrderedDict()  # response id -> last sequence number published
        self._checked: dict[str, tuple[float, int]] = {}  # response id -> (when, through which seq) storage was read
        self._reading: dict[str, list[float]] = {}  # response id -> start times of its readers' reads in flight
        self._recent = RecentLogs()  # logs committed here from their first event, for reconnects
        self._lock = threading.Lock()
        self._max_pending_bytes = max_pending_bytes

    @contextmanager
    def subscribe(self, response_id: str) -> Iterator[Subscription]:
        """Receive every block committed to ``response_id``'s log in this process while inside the block.

        Subscribe *before* reading storage: a block committed during the read is then not missed (it
        may overlap the read; readers skip sequence numbers they have).
        """
        subscription = Subscription(asyncio.get_running_loop(), self._max_pending_bytes)
        with self._lock:
            self._subscribers.setdefault(response_id, set()).add(subscription)
        try:
            yield subscription
        finally:
            with self._lock:
                subscribers = self._subscribers.get(response_id)
                if subscribers is not None:
                    subscribers.discard(subscription)
                    if not subscribers:
                        del self._subscribers[response_id]
                        self._checked.pop(response_id, None)

    def publish(self, response_id: str, block: CommittedBlock | None) -> None:
        """Hand a committed block (or, with ``None``, just a wake-up) to every subscriber of the response."""
        with self._lock:
            if block is not None:
                self._published[response_id] = block.cursor.last_sequence_number
                self._published.move_to_end(response_id)
                if len(self._published) > PUBLISHED_MEMORY:
                    self._published.popitem(last=False)
                self._recent.add(response_id, block)
            subscribers = list(self._subscribers.get(response_id, ()))
        if not subscribers:
            return
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        for subscription in subscribers:
            if subscription.loop is running:
                subscription._push(block)
            elif not subscription.loop.is_closed():
                subscription.loop.call_soon_threadsafe(subscription._push, block)

    @contextmanager
    def writing(self, response_id: str) -> Iterator[None]:
        """Mark a phase of ``response_id`` as streaming in this process (readers poll storage less)."""
        with self._lock:
            self._active_writers[response_id] = self._active_writers.get(response_id, 0) + 1
        try:
            yield
        finally:
            with self._lock:
                left = self._active_writers.get(response_id, 1) - 1
                if left > 0:
                    self._active_writers[response_id] = left
                else:
                    self._active_writers.pop(response_id, None)
            if left <= 0:
                self.publish(response_id, None)  # readers go back to polling storage at once

    def recent(self, response_id: str, starting_after: int) -> CommittedBlock | None:
        """The events after ``starting_after`` of a log committed in this process from its first event (a
        true prefix of the stored log, see :mod:`resilient.storage.recent`), or None: read storage."""
        with self._lock:
            return self._recent.after(response_id, starting_after)

    def forget_log(self, response_id: str) -> None:
        """The log was deleted: never serve it from memory again."""
        with self._lock:
            self._recent.forget(response_id)

    def note_storage_read(self, response_id: str, at: float, through: int) -> None:
        """A reader of the response read its log from storage at monotonic time ``at``, up to sequence
        number ``through`` (the end of the log then)."""
        with self._lock:
            if response_id in self._subscribers:
                self._checked[response_id] = (at, through)

    @contextmanager
    def storage_read(self, response_id: str) -> Iterator[None]:
        """Mark a reader's storage read of the response's log as in flight. When it ends, the other
        readers here are woken: one that waited for it (:meth:`storage_read_since`) counts a read that
        found nothing it lacks as its own poll instead of issuing the same read at the same moment."""
        started = time.monotonic()
        with self._lock:
            self._reading.setdefault(response_id, []).append(started)
        try:
            yield
        finally:
            with self._lock:
                starts = self._reading.get(response_id, [])
                if started in starts:
                    starts.remove(started)
                if not starts:
                    self._reading.pop(response_id, None)
                others = len(self._subscribers.get(response_id, ())) > 1
            if others:
                self.publish(response_id, None)

    def storage_read_since(self, response_id: str, since: float) -> bool:
        """Whether a reader here started a storage read of the response's log after ``since`` that is
        still in flight."""
        with self._lock:
            return any(started > since for started in self._reading.get(response_id, ()))

    def last_storage_read(self, response_id: str) -> tuple[float, int] | None:
        """``(monotonic time, through which sequence number)`` of the latest storage read by a reader here:
        a reader due to poll storage that finds a newer read that saw nothing beyond its own position can
        count it as its own (readers of one response in one process poll storage once, not once each)."""
        with self._lock:
            return self._checked.get(response_id)

    def published_through(self, response_id: str) -> int:
        """The last sequence number a writer in this process published for the response (-1: none known).
        A reader that finds later events in storage knows they came from a writer elsewhere."""
        with self._lock:
            return self._published.get(response_id, -1)

    def expect(self, response_id: str, seconds: float) -> None:
        """The run's next activity will probably run in this process within ``seconds`` (it is driven from
        here): until then readers treat the response as written here. ``seconds <= 0`` forgets it."""
        with self._lock:
            if seconds > 0:
                self._expected[response_id] = time.monotonic() + seconds
            else:
                self._expected.pop(response_id, None)
        if seconds <= 0:
            self.publish(response_id, None)

    def phases_streaming(self) -> int:
        """How many responses have a phase streaming in this process right now (a measure of load)."""
        with self._lock:
            return len(self._active_writers)

    def writing_here(self, response_id: str) -> bool:
        """A phase of the response streams in this process right now."""
        with self._lock:
            return response_id in self._active_writers

    def expected_here(self, response_id: str) -> bool:
        """The response's next activity is expected in this process (see :meth:`expect`)."""
        with self._lock:
            until = self._expected.get(response_id)
            if until is None:
                return False
            if until > time.monotonic():
                return True
            del self._expected[response_id]
            return False

