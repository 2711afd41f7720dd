"""The hot path of a streaming phase: group-committed appends and a live view of the control flags.

Why group commit: every append is a billed storage transaction and costs the worker about a millisecond of
CPU in the storage SDK, so a phase must not append per delta. :class:`Appender` keeps at most one append in
flight and puts everything that arrives meanwhile into the next one. Appends start at least
``append_window_s`` apart: that window is the latency/cost knob (an event waits at most the window, plus an
append already in flight, before it is durable and visible to readers). Under load an append takes longer,
so more events ride in each. A busy process also widens the window: with many phases streaming at once
(``LOAD_PHASES`` per step, up to ``MAX_LOAD_FACTOR`` times the window) the agents slow down too, and a
fixed window would append more often per delta just when the process can least afford it. So calls per
delta go *down* under load, never up. The phase's last events (its closing events) go out at once, with
whatever deltas are still waiting.

Why the first append waits for the agent to wait: a phase's first append claims the log (see
:mod:`resilient.engine.run.claim`) and goes out inline, before any other. Outputs the agent has ready at
once (a burst of model chunks already received, or an agent that never waits) cost no time to wait for, so
they ride in that first append (:meth:`Appender.open`) instead of paying a round trip of their own; the
claim goes out the moment the agent first waits. A phase whose agent never waits is one append, with its
closing events.

Why a background control poller: reading ``status``/``cancel_requested``/``pending_input_count`` inline
would stall the agent's stream for a storage round trip. :class:`ControlPoller` keeps the phase context the
agent checks current: a cancel or steer handled by this process arrives at once through the process's
:class:`~resilient.storage.controls.ControlBoard`; a change made elsewhere is seen by a read once the newest
snapshot is ``control_interval_s`` old (one read in flight at most; widened under load like the append
window).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from resilient.agents.base import PhaseContext
from resilient.settings import Settings
from resilient.storage.controls import ControlBoard
from resilient.storage.errors import StorageUnavailable
from resilient.storage.feed import CommittedFeed
from resilient.storage.ports import Control, JsonDict, ResponseStore

log = logging.getLogger("resilient.engine")

DEFAULT_APPEND_WINDOW_S = 0.2
DEFAULT_CONTROL_INTERVAL_S = 1.0
# The window is scaled by 1 + (phases streaming in this process) / LOAD_PHASES, at most MAX_LOAD_FACTOR.
LOAD_PHASES = 16
MAX_LOAD_FACTOR = 4.0


def load_factor(load: CommittedFeed) -> float:
    """How much a time-based interval is widened: 1 + (phases streaming here) / LOAD_PHASES, at most 4."""
    return min(MAX_LOAD_FACTOR, 1.0 + load.phases_streaming() / LOAD_PHASES)


# A run started or continued from this process usually has its next activity here within a Durable hop
# (it may run on another instance: the work-item queue is shared). Readers in this process wait for it on the
# in-process feed, polling storage at the idle pace, for this long times the load factor (a busy process
# makes the hop longer too).
NEXT_ACTIVITY_EXPECTED_S = 5.0


def expect_next_activity(response_id: str, feed: CommittedFeed) -> None:
    """Tell readers here that the run's next activity will probably append in this process soon."""
    feed.expect(response_id, NEXT_ACTIVITY_EXPECTED_S * load_factor(feed))


@dataclass(frozen=True)
class Tuning:
    """Knobs of the hot path.

    ``flush_interval_s``: the append window (see the module doc; app setting ``RESILIENT_APPEND_WINDOW_MS``).
    ``flush_max_events``: this many waiting events go out without waiting for the window (bounds memory
    and block size for agents that emit in bursts). ``control_interval_s``: how stale the control flags
    may be when another instance changed them, i.e. the cross-instance cancel/steer latency of a running
    phase, and how many Table reads it makes (app setting ``RESILIENT_CONTROL_INTERVAL_MS``); a change
    handled by this process reaches the phase at once.
    """

    flush_interval_s: float = DEFAULT_APPEND_WINDOW_S
    flush_max_events: int = 512
    control_interval_s: float = DEFAULT_CONTROL_INTERVAL_S

    @classmethod
    def from_settings(cls, settings: Settings) -> Tuning:
        return cls(flush_interval_s=settings.append_window_ms / 1000.0,
                   control_interval_s=settings.control_interval_ms / 1000.0)


class AppendTarget(Protocol):
    """Where an appender writes: an event-log writer, or a phase's claim on the log."""

    async def append(self, events: Sequence[JsonDict]) -> object: ...


class Appender:
    """Appends one phase's events, as few appends as the window allows.

    Use from one task: :meth:`add` the events of each output, :meth:`open` when the agent waits (the first
    append, inline), then :meth:`finish` with the closing events. Until it is opened the appender only
    collects; after, it appends in the background. A failed append (lost ownership, storage down) is raised
    from :meth:`open`, the next :meth:`add` or :meth:`finish`.
    """

    def __init__(self, writer: AppendTarget, tuning: Tuning, *, load: CommittedFeed) -> None:
        self._writer = writer
        self._window = max(0.0, tuning.flush_interval_s)
        self._load = load
        self._max_events = max(1, tuning.flush_max_events)
        self._loop = asyncio.get_running_loop()
        self._buffer: list[JsonDict] = []
        self._final = False
        self._wake = asyncio.Event()
        self._last_start = self._loop.time()
        self._task: asyncio.Task[None] | None = None
        self.opened = False
        self.appends = 0

    @property
    def waiting(self) -> bool:
        """Events were added that are not appended yet."""
        return bool(self._buffer)

    @property
    def full(self) -> bool:
        """As many events wait as one append should carry (an appender not opened yet should open now)."""
        return len(self._buffer) >= self._max_events

    def add(self, events: Sequence[JsonDict]) -> None:
        """Take the events of one output (in stream order); appended after :meth:`open`."""
        self._raise_if_failed()
        if not events:
            return
        was_empty = not self._buffer
        self._buffer.extend(events)
        if not self.opened:
            return
        if self._task is None:
            self._task = self._loop.create_task(self._run())
        if was_empty or len(self._buffer) >= self._max_events:
            self._wake.set()

    async def open(self) -> None:
        """The first append, of everything collected so far, inline: it claims the log, and what losing the
        claim raises reaches the caller. Later events go out in the background, a window after it."""
        if self.opened or not self._buffer:
            return
        batch, self._buffer = self._buffer, []
        self._last_start = self._loop.time()
        self.appends += 1
        await self._writer.append(batch)
        self.opened = True

    async def finish(self, closing: Sequence[JsonDict]) -> None:
        """Append what is still waiting plus ``closing`` at once (after an append in flight), and stop. For
        an appender never opened this is the phase's only append (it claims the log)."""
        self._raise_if_failed()
        self._buffer.extend(closing)
        self._final = True
        self._wake.set()
        if self._task is None:
            self._task = self._loop.create_task(self._run())
        await self._task

    def window(self) -> float:
        """The configured window, widened while many phases stream in this process."""
        return self._window * load_factor(self._load)

    def cancel(self) -> None:
        """Stop without appending what is waiting (the phase failed)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()

    def _raise_if_failed(self) -> None:
        if self._task is not None and self._task.done() and not self._task.cancelled():
            error = self._task.exception()
            if error is not None:
                raise error

    async def _run(self) -> None:
        while True:
            while not self._buffer:
                if self._final:
                    return
                self._wake.clear()
                await self._wake.wait()
            due = self._last_start + self.window()
            if not self._final and len(self._buffer) < self._max_events and self._loop.time() < due:
                self._wake.clear()
                timer = self._loop.call_at(due, self._wake.set)
                try:
                    while not self._final and len(self._buffer) < self._max_events and self._loop.time() < due:
                        await self._wake.wait()
                        self._wake.clear()
                finally:
                    timer.cancel()
            batch, self._buffer = self._buffer, []
            self._last_start = self._loop.time()
            self.appends += 1
            await self._writer.append(batch)


class ControlPoller:
    """Keeps ``context.cancelled`` and ``context.pending_input_count`` current in the background.

    A change this process makes or reads (a cancel or steering request handled here) arrives through the
    :class:`~resilient.storage.controls.ControlBoard` at once, without a read. The poller reads the row
    only when the newest snapshot is older than the interval: that read is what sees a change made by
    another instance, so the interval bounds how stale the flags can be.
    """

    def __init__(self, responses: ResponseStore, response_id: str, context: PhaseContext, interval_s: float,
                 *, load: CommittedFeed, controls: ControlBoard) -> None:
        self._responses = responses
        self._rid = response_id
        self._context = context
        self._interval = max(0.001, interval_s)
        self._load = load
        self._controls = controls
        self._task: asyncio.Task[None] | None = None
        self.reads = 0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    def raise_if_failed(self) -> None:
        """A control read that failed for good (the row is gone, an unexpected error) fails the phase."""
        if self._task is not None and self._task.done() and not self._task.cancelled():
            error = self._task.exception()
            if error is not None:
                raise error

    def interval(self) -> float:
        """The configured interval, widened under load like the append window.

        Control reads are per second of a running phase, not per delta: when many phases stream in this
        process every agent slows down, so a fixed interval would read more often per delta just when the
        process can least afford it. The cancel/steer latency grows with it (at most ``MAX_LOAD_FACTOR`` ×).
        """
        return self._interval * load_factor(self._load)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def _apply(self, control: Control) -> None:
        self._context.cancelled = control.cancel_requested or control.status == "cancelled"
        self._context.pending_input_count = control.pending_input_count

    async def _run(self) -> None:
        # When the request behind the flags in the context started. The phase set them from the newest
        # snapshot; a store that does not report to the board (a test's) set them from a read just now.
        applied_at = -math.inf if self._controls.latest(self._rid) is not None else time.monotonic()
        while True:
            seen = self._controls.latest(self._rid)
            if seen is not None and seen.at > applied_at:
                self._apply(seen.control)
                applied_at = seen.at
            wait = applied_at + self.interval() - time.monotonic()
            if wait > 0:
                await self._controls.wait(self._rid, wait)
                continue
            self.reads += 1
            started_at = time.monotonic()
            try:
                control = await self._responses.get_control(self._rid)
            except StorageUnavailable:
                log.warning("control read failed; retrying", extra={"response_id": self._rid})
                await asyncio.sleep(self.interval())  # an outage also stops the appends
                continue
            self._controls.observe(self._rid, control, started_at)  # a store may not report to the board
            newer = self._controls.latest(self._rid)
            if newer is None or newer.at <= started_at:  # else a later snapshot is applied above
                self._apply(control)
                applied_at = max(applied_at, started_at)
