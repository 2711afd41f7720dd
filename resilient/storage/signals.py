"""In-process wake-ups for log readers: a tail that lives in the same worker process as the writer
(the common case: the HTTP stream and the activity run on the same instance) is woken the moment an
append lands instead of waiting for its next poll. Readers elsewhere still poll; a missed signal only
costs one poll interval. Thread-safe, because activities and HTTP handlers may run on different loops.
"""

from __future__ import annotations

import asyncio
import threading


class AppendSignals:
    def __init__(self) -> None:
        self._waiters: dict[str, set[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}
        self._lock = threading.Lock()

    def publish(self, response_id: str) -> None:
        with self._lock:
            waiters = list(self._waiters.get(response_id, ()))
        for loop, event in waiters:
            if not loop.is_closed():
                loop.call_soon_threadsafe(event.set)

    async def wait(self, response_id: str, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds or until an append to ``response_id`` is published."""
        entry = (asyncio.get_running_loop(), asyncio.Event())
        with self._lock:
            self._waiters.setdefault(response_id, set()).add(entry)
        try:
            await asyncio.wait_for(entry[1].wait(), timeout)
            return True
        except TimeoutError:
            return False
        finally:
            with self._lock:
                waiting = self._waiters.get(response_id)
                if waiting is not None:
                    waiting.discard(entry)
                    if not waiting:
                        del self._waiters[response_id]


APPENDS = AppendSignals()
