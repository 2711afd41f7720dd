"""The words replay tests are written in, so a history reads like the scenario it stands for.

Everything here drives the registered orchestrator through the REAL azure-functions-durable SDK (see
:mod:`tests.replay.harness`); it only names what the harness does:

* reading what the orchestrator asked for: :func:`activity` (name and input of an activity call),
  :func:`names` (``run_phase:0``, ``finalize_response``, ``timer``, ``entity:acquire``,
  ``wait:lock_granted``: one word per action, in order);
* answering every action of a run at once with a responder for :func:`~tests.replay.harness.drive`:
  :func:`happy` (every phase succeeds), :class:`Script` (activities succeed unless told to fail, entity
  operations answer from a table, timers fire unless held);
* writing a history step by step with :class:`Orchestration`: ``started()`` (or ``drive(responder)`` up
  to where the responder leaves an action unanswered), then
  ``phase(0).completed(phases=3)``, ``phase(1).crashed()`` (its worker process died),
  ``phase(1).failed("storage unavailable")``, ``timer_fired()``, ``entity("acquire").answered({...})``,
  ``raised("lock_granted", {...})`` and ``episode()`` (the next orchestrator episode, e.g. a replay after a
  restart that brings nothing new);
* running the chain-lock entity batch by batch with :class:`Lock` (the host's batch protocol: state kept
  between batches, operation inputs JSON-encoded twice).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from azure.durable_functions.models.actions.ActionType import ActionType

from resilient.engine.orchestration import orchestrator as orch
from tests.replay.harness import Episode, History, Replay, drive, orchestrator_handle

# What the real Functions host records when an activity's worker process dies, times out or was not ready
# (see resilient/engine/orchestration/failures.py): a TaskFailed with one of these reasons, never a re-delivery.
WORKER_EXIT = "Activity function '{name}' failed: python exited with code 137 (0x89)"
WORKER_EXIT_DETAILS = "Microsoft.Azure.WebJobs.Script.Workers.WorkerProcessExitException: python exited"
TIMEOUT = "Timeout value of 00:30:00 was exceeded by function: Functions.{name}"
NOT_READY = "Activity function '{name}' failed: Did not find any initialized language workers"

Responder = Callable[[int, dict[str, Any], int], Any]


def orchestrator() -> Any:
    """The registered orchestrator's SDK handle, from a freshly imported app (the worker's way)."""
    from tests.fresh_app import fresh_app

    return orchestrator_handle(fresh_app(), "responses_orchestrator")


def chain_lock_entity() -> Any:
    """The chain-lock entity's SDK handle, from a freshly imported app."""
    from tests.fresh_app import fresh_app

    functions = {f.get_function_name(): f for f in fresh_app().get_functions()}
    return functions["chain_lock"].get_user_function()


# -- reading actions ------------------------------------------------------------------------------------
def activity(action: dict[str, Any]) -> tuple[str, Any]:
    """An activity call's function name and decoded input."""
    assert action["actionType"] == ActionType.CALL_ACTIVITY
    return action["functionName"], json.loads(action["input"])


def name_of(action: dict[str, Any], *, indexes: bool = True) -> str | None:
    """One word for an action: ``run_phase:<index>`` (``run_phase`` without ``indexes``), an activity's
    name, ``timer``, ``entity:<operation>``, ``wait:<event>``; None for anything else."""
    kind = action["actionType"]
    if kind == ActionType.CALL_ACTIVITY:
        name, args = activity(action)
        return f"{name}:{args.get('index', '')}" if name == orch.RUN_PHASE and indexes else str(name)
    if kind == ActionType.CREATE_TIMER:
        return "timer"
    if kind == ActionType.CALL_ENTITY:
        return f"entity:{action['operation']}"
    if kind == ActionType.WAIT_FOR_EXTERNAL_EVENT:
        return f"wait:{action['externalEventName']}"
    return None


def names(actions: list[dict[str, Any]], *, indexes: bool = True) -> list[str]:
    """The actions in order, one word each (see :func:`name_of`)."""
    return [n for n in (name_of(a, indexes=indexes) for a in actions) if n is not None]


def calls_of(actions: list[dict[str, Any]], function: str) -> list[dict[str, Any]]:
    """The inputs of every call of one activity, in order."""
    return [activity(a)[1] for a in actions
            if a["actionType"] == ActionType.CALL_ACTIVITY and a["functionName"] == function]


def finalize_args(actions: list[dict[str, Any]]) -> dict[str, Any]:
    """The input of the run's one ``finalize_response`` call."""
    (found,) = calls_of(actions, orch.FINALIZE)
    return dict(found)


def scheduled(replay: Replay, function: str) -> list[dict[str, Any]]:
    """The inputs of every ``TaskScheduled`` record of one activity in the history, in order."""
    return [json.loads(e["Input"]) for e in replay.history
            if e["EventType"] == History.TASK_SCHEDULED and e.get("Name") == function]


# -- answering a whole run ------------------------------------------------------------------------------
def happy(phases: int, stop_at: int | None = None, stop: str = "cancelled") -> Responder:
    """Every phase succeeds and says the plan has ``phases`` phases (the first one plans, so every summary
    carries the count); phase ``stop_at`` stops with ``stop``; finalize succeeds; timers fire."""

    def respond(kind: int, action: dict[str, Any], position: int) -> Any:
        if kind == ActionType.CALL_ACTIVITY:
            name, args = activity(action)
            if name == orch.RUN_PHASE:
                hit = stop_at is not None and args["index"] == stop_at
                return ("ok", {"index": args["index"], "stop": stop if hit else None, "phases": phases})
            if name == orch.FINALIZE:
                return ("ok", {"status": args["status"]})
        if kind == ActionType.CREATE_TIMER:
            return ("ok", None)
        raise AssertionError(f"unexpected action {action}")

    return respond


class Script:
    """A responder for :func:`~tests.replay.harness.drive`: activities succeed (``phases`` phases) unless
    ``failures[name]`` holds texts for their next calls; entity calls answer from ``entity`` (a list answers
    call by call, its last answer repeating; a text is an operation that threw); timers fire unless
    ``hold_timers`` (or, with ``hold_rechecks_of``, unless they are lock rechecks); ``calls`` counts the
    activity calls and ``entity_inputs`` records the entity operations."""

    def __init__(self, phases: int = 2, failures: dict[str, list[str]] | None = None,
                 entity: dict[str, Any] | None = None, inspect: dict[str, Any] | None = None,
                 hold_timers: bool = False, hold_rechecks_of: Replay | None = None) -> None:
        self.phases = phases
        self.failures = failures or {}
        self.entity = entity or {}
        self.inspect = inspect or {"status": "in_progress", "over": False}
        self.hold_timers = hold_timers
        self.rechecks_of = hold_rechecks_of  # leave lock-recheck timers pending, fire retry timers
        self.calls: dict[str, int] = {}
        self.entity_inputs: list[tuple[str, Any]] = []

    def __call__(self, kind: int, action: dict[str, Any], position: int) -> Any:
        if kind == ActionType.CREATE_TIMER:
            if self.rechecks_of is not None:
                recheck = self.rechecks_of.timer_delays()[-1] >= orch.LOCK_RECHECK_SECONDS[0]
                return None if recheck else ("ok", None)
            return None if self.hold_timers else ("ok", None)
        if kind == ActionType.WAIT_FOR_EXTERNAL_EVENT:
            return None
        if kind == ActionType.CALL_ENTITY:
            op = action["operation"]
            self.entity_inputs.append((op, json.loads(action["input"])))
            answer = self.entity.get(op, {})
            if isinstance(answer, list):  # one answer per call, the last one repeats
                answer = answer.pop(0) if len(answer) > 1 else answer[0]
            if isinstance(answer, str):
                return ("fail", answer)
            return ("ok", answer)
        name, args = activity(action)
        key = f"{name}:{args['index']}" if name == orch.RUN_PHASE else name
        self.calls[key] = self.calls.get(key, 0) + 1
        pending = self.failures.get(key) or self.failures.get(name)
        if pending:
            return ("fail", pending.pop(0).format(name=name))
        if name == orch.RUN_PHASE:  # the first one plans too: every summary says how many phases there are
            return ("ok", {"index": args["index"], "stop": None, "phases": self.phases})
        if name == orch.FINALIZE:
            return ("ok", {"status": args["status"]})
        if name == "inspect_response":
            return ("ok", self.inspect)
        return ("ok", {})


# -- writing a history step by step ---------------------------------------------------------------------
class Orchestration:
    """One orchestration instance whose history a test writes as it happens.

    ``started()`` and ``episode()`` run the orchestrator on the history so far (the first one adds
    ``ExecutionStarted``); every other verb records what happened to an action the orchestrator asked
    for, to be delivered in the next episode. Actions are found by what they are (phase 1, the pending
    timer, the acquire), not by their position in the action list.
    """

    def __init__(self, handle: Any, input: Any, **replay: Any) -> None:
        self.replay = Replay(handle, input, **replay)
        self.last: Episode | None = None

    # episodes
    def started(self) -> Episode:
        assert not self.replay.started, "already started"
        return self.episode()

    def episode(self) -> Episode:
        """The next orchestrator episode with whatever was recorded since the last one (possibly nothing:
        a replay after a worker restart)."""
        self.last = self.replay.run()
        return self.last

    def drive(self, respond: Responder) -> Episode:
        """Episodes until the run is done or waits for something ``respond`` leaves unanswered (see
        :func:`~tests.replay.harness.drive`)."""
        self.last = drive(self.replay, respond)
        return self.last

    # what happened to the actions asked for
    def phase(self, index: int) -> _Activity:
        return _Activity(self, orch.RUN_PHASE, index)

    def activity(self, function: str) -> _Activity:
        return _Activity(self, function, None)

    def entity(self, operation: str) -> _Entity:
        return _Entity(self, operation)

    def timer_fired(self) -> None:
        """The newest timer the orchestrator created and nobody fired yet fires at its ``fireAt``."""
        position, action = self._pending(lambda a: a["actionType"] == ActionType.CREATE_TIMER)
        self.replay.fire_timer(position, action["fireAt"])

    def raised(self, name: str, payload: Any) -> None:
        """An external event (``raise_event``) arrives."""
        self.replay.raise_event(name, payload)

    def timer_delays(self) -> list[float]:
        return self.replay.timer_delays()

    def scheduled(self, function: str) -> list[dict[str, Any]]:
        """The inputs of every ``TaskScheduled`` record of one activity in the history, in order."""
        return scheduled(self.replay, function)

    @property
    def history(self) -> list[dict[str, Any]]:
        return self.replay.history

    # finding the action a verb is about
    def _answered(self) -> set[int]:
        done: set[int] = set()
        for event in self.replay.history + self.replay._pending:
            for key in ("TaskScheduledId", "TimerId"):
                if key in event:
                    done.add(event[key])
        return done

    def _pending(self, match: Callable[[dict[str, Any]], bool]) -> tuple[int, dict[str, Any]]:
        assert self.last is not None, "nothing has run yet"
        answered, answered_entities = self._answered(), self._answered_entities()
        found = [(p, a) for p, a in enumerate(self.last.actions) if match(a)
                 and p in self.replay._ids and self.replay._ids[p] not in answered
                 and self.replay._entity_request_ids.get(p) not in answered_entities]
        assert found, "no such action is waiting for its answer"
        return found[-1]

    def _answered_entities(self) -> set[str]:
        return {e["Name"] for e in self.replay.history + self.replay._pending
                if e["EventType"] == History.EVENT_RAISED}


class _Activity:
    """An activity call the orchestrator scheduled (a phase by its index, or any call of ``function``)."""

    def __init__(self, story: Orchestration, function: str, index: int | None) -> None:
        self.story, self.function, self.index = story, function, index

    def _position(self) -> int:
        def match(action: dict[str, Any]) -> bool:
            if action["actionType"] != ActionType.CALL_ACTIVITY or action["functionName"] != self.function:
                return False
            return self.index is None or json.loads(action["input"]).get("index") == self.index

        return self.story._pending(match)[0]

    def returned(self, result: Any) -> None:
        """The activity returned ``result``."""
        self.story.replay.complete(self._position(), result)

    def completed(self, phases: int, stop: str | None = None, **more: Any) -> None:
        """A phase's summary: it ran to its end (or stopped with ``stop``) and the plan has ``phases``."""
        assert self.index is not None
        self.returned({"index": self.index, "stop": stop, "phases": phases, **more})

    def failed(self, reason: str = "boom", details: str = "Traceback ...") -> None:
        """The activity raised: TaskFailed with ``reason``."""
        self.story.replay.fail(self._position(), reason=reason, details=details)

    def crashed(self, reason: str = WORKER_EXIT, details: str = "") -> None:
        """The worker process died under the activity: the host records a TaskFailed naming the exit."""
        self.failed(reason.format(name=self.function), details)


class _Entity:
    """An entity operation the orchestrator called."""

    def __init__(self, story: Orchestration, operation: str) -> None:
        self.story, self.operation = story, operation

    def _position(self) -> int:
        return self.story._pending(lambda a: a["actionType"] == ActionType.CALL_ENTITY
                                   and a["operation"] == self.operation)[0]

    def answered(self, result: Any) -> None:
        self.story.replay.entity_result(self._position(), result)

    def threw(self, message: str) -> None:
        self.story.replay.entity_error(self._position(), message)


# -- an entity, batch by batch --------------------------------------------------------------------------
class Lock:
    """Plays the Durable host for one entity instance: keeps its state between batches."""

    def __init__(self, handle: Any, key: str = "conv_x") -> None:
        self.handle, self.key, self.state, self.exists = handle, key, None, False

    def run(self, *operations: tuple[str, Any]) -> list[Any]:
        batch = [{"name": op, "input": json.dumps(json.dumps(payload))} for op, payload in operations]
        context = {"self": {"name": "chain_lock", "key": self.key}, "exists": self.exists,
                   "state": self.state, "batch": batch}
        out = json.loads(self.handle(json.dumps(context)))
        self.exists, self.state = out["entityExists"], out["entityState"]
        results = []
        for result in out["results"]:
            assert not result["isError"], result
            results.append(json.loads(result["result"]))
        return results

    def snapshot(self) -> dict[str, Any]:
        return dict(json.loads(self.state)) if self.state else {}
