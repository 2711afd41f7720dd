"""The deterministic orchestrator: one orchestration instance per response (instance id = response id).

It is a plain generator over a Durable orchestration context and does no I/O, reads no clock and makes no
random ids: everything that touches the world is an activity, so a replay takes the same path.

What goes into history is small on purpose (ids, indexes, status words): items and events live in
storage, never in orchestration history. Those words (activity, entity and event names, input and result
keys) are in :mod:`resilient.engine.orchestration.terms`; a chained turn's wait for its chain's lock is in
:mod:`resilient.engine.orchestration.turnqueue`; this module is the run's control flow and its failure policy.

Flow::

    [repair execution: inspect → already ended? finalize, leave the chain, stop]
    [acquire chain lock → (queued: wait for lock_granted | cancel | recheck timer)]  (not a chain's root)
    run_phase(0, plans first) → … → run_phase(n-1, concludes) → [finalize unless concluded]
        (an open plan: every step may conclude; each result says how many steps there are so far)
    → [release lock → wake next turn]
    → [store=false: (client_done | grace timer) → forget]

Failures, and why each is handled here rather than with ``call_activity_with_retry``: the policy is visible,
replay-tested and identical on every host, and it can tell two kinds of failure apart.

* An activity that *raised* gets a few attempts after short durable timers (2 s, 4 s, …).
* An activity whose *worker died* (the real host records it as ``TaskFailed``, it never re-delivers it; see
  :mod:`resilient.engine.orchestration.failures`) is retried after a timer that covers the worker's restart, under a
  separate crash budget per step and per run. A run that keeps killing its worker ends ``failed``.

Every step is failure-safe: whatever fails, the run ends with one terminal status and the chain lock is
handed on. What each step does when it fails (see also docs/RELIABILITY.md):

============== ====================================================================================
step           when it keeps failing
============== ====================================================================================
inspect        (repair executions) treated as "still running": the normal path follows
acquire        the run is finalized ``failed`` and leaves the queue (``remove``; a grant it may have
               got is passed on)
mark_queued    ignored: ``response.queued`` is informational
wait for grant bounded by a timer: re-``acquire`` (idempotent, so a lost ``lock_granted`` is healed) and
               inspect the holder; a holder whose run is over is released on its behalf (at once, before
               waiting, when the create saw nothing unfinished ahead: ``nothing_ahead`` in the input)
run_phase      the run is finalized ``failed`` (the first one plans, the last one concludes the run
               when it ends without a stop: a step fewer each; see :meth:`_Run.work`)
finalize       the lock is still released; the orchestration ends with ``status: unfinalized`` and the
               repair path (:mod:`resilient.engine.heal.repair`) restarts it because the row is still active
release/remove ignored: the next turn's holder inspection frees the lock
wake_next_turn ignored: the woken turn's recheck timer finds the lock granted to it
============== ====================================================================================

An exception that escapes anyway (a bug, or the worker dying during an orchestrator episode, which the
real host records as a Failed orchestration) is healed by the repair path: it starts a new execution with
the same instance id, which resumes from the stored checkpoints.

A phase whose agent hit a transient error (a model's 429 or 5xx) answers ``{"retry_after": s}``: the
orchestrator waits that long on a durable timer (at most MODEL_WAIT_CAP_SECONDS per wait, and
MODEL_WAIT_BUDGET_SECONDS per phase) and runs the phase again; past the budget the response fails with
the agent's error. A turn that ends with function calls or an approval request completes
(``stop: "tool_calls"`` / ``"paused"``).
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from resilient.engine.orchestration.failures import is_worker_lost, reason_line
from resilient.engine.orchestration.terms import (
    CHAIN_LOCK_ENTITY,
    CLIENT_DONE_EVENT,
    FINAL_KEY,
    FINALIZE,
    FORGET,
    FORGET_AFTER_KEY,
    INSPECT,
    ITEMS_KEY,
    NOTHING_AHEAD_KEY,
    OPEN_KEY,
    OWNS_LOCK_KEY,
    RUN_PHASE,
    TERMINAL,
    TRACE_PARENT_KEY,
    WAKE_NEXT,
    JsonDict,
    outcome_of_stop,
)
from resilient.engine.orchestration.turnqueue import take_lock

# Orchestration versioning (host.json ``defaultVersion``, ``versionMatchStrategy: CurrentOrOlder``): the host
# stamps new instances with this version, and a worker runs only instances of its version or older. So in a
# rolling deployment, old workers never replay an instance the new code started, and the new code must replay
# every older version's histories (tests/replay keeps one test per older version). Raise it, in host.json too,
# whenever this generator changes in a way older code could not replay.
#   1.0 (or none: started before versioning) - fixed plans only
#   2.0 - open plans: each step's result carries ``open``/``items``; the next step gets a ``position``
ORCHESTRATION_VERSION = "2.0"

# Ordinary failures (the activity raised): attempts per step, backoff 2 s, 4 s, 8 s, ...
PHASE_ATTEMPTS = 3
FINALIZE_ATTEMPTS = 6
STEP_ATTEMPTS = 3
ENTITY_ATTEMPTS = 3
RETRY_BASE_SECONDS = 2
# Worker lost (crash, timeout, worker not started yet): the first retry waits about one worker restart.
CRASH_RETRY_SECONDS = (3, 6, 12, 24, 30)
CRASH_RETRIES_PER_STEP = len(CRASH_RETRY_SECONDS)
RUN_CRASH_BUDGET = 10  # worker losses over plan + all phases of one run
# A queued turn re-checks the lock after these waits (then every last one): heals lost grants.
LOCK_RECHECK_SECONDS = (15, 30, 60, 120, 300)
# A phase answering ``retry_after`` (the model is rate-limited or down for a moment).
MODEL_WAIT_CAP_SECONDS = 300.0
MODEL_WAIT_BUDGET_SECONDS = 900.0
MODEL_WAIT_MIN_SECONDS = 1.0

class WorkerLost(Exception):
    """The crash budget of a step or run is spent: the worker kept dying while running it."""


def _failure(message: str) -> JsonDict:
    return {"status": "failed", "error": {"code": "server_error", "message": message[:500]}}


@dataclass
class _Run:
    """One execution's state and its failure-safe steps (generators to ``yield from``)."""

    context: Any
    response_id: str
    chain_id: str | None
    crashes: int = 0
    traceparent: str | None = None  # the run's trace context (TRACE_PARENT_KEY), passed to every activity

    @property
    def lock(self) -> Any:
        # Imported here: this module is imported at indexing, the SDK only when an orchestration runs.
        from azure.durable_functions import EntityId

        return EntityId(CHAIN_LOCK_ENTITY, str(self.chain_id)) if self.chain_id else None

    def timer(self, seconds: float) -> Any:
        return self.context.create_timer(self.context.current_utc_datetime + timedelta(seconds=seconds))

    def call(self, name: str, payload: JsonDict, attempts: int, *, run_budget: bool = False
             ) -> Generator[Any, Any, Any]:
        """Call an activity; retry ordinary failures ``attempts`` times and lost workers under the crash
        budget (per step, and per run when ``run_budget``). Re-raise once a budget is spent."""
        failures = crashes = 0
        if self.traceparent:
            payload = {**payload, TRACE_PARENT_KEY: self.traceparent}
        while True:
            try:
                return (yield self.context.call_activity(name, payload))
            except Exception as error:
                if is_worker_lost(error):
                    crashes += 1
                    if run_budget:
                        self.crashes += 1
                    if crashes > CRASH_RETRIES_PER_STEP or (run_budget and self.crashes > RUN_CRASH_BUDGET):
                        raise WorkerLost(
                            f"The worker process stopped {self.crashes if run_budget else crashes} times while "
                            f"running this response ({name}); it was not retried again.") from error
                    yield self.timer(CRASH_RETRY_SECONDS[crashes - 1])
                else:
                    failures += 1
                    if failures >= attempts:
                        raise
                    yield self.timer(RETRY_BASE_SECONDS**failures)

    def try_call(self, name: str, payload: JsonDict, attempts: int = STEP_ATTEMPTS
                 ) -> Generator[Any, Any, JsonDict | None]:
        """A step whose failure the run survives: the result, or None once its retries are spent."""
        try:
            result = yield from self.call(name, payload, attempts)
        except Exception:
            return None
        return result if isinstance(result, dict) else {}

    def entity(self, operation: str, response_id: str | None = None) -> Generator[Any, Any, JsonDict | None]:
        """One chain-lock operation, retried; None if it keeps failing. (The host retries an entity batch
        whose worker died, so a failure here is an entity error, which ours never raises.)"""
        for attempt in range(ENTITY_ATTEMPTS):
            try:
                answer = yield self.context.call_entity(self.lock, operation,
                                                        {"response_id": response_id or self.response_id})
                return answer if isinstance(answer, dict) else {}
            except Exception:
                if attempt + 1 < ENTITY_ATTEMPTS:
                    yield self.timer(RETRY_BASE_SECONDS ** (attempt + 1))
        return None

    def wake(self, answer: JsonDict | None) -> Generator[Any, Any, None]:
        """Hand the chain lock to the next queued turn named in a release/remove answer."""
        next_id = answer.get("next") if isinstance(answer, dict) else None
        if next_id:
            yield from self.try_call(WAKE_NEXT, {"response_id": str(next_id)}, FINALIZE_ATTEMPTS)

    def finalize(self, outcome: JsonDict) -> Generator[Any, Any, JsonDict]:
        """Terminal status and event (idempotent). Never raises: the lock must be handed on regardless.
        An outcome that the last phase already concluded (``final``) needs no step of its own."""
        try:
            if isinstance(outcome.get(FINAL_KEY), dict):
                final = outcome[FINAL_KEY]
            else:
                final = yield from self.call(FINALIZE, {"response_id": self.response_id, **outcome},
                                             FINALIZE_ATTEMPTS)
        except Exception as error:  # storage gone for minutes: the repair path finishes it later
            final = {"status": "unfinalized", "error": reason_line(error)[:300]}
        final = final if isinstance(final, dict) else {}
        self.context.set_custom_status({"response_id": self.response_id, "status": final.get("status")})
        return final

    def leave_chain(self) -> Generator[Any, Any, None]:
        """Leave the chain for good: out of the queue, or, if the lock is ours, hand it on."""
        if self.lock is not None:
            removal = yield from self.entity("remove")
            yield from self.wake(removal)

    def run_phase(self, index: int, *, plan: bool = False, last: bool = False,
                  position: int | None = None) -> Generator[Any, Any, JsonDict]:
        """Run one phase; when it answers ``retry_after``, wait on a durable timer and run it again, within
        the per-phase wait budget (then it is a failure carrying the phase's error). The first phase plans
        the turn first (``plan``); the last one, or the first while the count is unknown, is asked to conclude
        the run itself when it ends without a stop (its result then carries ``final``)."""
        payload: JsonDict = {"response_id": self.response_id, "index": index}
        if position is not None:
            payload["position"] = position
        if plan:
            payload["plan"] = True
        if last or plan:
            payload["finalize"] = True
        waited = 0.0
        while True:
            result: JsonDict = yield from self.call(RUN_PHASE, payload, PHASE_ATTEMPTS, run_budget=True)
            if result.get("retry_after") is None:
                return result
            wait = min(max(float(result["retry_after"]), MODEL_WAIT_MIN_SECONDS), MODEL_WAIT_CAP_SECONDS)
            error = result.get("error") or {"code": "server_error", "message": "The model kept failing."}
            if waited + wait > MODEL_WAIT_BUDGET_SECONDS:
                return {"index": index, "stop": "failed", "error": error}
            self.context.set_custom_status({"response_id": self.response_id, "phase": index,
                                            "waiting_seconds": wait})
            yield self.timer(wait)
            waited += wait

    def work(self) -> Generator[Any, Any, JsonDict]:
        """Plan (in the first phase's activity), then run each phase. Never raises: a failure becomes a
        ``failed`` outcome."""
        rid = self.response_id
        try:
            self.context.set_custom_status({"response_id": rid, "phase": 0})
            result = yield from self.run_phase(0, plan=True)
            if result.get("stop"):
                return outcome_of_stop(result)
            # ``phases`` is re-read from every result: an agent that decides its steps as it goes (an open
            # plan, ``open``) answers ``index + 2`` while another step follows. A fixed plan answers the
            # same count every time, so a history recorded before open plans replays the same way.
            # An open plan's steps leave any number of output items: each is told where its own start.
            phases = int(result["phases"])
            is_open = bool(result.get(OPEN_KEY))
            position = int(result.get(ITEMS_KEY, 0)) if is_open else None
            index = 1
            while index < phases:
                self.context.set_custom_status({"response_id": rid, "phase": index, "phases": phases})
                result = yield from self.run_phase(index, last=is_open or index == phases - 1, position=position)
                if result.get("stop"):
                    return outcome_of_stop(result)
                phases = int(result.get("phases", phases))
                if position is not None:
                    position += int(result.get(ITEMS_KEY, 0))
                index += 1
        except WorkerLost as error:
            return _failure(str(error))
        except Exception as error:  # an activity failed after its retries
            return _failure(f"phase failed: {reason_line(error)}")
        if isinstance(result.get("final"), dict):
            return {"status": "completed", FINAL_KEY: result["final"]}
        return {"status": "completed"}


def response_orchestrator(context: Any) -> Generator[Any, Any, JsonDict]:
    """Drive one response phase by phase.

    Input: ``{"response_id": str, "chain_id": str | None, "owns_lock": bool?, "nothing_ahead": bool?,
    "repair": int?, "forget_after_seconds": int?, "traceparent": str?}``;
    ``repair`` marks an execution started by the repair path over a Failed/Terminated/missing one (see
    :mod:`resilient.engine.heal.repair`); ``forget_after_seconds`` marks a ``store=false`` run, which ends, however
    it ended, by deleting everything once its client is done with it (:func:`_forget`).
    """
    args = context.get_input() or {}
    chain_id = args.get("chain_id")
    traceparent = args.get(TRACE_PARENT_KEY)
    run = _Run(context, str(args["response_id"]), str(chain_id) if chain_id else None,
               traceparent=str(traceparent) if traceparent else None)
    final = yield from _respond(run, args)
    if args.get(FORGET_AFTER_KEY) is not None:
        yield from _forget(run, int(args[FORGET_AFTER_KEY]))
    return final


def _forget(run: _Run, grace_seconds: int) -> Generator[Any, Any, None]:
    """``store=false``: delete everything once the client is done with the response (``client_done``,
    raised by the HTTP request that delivered it or lost its client), or ``grace_seconds`` after the run
    ended when that request is gone too (its worker died). A delete that keeps failing is left to the
    maintenance sweep. See :mod:`resilient.engine.heal.unstored`."""
    done = run.context.wait_for_external_event(CLIENT_DONE_EVENT)
    grace = run.timer(grace_seconds)
    winner = yield run.context.task_any([done, grace])
    if winner is done and not grace.is_completed:
        grace.cancel()
    yield from run.try_call(FORGET, {"response_id": run.response_id}, FINALIZE_ATTEMPTS)


def _respond(run: _Run, args: JsonDict) -> Generator[Any, Any, JsonDict]:
    """The run itself: take the chain lock, plan, phases, finalize, hand the lock on."""
    if args.get("repair"):
        verdict = yield from run.try_call(INSPECT, {"response_id": run.response_id})
        if verdict is not None and verdict.get("status") in TERMINAL:
            # The run already ended (its orchestration died later): write what is missing, hand the chain on.
            final = yield from run.finalize(_failure("The run ended before its orchestration could finish."))
            yield from run.leave_chain()
            return final

    if run.lock is not None and not args.get(OWNS_LOCK_KEY):
        got = yield from take_lock(run, LOCK_RECHECK_SECONDS, nothing_ahead=bool(args.get(NOTHING_AHEAD_KEY)))
        if got == "cancelled":
            # S4: leave the queue; the running turn is untouched. A grant that raced the cancel is
            # handed on by the entity's remove operation (it answers with the next turn to wake).
            removal = yield from run.entity("remove")
            final = yield from run.finalize({"status": "cancelled"})
            yield from run.wake(removal)
            return final
        if got == "failed":
            final = yield from run.finalize(_failure("The conversation's lock could not be taken."))
            yield from run.leave_chain()
            return final

    outcome = yield from run.work()
    final = yield from run.finalize(outcome)
    if run.lock is not None:
        released = yield from run.entity("release")
        yield from run.wake(released)
    return final
