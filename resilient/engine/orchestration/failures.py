"""Which activity failures mean "the worker process went away" rather than "the activity raised".

On the real Functions host a Python activity is *not* re-delivered when its worker process dies: the host
fails every invocation in flight with ``WorkerProcessExitException`` and the Durable extension records a
``TaskFailed`` whose reason reads ``Activity function 'run_phase' failed: python exited with code 137
(0x89)``. A ``functionTimeout`` is a ``TaskFailed`` too (``Timeout value of 00:30:00 was exceeded by
function: Functions.run_phase``) and restarts the worker. While the worker restarts, a new invocation fails
at once with ``Did not find any initialized language workers``. The Python SDK throws all of them into the
orchestrator as a plain ``Exception("<reason> \\n <details>")``, so the text is all there is to go by.

Such a failure says nothing about the activity itself (a neighbour's crash kills it just the same), so the
orchestrator retries it under a separate *crash budget* instead of spending the activity's ordinary attempts.
"""

from __future__ import annotations

import re

# Each pattern is specific to the host's own wording, so an agent error that merely mentions an exit code
# ("git exited with code 1") is not mistaken for a dead worker.
_WORKER_LOST = (
    re.compile(r"WorkerProcessExitException"),
    re.compile(r"exited with code -?\d+ \(0x[0-9A-Fa-f]+\)"),
    re.compile(r"Timeout value of \d+:\d\d:\d\d(\.\d+)? was exceeded by function"),
    re.compile(r"FunctionTimeoutException"),
    re.compile(r"Did not find any initialized language workers"),
    re.compile(r"is not loaded by the language worker"),
)


def is_worker_lost(error: BaseException | str) -> bool:
    """True when an activity failed because its worker process died, timed out or was not running."""
    text = error if isinstance(error, str) else str(error)
    return any(pattern.search(text) for pattern in _WORKER_LOST)


def reason_line(error: BaseException) -> str:
    """The reason line of an activity failure. Durable builds the exception as ``"<reason> \\n <details>"``
    and the details are the worker's traceback: they must not reach clients in ``error.message``."""
    return str(error).split("\n", 1)[0].strip() or type(error).__name__
