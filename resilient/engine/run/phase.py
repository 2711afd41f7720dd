"""One attempt of one phase, top to bottom: :func:`run_attempt` and the parts it calls, in call order.

1. :func:`read_start`: the row, its control columns and the checkpoints (from this process's memory of the
   run when its kept writer agrees, else from storage);
2. :func:`~resilient.engine.run.phase_record.locate`: where the phase stands in its turn;
3. :func:`answer_before_the_log`: a phase whose checkpoint exists is returned as is (no second stream); a
   cancelled or steered run stops here;
4. :func:`~resilient.engine.run.claim.claim_log_end`: a phase that finds events after the last checkpoint is
   a *recovery* (``recovery.py``): it closes the item left open, appends ``response.in_progress`` carrying
   the snapshot as of the last checkpoint (clients drop their partial item, rule R4) and re-runs only this
   phase, as new items at new stream indexes; :func:`refuse_rerun`: non-background responses are not
   re-run but failed (R8), nor are the steps of an agent that is not resumable;
5. :func:`~resilient.engine.run.agent_request.phase_context`: what the agent is given;
6. :func:`stream_phase`: the agent's outputs into the log (``pump.py``), every append fenced by the blob's
   append position, so a zombie's next append fails and it stops (R6); agent errors are answers, not
   exceptions (:func:`failed_attempt`): a permanent one returns ``{"stop": "failed"}``, a transient one
   ``{"retry_after": s}``;
7. :func:`checkpoint`: the phase's record in the row, then its output items;
8. :func:`final_answer`: the summary the orchestrator gets.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from resilient.agents.base import Agent, AgentRequest, PhaseContext, TransientAgentError
from resilient.engine.run import recovery
from resilient.engine.run.agent_request import agent_request, phase_context, phase_outputs
from resilient.engine.run.batching import Appender, Tuning
from resilient.engine.run.claim import Claim, Superseded, claim_log_end
from resilient.engine.run.liveness import Liveness
from resilient.engine.run.phase_items import AgentOutputError, PhaseItems
from resilient.engine.run.phase_record import (
    ITEMS_KEY,
    MAX_STEPS,
    OPEN_KEY,
    TOO_MANY_STEPS_MESSAGE,
    PhaseRecord,
    locate,
)
from resilient.engine.run.pump import stream
from resilient.engine.run.runmemo import RunMemo, RunMemory
from resilient.engine.run.shutdown import WorkerShuttingDown
from resilient.engine.worker_state import WorkerState
from resilient.protocol.items import ItemStatus, text_of
from resilient.settings import Settings
from resilient.storage.ports import TERMINAL_STATUSES, Control, EventWriter, JsonDict, ResponseRecord
from resilient.telemetry import spans

if TYPE_CHECKING:
    from resilient.storage.factory import Storage

log = logging.getLogger("resilient.engine")

PHASE_DEADLINE_MESSAGE = (
    "Phase {index} did not finish within {seconds:.0f} s (the limit kept below the host's functionTimeout); "
    "the run was stopped."
)
NON_BACKGROUND_CRASH_MESSAGE = (
    "The worker running this response stopped. Non-background responses are not re-run; "
    "use background=true for crash-resilient runs."
)
NOT_RESUMABLE_MESSAGE = (
    "The worker running this response stopped during step {index}, and this agent is not resumable (its "
    "steps must not run twice): the run was interrupted and not continued."
)
DEFAULT_RETRY_AFTER_SECONDS = 2.0


class PhaseParts(Protocol):
    """What a phase attempt uses of its engine: read at each attempt, so a part swapped on the engine
    (a test's tuning or liveness) applies to the next attempt."""

    storage: Storage
    agent: Agent
    settings: Settings
    tuning: Tuning
    liveness: Liveness
    runs: RunMemory
    worker: WorkerState


async def run_attempt(parts: PhaseParts, response_id: str, index: int, deadline: float | None = None,
                      written: list[JsonDict] | None = None, position: int | None = None) -> JsonDict:
    """``written``, when given, receives the response's output as this call checkpointed it (every
    item before the phase, then the phase's own), when the phase streamed and was checkpointed here.
    ``position``: the output position of the phase's first item (default: its index; see
    :meth:`Engine.run_phase`)."""
    start = await read_start(parts, response_id, index if position is None else position)
    record, control = start.record, start.control
    spans.set_current(chain_id=record.doc.get("chain_id"))
    phase_row = locate(parts.storage, record, index, start.at, start.checkpoints)
    early = answer_before_the_log(phase_row, control)
    if early is not None:
        return early
    previous = start.checkpoints[:phase_row.at]
    claim = await claim_log_end(parts.storage, parts.liveness, record, phase_row.at, start.writer, previous,
                                deadline)
    if isinstance(claim, list):  # another attempt, still writing, finished the phase meanwhile
        return answer(phase_row, claim[phase_row.at:], control.cancel_requested, control.pending_input_count)
    refused = refuse_rerun(parts.agent, phase_row, claim.crashed)
    if refused is not None:
        return refused
    request = start.request or await agent_request(parts.storage, record)
    state = start_state(phase_row, start, request)
    context = phase_context(request, phase_row, control, previous, state, is_recovery=claim.recovering)
    claim.items = items = PhaseItems(claim.first_index, {str(t.get("name")) for t in request.tools},
                                     request.tool_choice, response_id=response_id)
    streamed = await stream_phase(parts, phase_row, claim, context, items, deadline)
    if not isinstance(streamed, Streamed):
        return streamed  # superseded by another attempt, or the agent failed
    output = await checkpoint(parts.storage, phase_row, claim, items, previous, state)
    kept = items.state.value if items.state is not None else (state if index > 0 else None)
    parts.runs.remember(RunMemo(record, request, output, kept))
    if written is not None:
        written.extend(output)
    log.info("phase done", extra={"response_id": response_id, "phase": index, "items": len(items.items),
                                  "chars": sum(len(text_of(i)) for i in items.items),
                                  "storage_calls": claim.storage_calls})
    return final_answer(parts.settings, phase_row, items, context, streamed)


@dataclass
class Start:
    """What an attempt knows before it decides anything. ``writer``, ``request`` and ``remembered_state``
    are set only when this process drove the run up to here (:func:`as_remembered`)."""

    at: int  # the output position of the phase's first item
    record: ResponseRecord
    control: Control
    checkpoints: list[JsonDict]
    writer: EventWriter | None = None
    request: AgentRequest | None = None
    remembered: bool = False
    remembered_state: Any = None


async def read_start(parts: PhaseParts, response_id: str, at: int) -> Start:
    """The row, its control columns and the checkpoints: remembered, or read from storage."""
    storage = parts.storage
    remembered = as_remembered(storage, parts.runs, response_id, at)
    if remembered is None:
        record = await storage.responses.get(response_id)  # carries the control columns too
        control = Control(record.status, record.cancel_requested, record.pending_input_count)
        return Start(at, record, control, await storage.items.list_output_items(response_id))
    # This process drove the run up to here: the claim's fenced append proves nothing happened to the log
    # meanwhile (else it re-reads storage, as a re-delivery does). The control columns need no read while
    # this process's newest snapshot (the plan's CAS, the previous phase's reads, a cancel or steer handled
    # here) is younger than the control interval: the same staleness a running phase accepts.
    memo, writer = remembered
    control = parts.worker.controls.fresh(response_id, parts.tuning.control_interval_s, time.monotonic()) \
        or await storage.responses.get_control(response_id)
    return Start(at, memo.record, control, memo.checkpoints, writer, memo.request, True, memo.state)


def as_remembered(storage: Storage, runs: RunMemory, response_id: str,
                  index: int) -> tuple[RunMemo, EventWriter] | None:
    """What this process remembers of the run and its kept writer, when they agree that the log ends
    where phase ``index`` starts; else None (storage is read, as for any other delivery)."""
    memo = runs.pop(response_id)
    writer = storage.events.take_writer(response_id)
    if memo is None or writer is None or len(memo.checkpoints) != index:
        return None
    if not recovery.boundary(writer.last_event, memo.checkpoints):
        return None
    return memo, writer


def answer_before_the_log(phase_row: PhaseRecord, control: Control) -> JsonDict | None:
    """The answer of an attempt that needs no log: too many steps, a finished phase (a re-delivery: return
    it, stream nothing; the runtime re-delivers the run's current step, a duplicate of an older one is
    answered too and its answer dropped), a finished or cancelled run, a steered one. Else None."""
    if phase_row.too_many_steps:
        return {"index": phase_row.index, "stop": "failed", "error": {
            "code": "server_error", "message": TOO_MANY_STEPS_MESSAGE.format(limit=MAX_STEPS)}}
    if phase_row.finished is not None:
        return answer(phase_row, phase_row.finished, control.cancel_requested, control.pending_input_count)
    if control.status in TERMINAL_STATUSES or control.cancel_requested:
        return {"index": phase_row.index, "stop": "cancelled"}
    if control.pending_input_count > 0:
        return {"index": phase_row.index, "stop": "steered"}
    return None


def refuse_rerun(agent: Agent, phase_row: PhaseRecord, crashed: bool) -> JsonDict | None:
    """A crashed attempt's phase is not run again for a non-background response (R8), nor for an agent
    whose steps must not run twice: the answer that fails the run. Else None."""
    if not crashed:
        return None
    record = phase_row.row
    where = {"response_id": record.response_id, "phase": phase_row.index}
    if not record.doc.get("background", False):
        log.warning("non-background crash", extra=where)
        return {"index": phase_row.index, "stop": "failed",
                "error": {"code": "server_error", "message": NON_BACKGROUND_CRASH_MESSAGE}}
    if not getattr(agent, "resumable", True):
        log.warning("crash of an agent that is not resumable", extra=where)
        return {"index": phase_row.index, "stop": "failed",
                "error": {"code": "server_error", "message": NOT_RESUMABLE_MESSAGE.format(index=phase_row.index)}}
    return None


def start_state(phase_row: PhaseRecord, start: Start, request: AgentRequest) -> Any:
    """The agent state this step starts from: the chain's previous turn's (the first step), the one this
    process remembers its last step left, or the row's."""
    if phase_row.index == 0:
        return request.previous_state
    return start.remembered_state if start.remembered else phase_row.state_in_row


@dataclass(frozen=True)
class Streamed:
    """How a phase that streamed to its end (its items closed in the log) ended."""

    stopped: bool  # early: a cancel or steer
    overtime: bool  # past the phase deadline


async def stream_phase(parts: PhaseParts, phase_row: PhaseRecord, claim: Claim, context: PhaseContext,
                       items: PhaseItems, deadline: float | None) -> Streamed | JsonDict:
    """Stream the agent's outputs and close the phase's items in the log. Returns how it ended, or the
    answer of an attempt that ends without a checkpoint of its own (superseded, the agent failed).
    Raises :class:`WorkerShuttingDown` when SIGTERM stopped it (it runs again elsewhere)."""
    storage, record = parts.storage, phase_row.row
    response_id = record.response_id
    source = phase_outputs(parts.agent, record.doc, context)
    with parts.worker.feed.writing(response_id):  # readers here get the phase from the feed, not by polling
        try:
            stopped, failure, overtime, appender = await stream(
                storage.responses, parts.tuning, parts.worker, response_id, claim, context, items, source, deadline,
                keep=phase_row.keep_progress)
        except Superseded as done:
            return answer(phase_row, done.items, context.cancelled, context.pending_input_count)
        except Exception as exc:
            log.warning("phase attempt failed: %s: %s", type(exc).__name__, exc,
                        extra={"response_id": response_id, "phase": phase_row.index})
            raise
        if failure is not None:
            return await failed_attempt(storage, response_id, phase_row.at, record, claim, items, failure, appender)
        if stopped and context.shutting_down:
            # No checkpoint: the step runs again on another worker (its attempt starts with a recovery reset),
            # and the item this attempt opened is closed now rather than left open for that one to close.
            if claim.appended or appender.waiting:
                await appender.finish(items.close("incomplete", ensure_item=False))
            log.warning("phase stopped: the worker is shutting down",
                        extra={"response_id": response_id, "phase": phase_row.index})
            raise WorkerShuttingDown(f"the worker stopped step {phase_row.index} to shut down; it runs again elsewhere")
        status: ItemStatus = "incomplete" if stopped or overtime else "completed"
        try:
            # A step of an open plan may end with no item (a workflow superstep that said nothing): its
            # record in the row is then its checkpoint. A phase of a fixed plan always has one.
            closing = items.close(status, ensure_item=not phase_row.is_open)
        except AgentOutputError as exc:  # a streamed call whose arguments are not a JSON object
            return await failed_attempt(storage, response_id, phase_row.at, record, claim, items, exc, appender)
        try:
            # with the events still waiting, one append (it claims the log when the agent never waited)
            await appender.finish(closing)
        except Superseded as done:
            return answer(phase_row, done.items, context.cancelled, context.pending_input_count)
        parts.worker.expect_next_activity(response_id)
    return Streamed(stopped, overtime)


async def checkpoint(storage: Storage, phase_row: PhaseRecord, claim: Claim, items: PhaseItems,
                     previous: list[JsonDict], state_in: Any) -> list[JsonDict]:
    """The phase's record in the row, then its output items (the checkpoint); the writer is kept for the
    run's next activity here. Returns the response's output so far."""
    await phase_row.record_checkpoint(items, state_in)
    response_id = phase_row.row.response_id
    if len(items.items) == 1:
        await storage.items.put_output_item(response_id, phase_row.at, items.items[0])
    elif items.items:
        await storage.items.put_output_items(response_id, phase_row.at, items.items)
    storage.events.keep_writer(claim.writer)
    return [*previous, *items.items]


async def failed_attempt(
    storage: Storage, response_id: str, index: int, record: ResponseRecord, claim: Claim, items: PhaseItems,
    failure: Exception, appender: Appender,
) -> JsonDict:
    """An agent error: close what was streamed (``incomplete``), then answer the orchestrator.

    Transient errors on background runs ask for a retry after ``retry_after`` (the partial item stays
    in the stream only, closed; the next attempt starts with a recovery reset). Everything else fails
    the response with the agent's message; what was streamed is kept as its (incomplete) output.
    """
    log.warning("phase attempt failed: %s: %s", type(failure).__name__, failure,
                extra={"response_id": response_id, "phase": index})
    message = str(failure)[:1000] or type(failure).__name__
    code = getattr(failure, "code", None) or "server_error"
    if claim.appended or appender.waiting:
        await appender.finish(items.close("incomplete", ensure_item=False))
    error = {"code": code, "message": message}
    if isinstance(failure, TransientAgentError) and record.doc.get("background", False):
        retry_after = failure.retry_after if failure.retry_after is not None else DEFAULT_RETRY_AFTER_SECONDS
        return {"index": index, "retry_after": max(0.0, float(retry_after)), "error": error}
    if items.items:
        await storage.items.put_output_items(response_id, index, items.items)
    return {"index": index, "stop": "failed", "error": error}


def final_answer(settings: Settings, phase_row: PhaseRecord, items: PhaseItems, context: PhaseContext,
                 streamed: Streamed) -> JsonDict:
    """A checkpointed phase's answer: failed past the deadline, else its summary (an open plan's step
    counts one more step when it asked for another)."""
    if streamed.overtime:
        log.warning("phase deadline", extra={"response_id": context.request.response_id, "phase": phase_row.index})
        seconds = settings.phase_deadline_seconds or 0.0
        return {"index": phase_row.index, "stop": "failed", "error": {
            "code": "server_error", "message": PHASE_DEADLINE_MESSAGE.format(index=phase_row.index, seconds=seconds)}}
    phases = phase_row.index + (2 if items.more else 1) if phase_row.is_open else phase_row.phases
    return answer(phase_row, items.items, context.cancelled, context.pending_input_count, stopped=streamed.stopped,
                  phases=phases)


def answer(phase_row: PhaseRecord, items: Sequence[JsonDict], cancelled: bool, pending: int, *,
           stopped: bool | None = None, phases: int | None = None) -> JsonDict:
    """The summary of phase ``phase_row.index`` with these items: why it stopped (``stopped``: early, for a
    cancel or steer; by default, when its last item is incomplete), its size, how many phases the turn has
    (``phase_row.phases`` unless given); an open plan's step also says so and how many output items it left
    (the orchestrator adds them up into the next step's ``position``)."""
    kinds = {item.get("type") for item in items}
    if stopped is None:
        stopped = bool(items) and items[-1].get("status") == "incomplete"
    stop = None
    if "mcp_approval_request" in kinds:
        stop = "paused"
    elif "function_call" in kinds:
        stop = "tool_calls"
    elif cancelled:
        stop = "cancelled"
    elif pending > 0 or stopped:
        stop = "steered"
    found: JsonDict = {"index": phase_row.index, "stop": stop, "chars": sum(len(text_of(i)) for i in items),
                       "phases": phase_row.phases if phases is None else phases}
    if phase_row.is_open:
        found[OPEN_KEY] = True
        found[ITEMS_KEY] = len(items)
    return found
