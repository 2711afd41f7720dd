"""Open plans: agents that decide their steps as they go (``Agent.open_plan``).

The plan names one phase; every step runs it. A step that yields ``NextStep`` gets a successor, so each
step's result tells the orchestrator how many steps there are so far (``index + 2`` while another follows,
``index + 1`` for the last). A step leaves any number of output items (none, a message, tool calls), so
each is told where its items start (``position``) instead of using its index. What a finished step said is
recorded in the row before its checkpoint, so a re-delivered step answers the same without running again.
"""

from __future__ import annotations

from typing import Any

from resilient.storage.ports import JsonDict

OPEN_PLAN_KEY = "open_plan"
STEPS_KEY = "steps"  # in a row's document: {"last": the newest finished step, "more": it asked for another}
OPEN_KEY = "open"  # in a step's result (the orchestrator's ``OPEN_KEY``): every step may conclude the run
ITEMS_KEY = "items"  # in a step's result: how many output items the step left
MAX_STEPS = 200
TOO_MANY_STEPS_MESSAGE = "The agent did not finish within {limit} steps; the run was stopped."


def is_open(doc: JsonDict) -> bool:
    return bool(doc.get(OPEN_PLAN_KEY))


def record(step: int, more: bool, items: int) -> JsonDict:
    return {"last": step, "more": more, "items": items}


STEP_ITEMS_KEY = "step_items"  # in a row's document: {"<step>": how many output items that step left}


def with_step_items(doc: JsonDict, step: int, items: int) -> JsonDict:
    """The row's per-step item counts with step ``step``'s (read from the row as it is now, so steps
    recorded by other processes stay)."""
    found: Any = doc.get(STEP_ITEMS_KEY) or {}
    return {STEP_ITEMS_KEY: {**found, str(step): items}}


def finished_items(doc: JsonDict, index: int, at: int, checkpoints: list[JsonDict]) -> list[JsonDict] | None:
    """Step ``index``'s own output items when it finished (its items are stored), else None.

    Why counts per step: a step may leave no item (a quiet workflow superstep), so the items stored after
    position ``at`` may be later steps'. A run resumed from its start (a repaired orchestration) re-delivers
    every step; each must answer with its own items, or the next step's position is wrong and it runs
    again. Rows written before the counts existed fall back to "any item at or after ``at``"."""
    counts: Any = doc.get(STEP_ITEMS_KEY)
    if isinstance(counts, dict):
        own = counts.get(str(index))
        if own is None or len(checkpoints) < at + int(own):
            return None
        return checkpoints[at:at + int(own)]
    if len(checkpoints) > at:
        return checkpoints[at:]
    return [] if finished_without_items(doc, index) else None


def finished_without_items(doc: JsonDict, index: int) -> bool:
    """Step ``index`` finished and left no output item: its record in the row is its only checkpoint. (A
    step with items is finished once they are stored; its record is written just before them.)"""
    found: Any = doc.get(STEPS_KEY) or {}
    return int(found.get("last", -1)) == index and int(found.get("items", 1)) == 0


def known(doc: JsonDict, index: int) -> int:
    """How many steps the turn has so far, as step ``index`` sees it: a finished step before the newest
    one was followed by another; the newest says whether one follows; a step not finished yet may be the last."""
    found: Any = doc.get(STEPS_KEY) or {}
    last = int(found.get("last", -1))
    if index < last or (index == last and found.get("more")):
        return index + 2
    return index + 1


def mark(result: JsonDict, is_open_plan: bool, items: int = 0) -> JsonDict:
    """An open plan's step result says so and how many output items the step left: the orchestrator adds
    them up into the next step's ``position`` (its first item's place in the output)."""
    if is_open_plan:
        result[OPEN_KEY] = True
        result[ITEMS_KEY] = items
    return result


STATE_STEP_KEY = "agent_state_step"  # in a row's document: which step saved ``agent_state``
STATE_INPUT_KEY = "agent_state_input"  # ... and the state that step started from


def state_record(step: int, state_in: Any) -> JsonDict:
    return {STATE_STEP_KEY: step, STATE_INPUT_KEY: state_in}


def input_state(doc: JsonDict, index: int) -> Any:
    """The state step ``index`` starts from, read from the row: what the newest step before it saved; or,
    when step ``index`` itself saved its state but its checkpoint never came (the worker died between
    the two writes), the state that step had started from."""
    from resilient.engine.run.agent_request import STATE_KEY

    saved_by = doc.get(STATE_STEP_KEY)
    if saved_by is not None and int(saved_by) >= index:
        return doc.get(STATE_INPUT_KEY)
    return doc.get(STATE_KEY)


PROGRESS_KEY = "step_progress"  # in a row's document: {"step": k, "value": the last SaveProgress of step k}


def progress_record(step: int, value: Any) -> JsonDict:
    return {PROGRESS_KEY: {"step": step, "value": value}}


def progress_for(doc: JsonDict, index: int) -> Any:
    """What an unfinished attempt of step ``index`` kept (SaveProgress), for its next attempt; None when
    it kept nothing. Progress of another step is ignored: each step keeps its own."""
    found: Any = doc.get(PROGRESS_KEY) or {}
    return found.get("value") if found.get("step") == index else None
