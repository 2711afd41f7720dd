"""What this process last saw of each response's control columns, when, and who is waiting for a change.

Why: a running phase must notice a cancel or a steering turn. Reading the row every fraction of a second is
a billed storage call per read, and most of them return nothing new. Every read and every write of the
response row in this process already yields the whole control state (status, cancel flag, pending-input
count): reads return it, and every write is a compare-and-swap on the row's ETag, so the row a write
returns is the row as it stood, with any change made elsewhere before it. :class:`ControlBoard` keeps the
latest such snapshot per response with the time its request *started* (the snapshot is at least that new),
and wakes whoever waits on that response. So a cancel or steer handled by this process reaches a phase
running here at once, without a read; a change made by another instance is seen by the next read, which a
phase makes when its snapshot is older than its control interval. That interval is therefore the bound on
how stale the flags can be, whoever changed them.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass

from resilient.storage.ports import Control

__all__ = ["ControlBoard", "Observed"]

DEFAULT_CAPACITY = 4096


@dataclass(frozen=True)
class Observed:
    """A snapshot of the control columns; ``at`` is the monotonic time its request started."""

    control: Control
    at: float


class ControlBoard:
    """The newest control snapshot per response seen by this process (bounded, oldest dropped first)."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self._seen: OrderedDict[str, Observed] = OrderedDict()
        self._waiters: dict[str, list[asyncio.Future[None]]] = {}
        self._capacity = max(1, capacity)

    def observe(self, response_id: str, control: Control, started_at: float) -> None:
        """Record what a request started at ``started_at`` saw, unless a later-started one was recorded.

        A read that started before a write but finished after it may have seen the row before the write;
        keeping the later-started snapshot never loses a change for longer than the control interval.
        """
        current = self._seen.get(response_id)
        if current is not None and current.at > started_at:
            return
        self._seen[response_id] = Observed(control, started_at)
        self._seen.move_to_end(response_id)
        while len(self._seen) > self._capacity:
            self._seen.popitem(last=False)
        for waiter in self._waiters.pop(response_id, ()):
            if not waiter.done():
                waiter.set_result(None)

    def latest(self, response_id: str) -> Observed | None:
        return self._seen.get(response_id)

    def fresh(self, response_id: str, max_age_s: float, now: float) -> Control | None:
        """The snapshot if its request started at most ``max_age_s`` before ``now``; else None (read it)."""
        seen = self._seen.get(response_id)
        if seen is None or now - seen.at > max_age_s:
            return None
        return seen.control

    def forget(self, response_id: str) -> None:
        self._seen.pop(response_id, None)

    async def wait(self, response_id: str, timeout_s: float) -> None:
        """Return when a new snapshot of ``response_id`` is recorded, or after ``timeout_s``."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters = self._waiters.setdefault(response_id, [])
        waiters.append(waiter)
        try:
            await asyncio.wait({waiter}, timeout=max(0.0, timeout_s))
        finally:
            left = self._waiters.get(response_id)
            if left is not None and waiter in left:
                left.remove(waiter)
                if not left:
                    del self._waiters[response_id]

