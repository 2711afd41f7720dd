"""The orchestration's terms: what the orchestrator, its activities, the HTTP layer and the repair path agree on.

These are the words that go into Durable history (activity, entity and event names), the keys of an
orchestration's input and of its activities' results, and what those results mean for the run (a phase's
``stop`` word, an inspection's status). Plain data, no SDK and no I/O: the HTTP layer and the repair path
start orchestrations and raise their events with these names without importing the orchestrator itself
(:mod:`resilient.engine.orchestration.orchestrator`, the control flow over them).

Every value here is recorded in the histories of running orchestrations: renaming one is a change that
older histories cannot replay (see ``ORCHESTRATION_VERSION``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

JsonDict = dict[str, Any]

ORCHESTRATOR = "responses_orchestrator"  # the orchestrator function's name: what a start names
RUN_PHASE = "run_phase"
FINALIZE = "finalize_response"
MARK_QUEUED = "mark_queued"
WAKE_NEXT = "wake_next_turn"
INSPECT = "inspect_response"
FORGET = "forget_response"
CHAIN_LOCK_ENTITY = "chain_lock"
LOCK_GRANTED_EVENT = "lock_granted"
CANCEL_EVENT = "cancel"
CLIENT_DONE_EVENT = "client_done"
FORGET_AFTER_KEY = "forget_after_seconds"  # in the input of a store=false run: the grace in seconds
# In the input of a chained turn whose create found no unfinished turn ahead of it: a lock held by another
# turn then most likely belongs to a finished one whose orchestration died before releasing it.
NOTHING_AHEAD_KEY = "nothing_ahead"
# In the input of a stored root turn (its chain is named by its own id): the chain's lock starts out held by
# it (``chainlock.initial_state``), so it takes no lock and its first episode schedules the first phase. An
# input flag rather than a rule on the ids: an execution started before this rule existed replays its
# ``acquire`` as it was recorded.
OWNS_LOCK_KEY = "owns_lock"
FINAL_KEY = "final"  # in an outcome: the last phase already concluded the run (its finalize result)
OPEN_KEY = "open"  # in a run_phase result: the plan is open (steps decided at run time; each may be the last)
ITEMS_KEY = "items"  # in an open plan's step result: how many output items the step left
# In the input of a traced run: the W3C trace context of the request that created it. Copied as is into every
# activity's input (only when present, so an untraced run schedules exactly what it always did), so each
# activity's span joins the run's trace (see resilient.telemetry.spans). Not a version change: the steps and
# their order are the same, and an activity ignores an input key it does not know.
TRACE_PARENT_KEY = "traceparent"

# An inspection's status that means the run already ended.
TERMINAL = frozenset({"completed", "failed", "cancelled", "incomplete", "gone"})


def _stop_failed(result: JsonDict) -> JsonDict:
    return {"status": "failed", "error": result.get("error") or {"code": "server_error", "message": "failed"}}


# What a ``stop`` word in a plan/run_phase result means for the run. Unknown words end the run completed.
STOP_OUTCOMES: dict[str, Callable[[JsonDict], JsonDict]] = {
    "cancelled": lambda result: {"status": "cancelled"},
    "steered": lambda result: {"status": "completed", "steered": True},
    "paused": lambda result: {"status": "completed", "ended": "paused"},  # waits for an approval answer
    "tool_calls": lambda result: {"status": "completed", "ended": "tool_calls"},  # waits for tool outputs
    "failed": _stop_failed,
}


def outcome_of_stop(result: JsonDict) -> JsonDict:
    handler = STOP_OUTCOMES.get(str(result.get("stop")))
    return handler(result) if handler is not None else {"status": "completed"}
