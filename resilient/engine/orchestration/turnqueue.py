"""A chained turn waiting for its chain's lock: the queued part of the orchestration.

One turn of a chain runs at a time: the one holding the chain's ``chain_lock`` entity
(:mod:`resilient.engine.chain.chainlock`). A turn that finds the lock held waits in the entity's queue for a
``lock_granted`` event or a cancel, and heals what can go wrong meanwhile: a grant whose event was lost
(``acquire`` is idempotent and answers ``granted`` again), and a holder whose orchestration died after its
run ended without releasing (inspected, then released on its behalf).

These are steps of the orchestrator (:mod:`resilient.engine.orchestration.orchestrator`), plain generators over its run
with no I/O: everything goes through the run's retried entity operations, activities and timers
(:class:`RunSteps`).
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any, Protocol

from resilient.engine.orchestration.terms import CANCEL_EVENT, INSPECT, LOCK_GRANTED_EVENT, MARK_QUEUED, JsonDict


class RunSteps(Protocol):
    """What waiting for the lock needs of a run: its Durable context, its id and its failure-safe steps."""

    @property
    def context(self) -> Any: ...

    @property
    def response_id(self) -> str: ...

    def timer(self, seconds: float) -> Any: ...

    def try_call(self, name: str, payload: JsonDict, attempts: int = ...) -> Generator[Any, Any, JsonDict | None]: ...

    def entity(self, operation: str, response_id: str | None = None) -> Generator[Any, Any, JsonDict | None]: ...

    def wake(self, answer: JsonDict | None) -> Generator[Any, Any, None]: ...


def take_lock(run: RunSteps, recheck_seconds: Sequence[float], nothing_ahead: bool = False
              ) -> Generator[Any, Any, str]:
    """Acquire the chain lock, waiting in the queue if another turn holds it.
    Returns ``granted``, ``cancelled`` (a cancel came while queued) or ``failed``.

    ``nothing_ahead``: the create saw no unfinished turn on the chain, so a holder is most likely a
    finished turn whose orchestration died after its finalize (the real host fails an orchestration
    whose episode dies with the worker); it is inspected at once, not after the first recheck timer
    (15 s during which the new turn would show ``queued`` behind nobody). A holder still running (a
    turn created meanwhile) costs one inspection, and the turn waits as usual."""
    answer = yield from run.entity("acquire")
    if answer is None:
        return "failed"
    if answer.get("state") != "queued":
        return "granted"
    if nothing_ahead and (yield from free_if_over(run, answer)):
        return "granted"
    run.context.set_custom_status({"response_id": run.response_id, "state": "queued"})
    yield from run.try_call(MARK_QUEUED, {"response_id": run.response_id})
    # Created once and re-used by every round: a second waiter for the same event would split the events.
    granted = run.context.wait_for_external_event(LOCK_GRANTED_EVENT)
    cancelled = run.context.wait_for_external_event(CANCEL_EVENT)
    rounds = 0
    while True:
        recheck = run.timer(recheck_seconds[min(rounds, len(recheck_seconds) - 1)])
        winner = yield run.context.task_any([granted, cancelled, recheck])
        if winner is not recheck:
            if not recheck.is_completed:  # both may land in one episode; cancelling a fired timer raises
                recheck.cancel()
            return "granted" if winner is granted else "cancelled"
        rounds += 1
        if (yield from recheck_lock(run)):
            return "granted"


def recheck_lock(run: RunSteps) -> Generator[Any, Any, bool]:
    """No grant came for a while. Ask again (``acquire`` is idempotent: a grant whose event was lost
    answers ``granted`` now); if the holder's run is over but it never released (its orchestration died
    after finalize), release on its behalf. True when the lock is ours."""
    answer = yield from run.entity("acquire")
    if answer is None:
        return False
    if answer.get("state") == "granted":
        return True
    return (yield from free_if_over(run, answer))


def free_if_over(run: RunSteps, answer: JsonDict) -> Generator[Any, Any, bool]:
    """A queued ``acquire`` answer names the holder: if its run is over, release on its behalf and hand
    the lock on. True when it comes to this turn."""
    holder = answer.get("active")
    if not holder or holder == run.response_id:
        return False
    verdict = yield from run.try_call(INSPECT, {"response_id": str(holder)})
    if not (verdict and verdict.get("over")):
        return False
    released = yield from run.entity("release", str(holder))  # a no-op if the holder released meanwhile
    next_id = released.get("next") if released else None
    if next_id == run.response_id:
        return True
    yield from run.wake(released)
    return False
