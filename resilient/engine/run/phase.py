"""One attempt of one phase: read what is left to do, stream it, checkpoint its item(s), summarise.

A phase whose checkpoint exists is returned as is (no second stream). A phase that finds events after
the last checkpoint is a *recovery* (``recovery.py``): it closes the item left open, appends
``response.in_progress`` carrying the snapshot as of the last checkpoint (clients drop their partial item,
rule R4) and re-runs only this phase, as new items at new stream indexes. Non-background responses are not
re-run but failed (R8). Every append is fenced by the blob's append position, so a zombie's next append
fails and it stops (R6). Agent errors are answers, not exceptions: a permanent one returns
``{"stop": "failed"}``, a transient one ``{"retry_after": s}``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from resilient.agents.base import Agent, Approval, Phase, PhaseContext, PhaseOutput, TransientAgentError
from resilient.engine.chain.turns import STEERING_KEY
from resilient.engine.run import recovery, steps
from resilient.engine.run.agent_request import STATE_KEY, agent_request
from resilient.engine.run.batching import Appender, Tuning
from resilient.engine.run.claim import Claim, Superseded, head
from resilient.engine.run.liveness import Liveness, behind_live_writer
from resilient.engine.run.phase_items import AgentOutputError, PhaseItems
from resilient.engine.run.progress import ProgressWriter
from resilient.engine.run.pump import stream
from resilient.engine.run.runmemo import RunMemo, RunMemory
from resilient.engine.run.shutdown import WorkerShuttingDown
from resilient.engine.worker_state import WorkerState
from resilient.protocol.items import ItemStatus, text_of
from resilient.settings import Settings
from resilient.storage.cas import ROW_CAS_ATTEMPTS, retry_cas
from resilient.storage.errors import PreconditionFailed
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
    caches: WorkerState


async def run_attempt(parts: PhaseParts, response_id: str, index: int, deadline: float | None = None,
                      written: list[JsonDict] | None = None, position: int | None = None) -> JsonDict:
    """``written``, when given, receives the response's output as this call checkpointed it (every
    item before the phase, then the phase's own), when the phase streamed and was checkpointed here.
    ``position``: the output position of the phase's first item (default: its index; see
    :meth:`Engine.run_phase`)."""
    storage = parts.storage
    at = index if position is None else position
    remembered = as_remembered(storage, parts.runs, response_id, at)
    if remembered is not None:
        # This process drove the run up to here: the claim's fenced append below proves nothing happened
        # to the log meanwhile (else it re-reads storage, as a re-delivery does). The control columns
        # need no read while this process's newest snapshot (the plan's CAS, the previous phase's
        # reads, a cancel or steer handled here) is younger than the control interval: the same
        # staleness a running phase accepts.
        memo, writer = remembered
        record, checkpoints, request = memo.record, memo.checkpoints, memo.request
        control = parts.caches.controls.fresh(response_id, parts.tuning.control_interval_s, time.monotonic()) \
            or await storage.responses.get_control(response_id)
    else:
        record = await storage.responses.get(response_id)  # carries the control columns too
        control = Control(record.status, record.cancel_requested, record.pending_input_count)
        checkpoints = await storage.items.list_output_items(response_id)
        writer = None
        request = None
    spans.set_current(chain_id=record.doc.get("chain_id"))
    plan = [Phase.from_json(p) for p in record.doc.get("plan") or []]
    offset = int(record.doc.get("phase_offset", 0))
    is_open = steps.is_open(record.doc)
    if is_open and not 0 <= index < steps.MAX_STEPS:
        return {"index": index, "stop": "failed", "error": {
            "code": "server_error", "message": steps.TOO_MANY_STEPS_MESSAGE.format(limit=steps.MAX_STEPS)}}
    if not is_open and not 0 <= offset + index < len(plan):
        raise ValueError(f"phase {index} is outside the plan of {len(plan)} phases")
    phases = steps.known(record.doc, index) if is_open else len(plan) - offset  # this turn's phases so far

    finished = steps.finished_items(record.doc, index, at, checkpoints) if is_open else (
        checkpoints[at:] if len(checkpoints) > at else None)
    if finished is not None:
        # a re-delivery of a finished phase: return it, stream nothing (the runtime re-delivers the run's
        # current step; a duplicate of an older one is answered too, and its answer is dropped)
        return steps.mark(summary(index, finished, control.cancel_requested, control.pending_input_count,
                                  phases=phases), is_open, len(finished))
    if control.status in TERMINAL_STATUSES or control.cancel_requested:
        return {"index": index, "stop": "cancelled"}
    if control.pending_input_count > 0:
        return {"index": index, "stop": "steered"}
    previous = checkpoints[:at]
    writer = writer or await storage.events.open_writer(response_id)
    head_events, first_index, crashed = await head(storage, record, writer, previous)
    # The log does not end where the checkpoints say this phase starts (inside an item, or after an item
    # that has no checkpoint yet): is its writer dead, or another delivery of this phase? (A live attempt
    # checkpoints right after its item's closing events; a duplicate delivery that read the checkpoints a
    # moment before that sees none and would otherwise stream the phase again.)
    if head_events:
        found = await behind_live_writer(storage.events, storage.items, response_id, at, writer,
                                         parts.liveness, deadline)
        if isinstance(found, list):
            return steps.mark(summary(index, found[at:], control.cancel_requested,
                                      control.pending_input_count, phases=phases), is_open, len(found[at:]))
        if found is not writer:
            writer = found
            head_events, first_index, crashed = await head(storage, record, writer, previous)
    if crashed and not record.doc.get("background", False):
        log.warning("non-background crash", extra={"response_id": response_id, "phase": index})
        return {"index": index, "stop": "failed",
                "error": {"code": "server_error", "message": NON_BACKGROUND_CRASH_MESSAGE}}
    if crashed and not getattr(parts.agent, "resumable", True):
        log.warning("crash of an agent that is not resumable", extra={"response_id": response_id, "phase": index})
        return {"index": index, "stop": "failed",
                "error": {"code": "server_error", "message": NOT_RESUMABLE_MESSAGE.format(index=index)}}

    request = request or await agent_request(storage, record)
    if index == 0:
        state = request.previous_state
    elif remembered is not None:
        state = remembered[0].state
    else:
        state = steps.input_state(record.doc, index)
    context = PhaseContext(
        request=request,
        plan=plan,
        phase_index=offset + index,
        is_recovery=bool(head_events),
        output_so_far=previous,
        pending_input_count=control.pending_input_count,
        cancelled=control.cancel_requested,
        approval=approval_for(record.doc, offset + index),
        state=state,
        is_steered_turn=bool(record.doc.get(STEERING_KEY)),
        conversation_chain_id=record.doc.get("chain_id"),
        progress=steps.progress_for(record.doc, index),
    )
    items = PhaseItems(first_index, {str(t.get("name")) for t in request.tools}, request.tool_choice,
                       response_id=response_id)
    claim = Claim(storage, parts.liveness, record, at, writer, head_events, first_index, previous, items,
                  deadline)
    denied = record.doc.get("resume") and not record.doc["resume"].get("approve")
    source = denial(record.doc) if denied else parts.agent.run_phase(context)
    with parts.caches.feed.writing(response_id):  # readers here get the phase from the feed, not by polling
        try:
            stopped, failure, overtime, appender = await stream(
                storage.responses, parts.tuning, parts.caches, response_id, claim, context, items, source, deadline,
                keep=ProgressWriter(storage, record, index))
        except Superseded as done:
            return steps.mark(summary(index, done.items, context.cancelled, context.pending_input_count,
                                      phases=phases), is_open, len(done.items))
        except Exception as exc:
            log.warning("phase attempt failed: %s: %s", type(exc).__name__, exc,
                        extra={"response_id": response_id, "phase": index})
            raise
        if failure is not None:
            return await failed_attempt(storage, response_id, at, record, claim, items, failure, appender)
        if stopped and context.shutting_down:
            # No checkpoint: the step runs again on another worker (its attempt starts with a recovery reset),
            # and the item this attempt opened is closed now rather than left open for that one to close.
            if claim.appended or appender.waiting:
                await appender.finish(items.close("incomplete", ensure_item=False))
            log.warning("phase stopped: the worker is shutting down", extra={"response_id": response_id,
                                                                             "phase": index})
            raise WorkerShuttingDown(f"the worker stopped step {index} to shut down; it runs again elsewhere")

        status: ItemStatus = "incomplete" if stopped or overtime else "completed"
        try:
            # A step of an open plan may end with no item (a workflow superstep that said nothing): its
            # record in the row is then its checkpoint. A phase of a fixed plan always has one.
            closing = items.close(status, ensure_item=not is_open)
        except AgentOutputError as exc:  # a streamed call whose arguments are not a JSON object
            return await failed_attempt(storage, response_id, at, record, claim, items, exc, appender)
        try:
            # with the events still waiting, one append (it claims the log when the agent never waited)
            await appender.finish(closing)
        except Superseded as done:
            return steps.mark(summary(index, done.items, context.cancelled, context.pending_input_count,
                                      phases=phases), is_open, len(done.items))
        parts.caches.expect_next_activity(response_id)
    await record_phase(storage, record, offset + index, items, step=index if is_open else None,
                       state_in=(index, state))
    if len(items.items) == 1:
        await storage.items.put_output_item(response_id, at, items.items[0])
    elif items.items:
        await storage.items.put_output_items(response_id, at, items.items)
    storage.events.keep_writer(claim.writer)
    output = [*previous, *items.items]
    kept = items.state.value if items.state is not None else (state if index > 0 else None)
    parts.runs.remember(RunMemo(record, request, output, kept))
    if written is not None:
        written.extend(output)
    log.info("phase done", extra={"response_id": response_id, "phase": index, "items": len(items.items),
                                  "chars": sum(len(text_of(i)) for i in items.items),
                                  "storage_calls": claim.storage_calls})
    if overtime:
        log.warning("phase deadline", extra={"response_id": response_id, "phase": index})
        seconds = parts.settings.phase_deadline_seconds or 0.0
        return {"index": index, "stop": "failed", "error": {
            "code": "server_error", "message": PHASE_DEADLINE_MESSAGE.format(index=index, seconds=seconds)}}
    if is_open:
        phases = index + (2 if items.more else 1)
    return steps.mark(summary(index, items.items, context.cancelled, context.pending_input_count,
                              stopped=stopped, phases=phases), is_open, len(items.items))


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


async def record_phase(storage: Storage, record: ResponseRecord, phase: int, items: PhaseItems,
                       step: int | None = None, state_in: tuple[int, Any] | None = None) -> None:
    """Before the checkpoint: the model's token counts of this phase, where a plan paused, the agent's
    state and (an open plan, ``step``) whether another step follows. Keyed by phase, or overwritten, so a
    phase that runs again does not count twice; written before the checkpoint, so a finished step always
    has them."""
    changes: JsonDict = {}
    if items.state is not None:
        changes[STATE_KEY] = items.state.value
        # The state this step started from too: if the worker dies between this write and the checkpoint,
        # the step runs again and must start where it started, not from its own result.
        if state_in is not None:
            changes.update(steps.state_record(*state_in))
    if step is not None:
        changes[steps.STEPS_KEY] = steps.record(step, items.more, len(items.items))
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
        await merge_doc(storage, record.response_id, changes,
                        (lambda doc: steps.with_step_items(doc, *count)) if count else None)


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


def summary(index: int, items: Sequence[JsonDict], cancelled: bool, pending: int, *,
            stopped: bool | None = None, phases: int | None = None) -> JsonDict:
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
    found: JsonDict = {"index": index, "stop": stop, "chars": sum(len(text_of(i)) for i in items)}
    if phases is not None:
        found["phases"] = phases
    return found


def approval_for(doc: JsonDict, phase: int) -> Approval | None:
    """The approval a resumed turn carries, for the phase that asked (the first one it runs)."""
    resume = doc.get("resume")
    if not resume or not resume.get("approve") or phase != int(doc.get("phase_offset", 0)):
        return None
    return Approval(str(resume["approval_request_id"]), True, resume.get("reason"))


async def denial(doc: JsonDict) -> AsyncIterator[PhaseOutput]:
    """The one phase of a turn whose approval request was denied: a short message, no agent code."""
    resume = doc["resume"]
    reason = resume.get("reason")
    yield f"Not approved: {resume.get('name') or 'the next step'} was not run" + (f" ({reason})." if reason else ".")
