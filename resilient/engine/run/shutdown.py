"""The worker is shutting down: running steps stop at once and run again elsewhere.

When the platform scales an instance in (or the host stops), the worker process gets SIGTERM. A phase that
is streaming then stops at its next output, closes its item ``incomplete`` in the log and fails its
activity without a checkpoint, so the orchestrator runs the step again on another worker after a short
durable timer (instead of waiting out the lease and visibility timeouts of a worker that simply vanished).
Agents see it as :attr:`PhaseContext.shutting_down`: a shutdown, not a cancel (the run goes on elsewhere).

Once no phase is running (at most :data:`GRACE_SECONDS` after the signal) the signal's previous handler
runs, so the process ends as it would have without this module.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Callable
from typing import Any

log = logging.getLogger("resilient.engine")

GRACE_SECONDS = 2.0  # the most a shutdown waits for running phases to close their items
SETTLE_SECONDS = 0.2  # after the last phase stopped: its activity's failure reaches the host first


class WorkerShuttingDown(Exception):
    """A step stopped because its worker is shutting down; it runs again elsewhere."""


class Shutdown:
    """Whether this process is shutting down, and how many phases still stream here."""

    def __init__(self) -> None:
        self.requested = False
        self.running = 0
        self._finish: Callable[[], None] | None = None

    def enter(self) -> None:
        self.running += 1

    def leave(self) -> None:
        self.running -= 1
        if self.requested and self.running <= 0 and self._finish is not None:
            asyncio.get_running_loop().call_later(SETTLE_SECONDS, self._finish)

    def request(self, finish: Callable[[], None] | None = None) -> None:
        """Start shutting down; ``finish`` runs once no phase streams here (or after the grace)."""
        self.requested = True
        self._finish = _once(finish) if finish is not None else None
        if self._finish is None:
            return
        loop = asyncio.get_running_loop()
        loop.call_later(0 if self.running <= 0 else GRACE_SECONDS, self._finish)

    def install(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Handle SIGTERM on ``loop`` (the worker's): returns False where signals cannot be handled (not the
        main thread, no signal support); the process then ends on SIGTERM at once, with no drain."""
        previous = signal.getsignal(signal.SIGTERM)

        def handled() -> None:
            log.warning("shutting down: running steps stop and run again elsewhere",
                        extra={"phases": self.running})
            self.request(lambda: _resume_previous(loop, previous))

        try:
            loop.add_signal_handler(signal.SIGTERM, handled)
        except (NotImplementedError, RuntimeError, ValueError):
            return False
        return True


def _once(call: Callable[[], None]) -> Callable[[], None]:
    done = False

    def run() -> None:
        nonlocal done
        if not done:
            done = True
            call()

    return run


def _resume_previous(loop: asyncio.AbstractEventLoop, previous: Any) -> None:
    """Hand SIGTERM back to whoever had it and deliver it again: the process ends as it would have."""
    loop.remove_signal_handler(signal.SIGTERM)
    if callable(previous):
        previous(signal.SIGTERM, None)
        return
    signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)
