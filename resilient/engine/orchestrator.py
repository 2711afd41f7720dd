"""The deterministic orchestrator: one orchestration instance per response (instance id = response id).

It is a plain generator over a Durable orchestration context and does no I/O, reads no clock and makes no
random ids: everything that touches the world is an activity, so a replay after a crash takes the same
path and the Durable runtime re-delivers only the activity that was in flight.

What goes into history is small on purpose (ids, indexes, status words): items and events live in
storage, never in orchestration history.

Flow::

    [acquire chain lock → (queued: wait for lock_granted | cancel)]
    plan → run_phase(0) → … → run_phase(n-1) → finalize → [release lock → wake next turn]

Transient activity failures are retried here (a timer, then the same activity again) rather than with
``call_activity_with_retry``, so the retry policy is visible, replay-tested and identical on every host.
A phase whose agent hit a transient error (a model's 429 or 5xx) answers ``{"retry_after": s}``: the
orchestrator waits that long on a durable timer (at most MODEL_WAIT_CAP_SECONDS per wait, and
MODEL_WAIT_BUDGET_SECONDS per phase) and runs the phase again; past the budget the response fails with
the agent's error. A turn that ends with function calls or an approval request completes
(``stop: "tool_calls"`` / ``"paused"``).
"""

from __future__ import annotations

from collections.abc import Generator
from datetime import timedelta
from typing import Any

import azure.durable_functions as df

PLAN = "plan_response"
RUN_PHASE = "run_phase"
FINALIZE = "finalize_response"
MARK_QUEUED = "mark_queued"
WAKE_NEXT = "wake_next_turn"
CHAIN_LOCK_ENTITY = "chain_lock"
LOCK_GRANTED_EVENT = "lock_granted"
CANCEL_EVENT = "cancel"

PHASE_ATTEMPTS = 3
FINALIZE_ATTEMPTS = 6
RETRY_BASE_SECONDS = 2
MODEL_WAIT_CAP_SECONDS = 300.0
MODEL_WAIT_BUDGET_SECONDS = 900.0
MODEL_WAIT_MIN_SECONDS = 1.0


def _retry_delay(context: Any, attempt: int) -> Any:
    """Exponential backoff timer (2 s, 4 s, 8 s, …) from the orchestration's own replay-safe clock."""
    return context.create_timer(context.current_utc_datetime + timedelta(seconds=RETRY_BASE_SECONDS**(attempt + 1)))


def _call_with_retries(context: Any, name: str, payload: Any, attempts: int) -> Generator[Any, Any, Any]:
    """Call an activity, retrying failures after a durable timer; re-raise the last failure."""
    for attempt in range(attempts):
        try:
            result = yield context.call_activity(name, payload)
            return result
        except Exception:
            if attempt + 1 >= attempts:
                raise
            yield _retry_delay(context, attempt)
    raise AssertionError("unreachable")


def _failure(message: str) -> dict[str, Any]:
    return {"status": "failed", "error": {"code": "server_error", "message": message[:500]}}


def _reason(exc: Exception) -> str:
    """The reason line of an activity failure. Durable builds the exception as ``"<reason> \\n <details>"``
    and the details are the worker's traceback: it must not reach clients in ``error.message``."""
    return str(exc).split("\n", 1)[0].strip() or type(exc).__name__


def _outcome_of_stop(stop: dict[str, Any]) -> dict[str, Any]:
    reason = stop.get("stop")
    if reason == "cancelled":
        return {"status": "cancelled"}
    if reason == "steered":
        return {"status": "completed", "steered": True}
    if reason in ("paused", "tool_calls"):
        return {"status": "completed", "ended": reason}
    if reason == "failed":
        return {"status": "failed", "error": stop.get("error") or {"code": "server_error", "message": "failed"}}
    return {"status": "completed"}


def response_orchestrator(context: Any) -> Generator[Any, Any, dict[str, Any]]:
    """Drive one response phase by phase. Input: ``{"response_id": str, "chain_id": str | None}``."""
    args = context.get_input() or {}
    response_id = str(args["response_id"])
    chain_id = args.get("chain_id")
    lock = None
    holds_lock = False

    if chain_id:
        lock = df.EntityId(CHAIN_LOCK_ENTITY, str(chain_id))
        answer = yield context.call_entity(lock, "acquire", {"response_id": response_id})
        if answer.get("state") == "queued":
            context.set_custom_status({"response_id": response_id, "state": "queued"})
            yield context.call_activity(MARK_QUEUED, {"response_id": response_id})
            granted = context.wait_for_external_event(LOCK_GRANTED_EVENT)
            cancelled = context.wait_for_external_event(CANCEL_EVENT)
            winner = yield context.task_any([granted, cancelled])
            if winner is cancelled:
                # S4: leave the queue; the running turn is untouched. A grant that raced the cancel is
                # handed on by the entity's remove operation (it answers with the next turn to wake).
                removal = yield context.call_entity(lock, "remove", {"response_id": response_id})
                final = yield from _finalize(context, response_id, {"status": "cancelled"})
                yield from _wake(context, removal)
                return final
        holds_lock = True

    outcome: dict[str, Any] = {"status": "completed"}
    try:
        plan = yield from _call_with_retries(context, PLAN, {"response_id": response_id}, PHASE_ATTEMPTS)
        if plan.get("stop"):
            outcome = _outcome_of_stop(plan)
        else:
            phases = int(plan["phases"])
            for index in range(phases):
                context.set_custom_status({"response_id": response_id, "phase": index, "phases": phases})
                result = yield from _run_phase(context, response_id, index)
                if result.get("stop"):
                    outcome = _outcome_of_stop(result)
                    break
    except Exception as exc:  # an activity failed after its retries
        outcome = _failure(f"phase failed: {_reason(exc)}")

    try:
        final = yield from _finalize(context, response_id, outcome)
    except Exception as exc:  # storage gone for minutes: still hand the chain on, never leak the lock
        final = {"status": "unfinalized", "error": str(exc)[:300]}
    if holds_lock and lock is not None:
        released = yield context.call_entity(lock, "release", {"response_id": response_id})
        yield from _wake(context, released)
    return final


def _run_phase(context: Any, response_id: str, index: int) -> Generator[Any, Any, dict[str, Any]]:
    """Run one phase; when it answers ``retry_after``, wait on a durable timer and run it again, within
    the per-phase wait budget (then it is a failure carrying the phase's error)."""
    payload = {"response_id": response_id, "index": index}
    waited = 0.0
    while True:
        result: dict[str, Any] = yield from _call_with_retries(context, RUN_PHASE, payload, PHASE_ATTEMPTS)
        if result.get("retry_after") is None:
            return result
        wait = min(max(float(result["retry_after"]), MODEL_WAIT_MIN_SECONDS), MODEL_WAIT_CAP_SECONDS)
        error = result.get("error") or {"code": "server_error", "message": "The model kept failing."}
        if waited + wait > MODEL_WAIT_BUDGET_SECONDS:
            return {"index": index, "stop": "failed", "error": error}
        context.set_custom_status({"response_id": response_id, "phase": index, "waiting_seconds": wait})
        yield context.create_timer(context.current_utc_datetime + timedelta(seconds=wait))
        waited += wait


def _finalize(context: Any, response_id: str, outcome: dict[str, Any]) -> Generator[Any, Any, dict[str, Any]]:
    payload = {"response_id": response_id, **outcome}
    final: dict[str, Any] = yield from _call_with_retries(context, FINALIZE, payload, FINALIZE_ATTEMPTS)
    context.set_custom_status({"response_id": response_id, "status": final.get("status")})
    return final


def _wake(context: Any, answer: Any) -> Generator[Any, Any, None]:
    """Hand the chain lock to the next queued turn (an activity raises ``lock_granted`` on it)."""
    next_id = answer.get("next") if isinstance(answer, dict) else None
    if next_id:
        yield from _call_with_retries(context, WAKE_NEXT, {"response_id": next_id}, FINALIZE_ATTEMPTS)
