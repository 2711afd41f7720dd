"""The activities: every piece of I/O the orchestration needs, written to be safely re-delivered.

The Durable runtime delivers activities at least once: a worker that dies mid-activity gets its activity
re-delivered to a new worker, and a worker that was only presumed dead may still be running (a zombie).
Each activity therefore reads the durable state first and decides what is left to do:

* ``plan`` (run by the first phase's activity before its phase): persists the plan once; appends
  ``response.in_progress`` only if it is not there yet.
* ``run_phase``: a phase whose checkpoint exists is returned as is (no second stream). A phase that finds
  events after the last checkpoint is a *recovery* (``recovery.py``): it closes the item left open, appends
  ``response.in_progress`` carrying the snapshot as of the last checkpoint (clients drop their partial
  item, rule R4) and re-runs only this phase, as new items at new stream indexes. Non-background
  responses are not re-run but failed (R8). Every append is fenced by the blob's append position, so a
  zombie's next append fails and it stops (R6). The phase's first append (recovery head, item opening,
  first delta together) waits for the agent's first output: only then is the item's type known.
  Agent errors are answers, not exceptions: a permanent one returns ``{"stop": "failed"}``, a transient
  one ``{"retry_after": s}`` (the orchestrator waits on a durable timer and runs the phase again).
* ``finalize`` (run by the plan's last phase when it ends without a stop, else as its own activity): the
  terminal status is decided by an ETag compare-and-swap (R5: a requested cancel wins
  over the outcome, a terminal status already set stays); the terminal event is appended only if the log
  does not end with one already. Then the response leaves the index of unfinished runs that the repair
  path watches.
* ``inspect``: read-only; tells whether a response's run is over (terminal status *and* terminal event).

On the real Functions host a worker that dies does not get its activity re-delivered: the orchestrator
retries it (a new call with the same input), which is the same situation for the activity. A phase stops
at ``Settings.phase_deadline_seconds`` (a minute below the host's ``functionTimeout``, which would restart
the worker) and its run ends ``failed``.

Cancel is atomic to readers: ``POST .../cancel`` only raises the row's cancel flag while the run is
in progress; the run sets ``cancelled`` itself (:meth:`Engine.settle_cancel`) once the phase it stopped
has checkpointed its partial item, so a reader never sees ``cancelled`` without that item.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from resilient.agents.base import (
    Agent,
    AgentError,
    AgentRequest,
    Approval,
    Phase,
    PhaseContext,
    PhaseOutput,
    TransientAgentError,
)
from resilient.engine import recovery
from resilient.engine.batching import Appender, ControlPoller, Tuning, expect_next_activity
from resilient.engine.liveness import Liveness, behind_live_writer
from resilient.engine.phase_items import AgentOutputError, PhaseItems
from resilient.engine.snapshot import response_object
from resilient.protocol import events as ev
from resilient.protocol.items import ItemStatus, text_of
from resilient.protocol.response import estimate_tokens, usage_for
from resilient.settings import Settings
from resilient.storage.controls import CONTROLS
from resilient.storage.errors import InvalidTransition, LostOwnership, NotFound, PreconditionFailed
from resilient.storage.feed import COMMITTED
from resilient.storage.ports import (
    ACTIVE_STATUSES,
    TERMINAL_STATUSES,
    Control,
    EventLog,
    EventWriter,
    JsonDict,
    ResponseRecord,
)

if TYPE_CHECKING:
    from resilient.storage.factory import Storage

log = logging.getLogger("resilient.engine")

MAX_PHASES = 50
MAX_HISTORY_TURNS = 50
OPEN_ATTEMPTS = 20
_CONCLUDE_ATTEMPTS = 50
PENDING_SETTLE_S = 1.0
# The agent's next output is asked for in a task started eagerly (asyncio's eager start: it runs at once up
# to its first wait). Why: a task per output keeps the phase deadline and the outer task's cancellation
# robust against an agent that hangs or swallows a cancellation (the wait for it is bounded, the task is
# abandoned), but a scheduled task and the wait for it cost ~15 µs and 3-4 event loop turns per output. An
# output the agent has ready (a buffered token, a fast agent) now costs neither. After this many outputs in
# a row that came without a wait, the phase yields to the event loop once, so an agent that never waits
# cannot hold off the process's other work (appends, readers, requests).
EAGER_OUTPUTS_BEFORE_A_YIELD = 32
_start_eagerly = asyncio.create_eager_task_factory(asyncio.Task)
PHASE_DEADLINE_MESSAGE = (
    "Phase {index} did not finish within {seconds:.0f} s (the limit kept below the host's functionTimeout); "
    "the run was stopped."
)
NON_BACKGROUND_CRASH_MESSAGE = (
    "The worker running this response stopped. Non-background responses are not re-run; "
    "use background=true for crash-resilient runs."
)
DEFAULT_RETRY_AFTER_SECONDS = 2.0
REMEMBERED_RUNS = 1024


@dataclass
class _RunMemo:
    """What this process learnt about a run while driving it, so that the run's next activity here does
    not read it back: the row (its document is fixed once planned; its ETag may go stale, which only costs
    a lost CAS), the agent request (input items and chain history never change), and the checkpoints this
    process wrote. Trusted only together with the run's kept log writer, whose fenced append proves that
    no other process advanced the run meanwhile."""

    record: ResponseRecord
    request: AgentRequest
    checkpoints: list[JsonDict]


class Engine:
    """Activity logic over storage + an agent. One instance per worker process."""

    def __init__(self, storage: Storage, agent: Agent, settings: Settings, tuning: Tuning | None = None) -> None:
        self.storage = storage
        self.agent = agent
        self.settings = settings
        self.tuning = tuning or Tuning.from_settings(settings)
        self.liveness = Liveness()
        self._runs: OrderedDict[str, _RunMemo] = OrderedDict()

    def _remember(self, memo: _RunMemo) -> None:
        rid = memo.record.response_id
        self._runs[rid] = memo
        self._runs.move_to_end(rid)
        while len(self._runs) > REMEMBERED_RUNS:
            self._runs.popitem(last=False)

    def remember_created(self, record: ResponseRecord, input_items: Sequence[JsonDict]) -> None:
        """The HTTP layer created this response in this process: its first phase, if it runs here too, need
        not read the row and the input items back (a stale row only loses its CAS). Only for a turn without
        earlier turns and without a resumed plan, whose agent request is then complete."""
        if _previous_turn(record) is not None or record.doc.get("resume"):
            return
        self._remember(_RunMemo(record, self._request_from(record, list(input_items), []), []))

    async def _append_at_end(
        self, response_id: str, decide: Callable[[JsonDict | None], list[JsonDict]]
    ) -> EventWriter:
        """Append ``decide(last event)`` at the end of the log and return the writer.

        Tries the writer kept from this run's previous activity in this process first (no storage read;
        its append is fenced, so a stale one fails without appending), then freshly opened ones. When
        ``decide`` returns nothing no append confirms the writer, so it may only do that for a condition
        that stays true once true (e.g. "the terminal event is already there").
        """
        events = self.storage.events
        writer = events.take_writer(response_id)
        for _ in range(OPEN_ATTEMPTS):
            if writer is None:
                writer = await events.open_writer(response_id)
            batch = decide(writer.last_event)
            if not batch:
                return writer
            try:
                await writer.append(batch)
                return writer
            except LostOwnership:
                writer = None  # somebody appended since this writer's last append: look again
        raise LostOwnership(f"could not append to the event log of {response_id}")

    # ------------------------------------------------------------------ plan
    async def plan(self, response_id: str) -> JsonDict:
        """Persist the plan (once) and move the response to ``in_progress``. Returns ``{"phases": n}``."""
        responses = self.storage.responses
        memo = self._runs.pop(response_id, None)
        # The row carries the cancel flag too. A remembered one (the create in this process) may be stale:
        # then its CAS below loses, and the row the transition returns has the flag.
        record = memo.record if memo is not None else await responses.get(response_id)
        if record.status in TERMINAL_STATUSES:
            return {"stop": "cancelled" if record.status == "cancelled" else "failed"}
        if record.cancel_requested:
            await self.settle_cancel(response_id)
            return {"stop": "cancelled"}
        request = memo.request if memo is not None else None
        changes: JsonDict = {key: record.doc[key] for key in ("plan", "phase_offset", "agent_metadata")
                             if key in record.doc}
        if "plan" not in changes:
            changes = await self._resumed_plan(record) if record.doc.get("resume") else {}
        if "plan" not in changes:
            request = request or await self._agent_request(record)
            phases = list(await self.agent.plan(request))
            if not 1 <= len(phases) <= MAX_PHASES:
                raise ValueError(f"an agent plan must have 1..{MAX_PHASES} phases, got {len(phases)}")
            changes = {"plan": [p.to_json() for p in phases], "phase_offset": 0}
        plan = changes["plan"][int(changes.get("phase_offset", 0)):]
        try:
            record = await responses.transition(
                response_id, "in_progress", allowed_from=ACTIVE_STATUSES, doc_changes=changes, current=record
            )
        except InvalidTransition:
            return {"stop": "cancelled"}
        if record.cancel_requested:  # raised between the create and this CAS
            await self.settle_cancel(response_id)
            return {"stop": "cancelled"}
        in_progress = [ev.response_in_progress(response_object(record, []))]

        def opening(last: JsonDict | None) -> list[JsonDict]:
            return in_progress if (last or {}).get("type") in ("response.created", "response.queued") else []

        self.storage.events.keep_writer(await self._append_at_end(response_id, opening))
        if request is not None and not record.doc.get("agent_metadata"):
            self._remember(_RunMemo(record, request, []))
            expect_next_activity(response_id)
        log.info("planned", extra={"response_id": response_id, "phases": len(plan)})
        return {"phases": len(plan)}

    async def _resumed_plan(self, record: ResponseRecord) -> JsonDict:
        """The plan of a turn that answers an approval request: approved, the paused plan from the paused
        phase on (earlier phases are not run again); denied, one phase that only says so. The paused
        turn's metadata carries over (this turn's own metadata wins), so its knobs still apply."""
        resume = record.doc["resume"]
        paused = await self.storage.responses.get(str(resume["from"]))
        pause = paused.doc.get("paused") or {}
        metadata = {**(paused.doc.get("agent_metadata") or paused.doc.get("metadata") or {}),
                    **(record.doc.get("metadata") or {})}
        if resume.get("approve"):
            return {"plan": paused.doc["plan"], "phase_offset": int(pause["phase"]), "agent_metadata": metadata}
        denied = Phase("not-approved", f"Say that {pause.get('name', 'the step')} was not approved.")
        return {"plan": [denied.to_json()], "phase_offset": 0, "agent_metadata": metadata}

    async def mark_queued(self, response_id: str) -> JsonDict:
        """Append ``response.queued`` (once) for a turn that waits for its chain's lock."""
        record = await self.storage.responses.get(response_id)
        queued = [ev.response_queued(response_object(record, []))]

        def after_created(last: JsonDict | None) -> list[JsonDict]:
            return queued if (last or {}).get("type") == "response.created" else []

        self.storage.events.keep_writer(await self._append_at_end(response_id, after_created))
        return {"queued": True}

    # ------------------------------------------------------------- run_phase
    async def run_phase(self, response_id: str, index: int, *, finalize: bool = False,
                        plan: bool = False) -> JsonDict:
        """Stream one phase into the event log and checkpoint its output item(s). Returns a small summary
        (with ``phases``: how many phases this turn's plan has).

        ``index`` counts the phases of this response; a turn that resumes a paused plan starts at the
        plan's ``phase_offset``, so the agent sees ``phase_offset + index``.

        A phase that stops for a cancel settles the cancel itself, right after its partial checkpoint:
        the ``cancelled`` status and the partial output become visible together, without waiting for
        the orchestrator to schedule ``finalize``.

        ``plan`` (the first phase): run :meth:`plan` first, in the same activity. ``finalize``: when this is
        the plan's last phase and it ends without a stop, conclude the run here as :meth:`finalize` with
        ``completed`` would, and say so in the summary (``final``). Each saves the run a Durable hop (an
        orchestrator episode and an activity). Both are idempotent, so a retry of this activity (its worker
        died) plans and concludes again without effect, and finds the phase's checkpoint if it has one; a
        conclusion that fails here is left to the orchestrator's own ``finalize`` step.
        """
        limit = self.settings.phase_deadline_seconds
        deadline = None if limit is None else time.monotonic() + limit  # the host's timeout counts from here
        try:
            if plan:
                planned = await self.plan(response_id)
                if planned.get("stop"):
                    return {"index": index, **planned}
            written: list[JsonDict] = []
            summary = await self._run_phase(response_id, index, deadline, written)
        except BaseException:
            COMMITTED.expect(response_id, 0)  # its retry comes after a durable timer, maybe elsewhere
            raise
        if summary.get("stop") == "cancelled":
            await self.settle_cancel(response_id)
        elif finalize and not summary.get("stop") and summary.get("retry_after") is None \
                and summary.get("phases") == index + 1:
            try:
                summary["final"] = await self.finalize(response_id, {"status": "completed"}, output=written or None)
            except Exception as exc:  # the orchestrator's finalize step (with its retries) does it instead
                log.warning("finalize after the last phase failed: %s: %s", type(exc).__name__, exc,
                            extra={"response_id": response_id, "phase": index})
        return summary

    async def _run_phase(self, response_id: str, index: int, deadline: float | None = None,
                         written: list[JsonDict] | None = None) -> JsonDict:
        """``written``, when given, receives the response's output as this call checkpointed it (every
        item before the phase, then the phase's own), when the phase streamed and was checkpointed here."""
        storage = self.storage
        remembered = self._as_remembered(response_id, index)
        if remembered is not None:
            # This process drove the run up to here: the claim's fenced append below proves nothing happened
            # to the log meanwhile (else it re-reads storage, as a re-delivery does). The control columns
            # need no read while this process's newest snapshot (the plan's CAS, the previous phase's
            # reads, a cancel or steer handled here) is younger than the control interval: the same
            # staleness a running phase accepts.
            memo, writer = remembered
            record, checkpoints, request = memo.record, memo.checkpoints, memo.request
            control = CONTROLS.fresh(response_id, self.tuning.control_interval_s, time.monotonic()) \
                or await storage.responses.get_control(response_id)
        else:
            record = await storage.responses.get(response_id)  # carries the control columns too
            control = Control(record.status, record.cancel_requested, record.pending_input_count)
            checkpoints = await storage.items.list_output_items(response_id)
            writer = None
            request = None
        plan = [Phase.from_json(p) for p in record.doc.get("plan") or []]
        offset = int(record.doc.get("phase_offset", 0))
        if not 0 <= offset + index < len(plan):
            raise ValueError(f"phase {index} is outside the plan of {len(plan)} phases")
        phases = len(plan) - offset  # this turn's phases

        if len(checkpoints) > index:  # a re-delivery of a finished phase: return it, stream nothing
            return self._summary(index, checkpoints[index:], control.cancel_requested, control.pending_input_count,
                                 phases=phases)
        if control.status in TERMINAL_STATUSES or control.cancel_requested:
            return {"index": index, "stop": "cancelled"}
        if control.pending_input_count > 0:
            return {"index": index, "stop": "steered"}
        previous = checkpoints[:index]
        writer = writer or await storage.events.open_writer(response_id)
        head, first_index, crashed = await self._head(record, writer, previous)
        # The log does not end where the checkpoints say this phase starts (inside an item, or after an item
        # that has no checkpoint yet): is its writer dead, or another delivery of this phase? (A live attempt
        # checkpoints right after its item's closing events; a duplicate delivery that read the checkpoints a
        # moment before that sees none and would otherwise stream the phase again.)
        if head:
            found = await behind_live_writer(storage.events, storage.items, response_id, index, writer,
                                             self.liveness, deadline)
            if isinstance(found, list):
                return self._summary(index, found[index:], control.cancel_requested,
                                     control.pending_input_count, phases=phases)
            if found is not writer:
                writer = found
                head, first_index, crashed = await self._head(record, writer, previous)
        if crashed and not record.doc.get("background", False):
            log.warning("non-background crash", extra={"response_id": response_id, "phase": index})
            return {"index": index, "stop": "failed",
                    "error": {"code": "server_error", "message": NON_BACKGROUND_CRASH_MESSAGE}}

        request = request or await self._agent_request(record)
        context = PhaseContext(
            request=request,
            plan=plan,
            phase_index=offset + index,
            is_recovery=bool(head),
            output_so_far=previous,
            pending_input_count=control.pending_input_count,
            cancelled=control.cancel_requested,
            approval=_approval_for(record.doc, offset + index),
        )
        items = PhaseItems(first_index, {str(t.get("name")) for t in request.tools}, request.tool_choice)
        claim = _Claim(self, record, index, writer, head, first_index, previous, items, deadline)
        denied = record.doc.get("resume") and not record.doc["resume"].get("approve")
        source = _denial(record.doc) if denied else self.agent.run_phase(context)
        with COMMITTED.writing(response_id):  # readers here get the phase from the feed, not by polling
            try:
                stopped, failure, overtime, appender = await self._stream(
                    response_id, claim, context, items, source, deadline)
            except _Superseded as done:
                return self._summary(index, done.items, context.cancelled, context.pending_input_count,
                                     phases=phases)
            except Exception as exc:
                log.warning("phase attempt failed: %s: %s", type(exc).__name__, exc,
                            extra={"response_id": response_id, "phase": index})
                raise
            if failure is not None:
                return await self._failed_attempt(response_id, index, record, claim, items, failure, appender)

            status: ItemStatus = "incomplete" if stopped or overtime else "completed"
            try:
                closing = items.close(status, ensure_item=True)
            except AgentOutputError as exc:  # a streamed call whose arguments are not a JSON object
                return await self._failed_attempt(response_id, index, record, claim, items, exc, appender)
            if claim.appended:
                await appender.finish(closing)  # with the deltas still waiting: one append
            else:
                await claim.append(closing)  # the agent said nothing: the closing events claim the log
            expect_next_activity(response_id)
        await self._record_phase(record, offset + index, items)
        if len(items.items) == 1:
            await storage.items.put_output_item(response_id, index, items.items[0])
        else:
            await storage.items.put_output_items(response_id, index, items.items)
        storage.events.keep_writer(claim.writer)
        output = [*previous, *items.items]
        self._remember(_RunMemo(record, request, output))
        if written is not None:
            written.extend(output)
        log.info("phase done", extra={"response_id": response_id, "phase": index, "items": len(items.items),
                                      "chars": sum(len(text_of(i)) for i in items.items),
                                      "storage_calls": claim.storage_calls})
        if overtime:
            log.warning("phase deadline", extra={"response_id": response_id, "phase": index})
            seconds = self.settings.phase_deadline_seconds or 0.0
            return {"index": index, "stop": "failed", "error": {
                "code": "server_error", "message": PHASE_DEADLINE_MESSAGE.format(index=index, seconds=seconds)}}
        return self._summary(index, items.items, context.cancelled, context.pending_input_count, stopped=stopped,
                             phases=phases)

    def _as_remembered(self, response_id: str, index: int) -> tuple[_RunMemo, EventWriter] | None:
        """What this process remembers of the run and its kept writer, when they agree that the log ends
        where phase ``index`` starts; else None (storage is read, as for any other delivery)."""
        memo = self._runs.pop(response_id, None)
        writer = self.storage.events.take_writer(response_id)
        if memo is None or writer is None or len(memo.checkpoints) != index:
            return None
        if not recovery.boundary(writer.last_event, memo.checkpoints):
            return None
        return memo, writer

    async def _head(
        self, record: ResponseRecord, writer: EventWriter, previous: list[JsonDict]
    ) -> tuple[list[JsonDict], int, bool]:
        """What this attempt must append before its first item, the first stream index it may use, and
        whether the log shows a crash (it ends inside an item, not after a closed one)."""
        last = writer.last_event
        if recovery.boundary(last, previous):
            return [], recovery.next_index_at_boundary(last), False
        tail = await recovery.scan_tail(self.storage.events, record.response_id, writer.next_sequence_number)
        reset = ev.response_in_progress(response_object(record, previous, status="in_progress"))
        crashed = (last or {}).get("type") != ev.OUTPUT_ITEM_DONE
        return [*tail.closing, reset], tail.last_index + 1, crashed

    async def _failed_attempt(
        self, response_id: str, index: int, record: ResponseRecord, claim: _Claim, items: PhaseItems,
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
        if claim.appended:
            await appender.finish(items.close("incomplete", ensure_item=False))
        error = {"code": code, "message": message}
        if isinstance(failure, TransientAgentError) and record.doc.get("background", False):
            retry_after = failure.retry_after if failure.retry_after is not None else DEFAULT_RETRY_AFTER_SECONDS
            return {"index": index, "retry_after": max(0.0, float(retry_after)), "error": error}
        if items.items:
            await self.storage.items.put_output_items(response_id, index, items.items)
        return {"index": index, "stop": "failed", "error": error}

    async def _record_phase(self, record: ResponseRecord, phase: int, items: PhaseItems) -> None:
        """Before the checkpoint: the model's token counts of this phase, and where a plan paused. Keyed
        by phase, so a phase that runs again overwrites instead of counting twice."""
        changes: JsonDict = {}
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
            await self._merge_doc(record.response_id, changes)

    async def _merge_doc(self, response_id: str, changes: JsonDict) -> None:
        for _ in range(OPEN_ATTEMPTS):
            current = await self.storage.responses.get(response_id)
            try:
                await self.storage.responses.replace(current, doc_changes=changes)
                return
            except PreconditionFailed:
                continue  # a control column changed meanwhile (cancel, steering): read again
        raise PreconditionFailed(f"could not record the phase of {response_id}")

    @staticmethod
    def _summary(index: int, items: Sequence[JsonDict], cancelled: bool, pending: int, *,
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
        summary: JsonDict = {"index": index, "stop": stop, "chars": sum(len(text_of(i)) for i in items)}
        if phases is not None:
            summary["phases"] = phases
        return summary

    async def _stream(
        self, response_id: str, claim: _Claim, context: PhaseContext, items: PhaseItems,
        source: AsyncIterator[PhaseOutput], deadline: float | None = None,
    ) -> tuple[bool, Exception | None, bool, Appender]:
        """Pump the agent's outputs into the log: the first output claims the log at once, the rest go
        through group-committed appends (:mod:`resilient.engine.batching`); the control flags are
        refreshed in the background.

        Returns (stopped early, the agent's error if it failed, ran past ``deadline``, the appender with the
        events still waiting: the caller finishes it with the phase's closing events).
        """
        appender = Appender(claim, self.tuning)
        control = ControlPoller(self.storage.responses, response_id, context, self.tuning.control_interval_s)
        outputs = aiter(source)
        pending: asyncio.Future[PhaseOutput] | None = None
        stopped = overtime = False
        failure: Exception | None = None
        control.start()
        loop = asyncio.get_running_loop()
        ready_in_a_row = 0
        try:
            while True:
                if context.should_stop:
                    stopped = True
                    break
                pending = _start_eagerly(loop, _next_output(outputs))
                if pending.done():  # the output was ready: no event loop turn spent on it
                    ready_in_a_row += 1
                    if ready_in_a_row % EAGER_OUTPUTS_BEFORE_A_YIELD == 0:
                        await asyncio.sleep(0)
                else:
                    ready_in_a_row = 0  # the agent waits: the loop turns anyway
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left > 0:
                        await asyncio.wait({pending}, timeout=left)
                    elif left is None:
                        await asyncio.wait({pending})
                if not pending.done():
                    overtime = True
                    break
                try:
                    output = pending.result()
                except StopAsyncIteration:
                    pending = None
                    stopped = context.should_stop  # the agent saw the flags first and ended the phase early
                    break
                except (AgentError, AgentOutputError) as exc:
                    pending, failure = None, exc
                    break
                pending = None
                control.raise_if_failed()
                try:
                    events = items.feed(output)
                except AgentOutputError as exc:
                    failure = exc
                    break
                if events and not claim.appended:
                    await claim.append(events)  # the first output claims the log at once
                else:
                    for event in events:
                        appender.add(event)
                if items.paused:
                    break  # an approval request ends the phase: nothing after it runs
                if deadline is not None and time.monotonic() >= deadline:
                    overtime = True
                    break
        except BaseException:
            appender.cancel()
            raise
        finally:
            await control.stop()
            if pending is not None:
                # Let a cancelled ``anext`` settle (bounded: an agent may swallow the cancellation), so the
                # generator is no longer running when it is closed; retrieve its outcome (no "exception was
                # never retrieved" noise).
                pending.cancel()
                await asyncio.wait({pending}, timeout=PENDING_SETTLE_S)
                if pending.done() and not pending.cancelled():
                    pending.exception()
            closer = getattr(outputs, "aclose", None)
            if closer is not None:
                try:
                    await closer()  # runs the agent's finally blocks: a model stream is closed here
                except Exception:  # an agent's cleanup error must not lose the phase
                    log.exception("agent generator close failed")
        return stopped, failure, overtime, appender

    # -------------------------------------------------------------- finalize
    async def finalize(self, response_id: str, outcome: JsonDict,
                       output: Sequence[JsonDict] | None = None) -> JsonDict:
        """Decide the terminal status (CAS) and append the single terminal event (idempotent).

        ``output``: the response's checkpointed output when the caller has just written it (the plan's last
        phase concluding the run in its own activity): the list storage would return, not read back. Any
        other caller passes nothing and the checkpoints are read, since a phase may have run elsewhere."""
        storage = self.storage
        output = list(output) if output is not None else await storage.items.list_output_items(response_id)
        memo = self._runs.pop(response_id, None)
        try:
            record = await self._conclude(response_id, output, str(outcome.get("status", "completed")),
                                          outcome.get("error"), current=memo.record if memo is not None else None)
        except NotFound:  # already delivered and forgotten (store=false) or purged: nothing left to do
            await self._leave_index(response_id)
            return {"status": "gone"}
        terminal = [_terminal_event(record, output)]
        mend = await self._mend_left_open(response_id, record, output)

        def unless_ended(last: JsonDict | None) -> list[JsonDict]:
            if (last or {}).get("type") in ev.TERMINAL_EVENT_TYPES:
                return []
            if mend is not None and (last or {}).get("sequence_number") == mend[0]:
                return [*mend[1], *terminal]
            return terminal

        try:
            await self._append_at_end(response_id, unless_ended)  # a zombie phase may append meanwhile
            ended = True
        except LostOwnership:
            ended = False
        COMMITTED.expect(response_id, 0)
        if ended:
            await self._leave_index(response_id)
        log.info("finalized", extra={"response_id": response_id, "status": record.status})
        return {"status": record.status}

    async def _mend_left_open(
        self, response_id: str, record: ResponseRecord, output: list[JsonDict]
    ) -> tuple[int, list[JsonDict]] | None:
        """When the log does not end where the checkpoints end, what finalize appends before the terminal
        event, and the sequence number of the last event it was decided on; else None.

        A run can end without another phase attempt after a dead one: its worker died mid-phase and the
        retry found the run cancelled or steered (it returns at once), or the crash budget ran out. The
        dead attempt's item is then still open in the stream (or closed but never checkpointed), and the
        terminal event's output does not hold it. As before any re-run phase (R4), the item is closed
        ``incomplete`` and a ``response.in_progress`` carrying the checkpointed output follows, so a client
        that rebuilds the output from the stream drops it and gets what ``GET`` returns.
        """
        events = self.storage.events
        writer = events.take_writer(response_id) or await events.open_writer(response_id)
        events.keep_writer(writer)  # the terminal append below takes it again (its append confirms it)
        last = writer.last_event
        if last is None or not isinstance(last.get("output_index"), int) or recovery.boundary(last, output):
            return None
        tail = await recovery.scan_tail(events, response_id, writer.next_sequence_number)
        reset = ev.response_in_progress(response_object(record, output, status="in_progress"))
        return int(last["sequence_number"]), [*tail.closing, reset]

    async def _leave_index(self, response_id: str) -> None:
        """The run is over: drop it from the index the repair path watches. Best effort: a leftover entry
        costs the repair path one look, after which it removes the entry itself."""
        try:
            await self.storage.active.remove(response_id)
        except Exception:
            log.warning("could not drop the response from the active index", extra={"response_id": response_id})

    # --------------------------------------------------------------- inspect
    async def inspect(self, response_id: str) -> JsonDict:
        """Whether a response's run is over: a terminal status *and* its terminal event in the log (a
        cancelled run still writes its partial item and terminal event after the status changed).
        A response that no longer exists (deleted, forgotten, purged) is over too."""
        try:
            status = (await self.storage.responses.get_control(response_id)).status
        except NotFound:
            return {"status": "gone", "over": True}
        return {"status": status, "over": status in TERMINAL_STATUSES and await log_ended(self.storage.events,
                                                                                       response_id)}

    async def settle_cancel(self, response_id: str) -> None:
        """Set ``cancelled`` once the run has stopped and its output is checkpointed (no-op when a
        terminal status is already set). Finalize still appends the terminal event."""
        output = await self.storage.items.list_output_items(response_id)
        try:
            record = await self._conclude(response_id, output, "cancelled", None)
        except NotFound:
            return
        log.info("cancel settled", extra={"response_id": response_id, "status": record.status,
                                          "items": len(output)})

    async def _conclude(self, response_id: str, output: Sequence[JsonDict], wanted: str,
                        error: JsonDict | None, *, current: ResponseRecord | None = None) -> ResponseRecord:
        """The one terminal transition (ETag CAS from an active status; a terminal status already set
        stays). A raised cancel flag turns any outcome into ``cancelled``: the flag is set by a CAS that
        only succeeds on an active row, so either it landed first and the cancel wins here, or this
        transition landed first and the cancel is refused (R5)."""
        responses = self.storage.responses
        known = current  # a row this process read or wrote earlier: a stale one only loses its CAS
        for _ in range(_CONCLUDE_ATTEMPTS):
            record, known = (known, None) if known is not None else (await responses.get(response_id), None)
            if record.status not in ACTIVE_STATUSES:
                return record  # a cancel (or an earlier finalize) won
            status = "cancelled" if record.cancel_requested else wanted
            changes: JsonDict = {"completed_at": int(time.time()), "usage": self._usage(record, output)}
            if status == "failed":
                changes["error"] = error or {"code": "server_error", "message": "The response failed."}
            try:
                return await responses.replace(record, status=status, doc_changes=changes)
            except PreconditionFailed:
                continue  # the row changed (a cancel flag, a pending-input count): decide again
        raise PreconditionFailed(f"response {response_id!r}: the terminal transition kept losing the CAS")

    @staticmethod
    def _usage(record: ResponseRecord, output: Sequence[JsonDict]) -> JsonDict:
        """The model's own token counts, added up over the phases, when an agent reported them; an
        estimate (about four characters a token) when none did (the offline agent)."""
        reported = [v for k, v in record.doc.items() if k.startswith("usage_") and isinstance(v, dict)]
        if reported:
            return usage_for(
                sum(int(u.get("input_tokens", 0)) for u in reported),
                sum(int(u.get("output_tokens", 0)) for u in reported),
                cached_tokens=sum(int(u.get("cached_tokens", 0)) for u in reported),
                reasoning_tokens=sum(int(u.get("reasoning_tokens", 0)) for u in reported),
            )
        estimated_input = estimate_tokens(str(record.doc.get("instructions") or "")) + int(
            record.doc.get("input_chars", 0)) // 4
        return usage_for(estimated_input, sum(estimate_tokens(text_of(i)) for i in output))

    # --------------------------------------------------------------- helpers
    async def _agent_request(self, record: ResponseRecord) -> AgentRequest:
        items = await self._all_input_items(record.response_id)
        history = await self._history(record)
        return self._request_from(record, items, history)

    @staticmethod
    def _request_from(record: ResponseRecord, items: list[JsonDict], history: list[JsonDict]) -> AgentRequest:
        return AgentRequest(
            response_id=record.response_id,
            model=str(record.doc.get("model") or ""),
            instructions=record.doc.get("instructions"),
            input_items=items,
            history=history,
            metadata=dict(record.doc.get("agent_metadata") or record.doc.get("metadata") or {}),
            tools=list(record.doc.get("tools") or []),
            tool_choice=record.doc.get("tool_choice") or "auto",
        )

    async def _all_input_items(self, response_id: str) -> list[JsonDict]:
        out: list[JsonDict] = []
        after: str | None = None
        while True:
            page = await self.storage.items.list_input_items(response_id, after=after, limit=100, order="asc")
            out += page.data
            if not page.has_more or not page.data:
                return out
            after = str(page.data[-1]["id"])

    async def _history(self, record: ResponseRecord) -> list[JsonDict]:
        """The chain's earlier turns, oldest first: each turn's input items then its output items."""
        turns: list[Sequence[JsonDict]] = []
        previous = _previous_turn(record)
        for _ in range(MAX_HISTORY_TURNS):
            if not previous:
                break
            try:
                earlier = await self.storage.responses.get(str(previous))
            except NotFound:
                break
            turn = await self._all_input_items(earlier.response_id)
            turn += await self.storage.items.list_output_items(earlier.response_id)
            turns.append(turn)
            previous = _previous_turn(earlier)
        history: list[JsonDict] = []
        for earlier_turn in reversed(turns):
            history += list(earlier_turn)
        return history


class _Superseded(Exception):
    """Another attempt of the same phase checkpointed it while this one waited for its first output."""

    def __init__(self, items: list[JsonDict]) -> None:
        super().__init__("phase already checkpointed")
        self.items = items


class _Claim:
    """This attempt's writer. Its first append carries the recovery head and so claims the log.

    Losing the first append means another writer appended since we looked (a zombie, or another
    delivery of this phase): look again. The phase may be checkpointed already (then this attempt is
    superseded); otherwise build a new head and move this attempt's stream indexes past the ones the
    other writer used. Once an append lands, a later loss means this attempt is the zombie: it raises.
    """

    def __init__(self, engine: Engine, record: ResponseRecord, index: int, writer: EventWriter,
                 head: list[JsonDict], first_index: int, previous: list[JsonDict], items: PhaseItems,
                 deadline: float | None = None) -> None:
        self._engine = engine
        self._deadline = deadline
        self._record = record
        self._index = index
        self._writer = writer
        self._head = head
        self._first_index = first_index
        self._previous = previous
        self._items = items
        self.appended = False
        self._first_writer = writer
        self._calls_before = writer.storage_calls  # a kept writer carries earlier phases' calls

    @property
    def writer(self) -> EventWriter:
        """The writer this attempt appends with (another one after a lost first append)."""
        return self._writer

    @property
    def storage_calls(self) -> int:
        """This attempt's calls to the event log."""
        before = self._calls_before if self._writer is self._first_writer else 0
        return self._writer.storage_calls - before

    async def append(self, events: Sequence[JsonDict]) -> int | None:
        if not events:
            return None
        if self.appended:
            return await self._writer.append(events)
        storage = self._engine.storage
        rid = self._record.response_id
        batch = list(events)
        for _ in range(OPEN_ATTEMPTS):
            try:
                last = await self._writer.append([*self._head, *batch])
                self.appended = True
                if self._head:  # the reset is in the log: this attempt repeats the phase
                    log.warning("recovering phase", extra={"response_id": rid, "phase": self._index})
                return last
            except LostOwnership:
                checkpoints = await storage.items.list_output_items(rid)
                if len(checkpoints) > self._index:
                    raise _Superseded(checkpoints[self._index:]) from None
                # somebody appended since we looked, most likely another delivery of this phase that
                # is streaming now: let it finish rather than take the log from it
                found = await behind_live_writer(storage.events, storage.items, rid, self._index,
                                                 await storage.events.open_writer(rid), self._engine.liveness,
                                                 self._deadline)
                if isinstance(found, list):
                    raise _Superseded(found[self._index:]) from None
                self._writer = found
                self._head, first, _ = await self._engine._head(self._record, self._writer, self._previous)
                shift = first - self._first_index
                self._first_index = first
                self._items.shift(shift)
                batch = [_shifted(event, shift) for event in batch]
                await asyncio.sleep(0.01)
        raise LostOwnership(f"could not claim the event log of {rid} for phase {self._index}")


def _shifted(event: JsonDict, by: int) -> JsonDict:
    index = event.get("output_index")
    return {**event, "output_index": index + by} if isinstance(index, int) and by else event


def _approval_for(doc: JsonDict, phase: int) -> Approval | None:
    """The approval a resumed turn carries, for the phase that asked (the first one it runs)."""
    resume = doc.get("resume")
    if not resume or not resume.get("approve") or phase != int(doc.get("phase_offset", 0)):
        return None
    return Approval(str(resume["approval_request_id"]), True, resume.get("reason"))


async def _next_output(outputs: AsyncIterator[PhaseOutput]) -> PhaseOutput:
    """The agent's next output, as a coroutine (what a task runs; ``anext`` may return another awaitable)."""
    return await anext(outputs)


async def _denial(doc: JsonDict) -> AsyncIterator[PhaseOutput]:
    """The one phase of a turn whose approval request was denied: a short message, no agent code."""
    resume = doc["resume"]
    reason = resume.get("reason")
    yield f"Not approved: {resume.get('name') or 'the next step'} was not run" + (f" ({reason})." if reason else ".")


async def log_ended(events: EventLog, response_id: str) -> bool:
    """True when the event log ends with a terminal event (or there is no log any more)."""
    try:
        writer = await events.open_writer(response_id)
    except NotFound:
        return True
    return (writer.last_event or {}).get("type") in ev.TERMINAL_EVENT_TYPES


def _previous_turn(record: ResponseRecord) -> str | None:
    """The turn before this one on its chain (conversation or previous_response_id), if any."""
    found = record.doc.get("previous_turn") or record.doc.get("previous_response_id")
    return str(found) if found else None


def _terminal_event(record: ResponseRecord, output: Sequence[JsonDict]) -> JsonDict:
    snapshot = response_object(record, output)
    if record.status == "completed":
        return ev.response_completed(snapshot)
    if record.status == "incomplete":
        return ev.response_incomplete(snapshot)
    return ev.response_failed(snapshot)  # failed, and cancelled (the client has no response.cancelled)
