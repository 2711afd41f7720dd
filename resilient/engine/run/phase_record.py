"""A phase's record in its response row: where the phase stands in its turn, and what it writes there.

A phase attempt reads the row's document once (:func:`locate`: a :class:`PhaseRecord`) and then writes
through that object only: its progress while it streams (:meth:`PhaseRecord.keep_progress`) and, just
before its checkpoint, what the checkpoint does not hold (:meth:`PhaseRecord.record_checkpoint`: token
counts, a pause, the agent's state, an open plan's step record).

Open plans (``Agent.open_plan``): the plan names one phase and every step runs it. A step that yields
``NextStep`` gets a successor, so each step's result tells the orchestrator how many steps there are so
far (``index + 2`` while another follows, ``index + 1`` for the last). A step leaves any number of output
items (none, a message, tool calls), so each is told where its items start (``position``) instead of using
its index. What a finished step said is recorded in the row before its checkpoint, so a re-delivered step
answers the same without running again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from resilient.agents.base import Phase
from resilient.storage.cas import ROW_CAS_ATTEMPTS, retry_cas
from resilient.storage.errors import PreconditionFailed
from resilient.storage.ports import JsonDict, ResponseRecord

if TYPE_CHECKING:
    from resilient.engine.run.phase_items import PhaseItems
    from resilient.storage.factory import Storage

OPEN_PLAN_KEY = "open_plan"
STEPS_KEY = "steps"  # in a row's document: {"last": the newest finished step, "more": it asked for another}
OPEN_KEY = "open"  # in a step's result (the orchestrator's ``OPEN_KEY``): every step may conclude the run
ITEMS_KEY = "items"  # in a step's result: how many output items the step left
STEP_ITEMS_KEY = "step_items"  # in a row's document: {"<step>": how many output items that step left}
STATE_KEY = "agent_state"  # in a row's document: the last state the turn's agent saved (SaveState)
STATE_STEP_KEY = "agent_state_step"  # in a row's document: which step saved ``agent_state``
STATE_INPUT_KEY = "agent_state_input"  # ... and the state that step started from
PROGRESS_KEY = "step_progress"  # in a row's document: {"step": k, "value": the last SaveProgress of step k}
MAX_STEPS = 200
TOO_MANY_STEPS_MESSAGE = "The agent did not finish within {limit} steps; the run was stopped."


# ---------------------------------------------------------------------------------------------- the record
@dataclass
class PhaseRecord:
    """Phase ``index``'s record in its response row: what the row says about it (read once, by
    :func:`locate`) and the writes its attempt makes there."""

    storage: Storage = field(repr=False)
    row: ResponseRecord = field(repr=False)  # the row as the attempt read it (its ETag starts the progress CAS)
    index: int  # this response's phase (or step) number, as the orchestrator counts
    at: int  # the output position of its first item
    is_open: bool  # an open plan: the phase is a step that decides whether another follows
    plan: list[Phase]
    offset: int  # a resumed turn's first phase in the plan (``phase_offset``)
    phases: int  # how many phases this turn has so far, as this phase sees it
    finished: list[JsonDict] | None  # its own checkpointed items when it finished already, else None
    state_in_row: Any  # the agent state this step starts from, as the row says (see :func:`input_state`)
    progress: Any  # what an unfinished attempt of this step kept (SaveProgress), else None

    def __post_init__(self) -> None:
        self._known: ResponseRecord | None = self.row  # the progress CAS's newest row

    @property
    def plan_phase(self) -> int:
        """This phase's number in the plan (a resumed turn's phases continue the paused turn's)."""
        return self.offset + self.index

    @property
    def step(self) -> int | None:
        """The step number an open plan records, None for a fixed plan's phase."""
        return self.index if self.is_open else None

    @property
    def too_many_steps(self) -> bool:
        return self.is_open and not 0 <= self.index < MAX_STEPS

    async def keep_progress(self, value: Any) -> None:
        """Keep this step's progress (``PROGRESS_KEY``).

        A step that keeps progress keeps it often (a hosted agent: the model's decision, then each tool's
        result), and nothing else writes the row's document while the step runs. So each write is one
        compare-and-swap with the ETag the previous one returned (first: the row as the attempt read it),
        and the row is read again only when the swap is lost (a cancel or a steering turn changed it)."""
        changes = {PROGRESS_KEY: {"step": self.index, "value": value}}
        responses, response_id = self.storage.responses, self.row.response_id

        async def attempt() -> None:
            try:
                self._known = await responses.replace(self._known or await responses.get(response_id),
                                                      doc_changes=changes)
            except PreconditionFailed:
                self._known = None  # read the row again
                raise

        await retry_cas(attempt, ROW_CAS_ATTEMPTS,
                        lambda: PreconditionFailed(f"could not keep the progress of {response_id}"))

    async def record_checkpoint(self, items: PhaseItems, state_in: Any) -> None:
        """Before the checkpoint: the model's token counts of this phase, where a plan paused, the agent's
        state and (an open plan) whether another step follows. Keyed by phase, or overwritten, so a phase
        that runs again does not count twice; written before the checkpoint, so a finished step always has
        them. ``state_in``: the state this step started from."""
        phase, step = self.plan_phase, self.step
        changes: JsonDict = {}
        if items.state is not None:
            changes[STATE_KEY] = items.state.value
            # The state this step started from too: if the worker dies between this write and the checkpoint,
            # the step runs again and must start where it started, not from its own result.
            changes.update({STATE_STEP_KEY: self.index, STATE_INPUT_KEY: state_in})
        if step is not None:
            changes[STEPS_KEY] = {"last": step, "more": items.more, "items": len(items.items)}
        if items.usage:
            changes[f"usage_{phase}"] = {
                "input_tokens": sum(u.input_tokens for u in items.usage),
                "output_tokens": sum(u.output_tokens for u in items.usage),
                "cached_tokens": sum(u.cached_tokens for u in items.usage),
                "reasoning_tokens": sum(u.reasoning_tokens for u in items.usage),
            }
        if items.approval is not None:
            changes["paused"] = {"phase": phase, "approval_request_id": items.approval["id"],
                                 "name": items.approval["name"], "arguments": items.approval["arguments"]}
        if changes:
            count = (step, len(items.items)) if step is not None else None
            await merge_doc(self.storage, self.row.response_id, changes,
                            (lambda doc: with_step_items(doc, *count)) if count else None)


def locate(storage: Storage, row: ResponseRecord, index: int, at: int, checkpoints: list[JsonDict]) -> PhaseRecord:
    """Phase ``index``'s record, its first item at output position ``at``. Raises ``ValueError`` for a phase
    outside a fixed plan (an orchestrator bug, not an agent's answer)."""
    doc = row.doc
    plan = [Phase.from_json(p) for p in doc.get("plan") or []]
    offset = int(doc.get("phase_offset", 0))
    open_plan = is_open(doc)
    if not open_plan and not 0 <= offset + index < len(plan):
        raise ValueError(f"phase {index} is outside the plan of {len(plan)} phases")
    if open_plan:
        phases, finished = known(doc, index), finished_items(doc, index, at, checkpoints)
    else:
        phases, finished = len(plan) - offset, (checkpoints[at:] if len(checkpoints) > at else None)
    return PhaseRecord(storage, row, index, at, open_plan, plan, offset, phases, finished, input_state(doc, index),
                       progress_for(doc, index))


# ---------------------------------------------------------------------------------------------- reading
def is_open(doc: JsonDict) -> bool:
    return bool(doc.get(OPEN_PLAN_KEY))


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


def input_state(doc: JsonDict, index: int) -> Any:
    """The state step ``index`` starts from, read from the row: what the newest step before it saved; or,
    when step ``index`` itself saved its state but its checkpoint never came (the worker died between
    the two writes), the state that step had started from."""
    saved_by = doc.get(STATE_STEP_KEY)
    if saved_by is not None and int(saved_by) >= index:
        return doc.get(STATE_INPUT_KEY)
    return doc.get(STATE_KEY)


def progress_for(doc: JsonDict, index: int) -> Any:
    """What an unfinished attempt of step ``index`` kept (SaveProgress), for its next attempt; None when
    it kept nothing. Progress of another step is ignored: each step keeps its own."""
    found: Any = doc.get(PROGRESS_KEY) or {}
    return found.get("value") if found.get("step") == index else None


# ---------------------------------------------------------------------------------------------- writing
def with_step_items(doc: JsonDict, step: int, items: int) -> JsonDict:
    """The row's per-step item counts with step ``step``'s (read from the row as it is now, so steps
    recorded by other processes stay)."""
    found: Any = doc.get(STEP_ITEMS_KEY) or {}
    return {STEP_ITEMS_KEY: {**found, str(step): items}}


async def merge_doc(storage: Storage, response_id: str, changes: JsonDict,
                    derived: Callable[[JsonDict], JsonDict] | None = None) -> None:
    """Merge ``changes`` (and what ``derived`` makes of the current document) into the row's document; a
    lost CAS means a control column changed meanwhile (cancel, steering): read again."""

    async def attempt() -> None:
        current = await storage.responses.get(response_id)
        more = derived(current.doc) if derived is not None else {}
        await storage.responses.replace(current, doc_changes={**changes, **more})

    await retry_cas(attempt, ROW_CAS_ATTEMPTS,
                    lambda: PreconditionFailed(f"could not record the phase of {response_id}"))
