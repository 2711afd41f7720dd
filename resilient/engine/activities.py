"""The activities: every piece of I/O the orchestration needs, written to be safely re-delivered.

The Durable runtime delivers activities at least once: a worker that dies mid-activity gets its activity
re-delivered to a new worker, and a worker that was only presumed dead may still be running (a zombie).
Each activity therefore reads the durable state first and decides what is left to do:

* ``plan``: persists the plan once; appends ``response.in_progress`` only if it is not there yet.
* ``run_phase``: a phase whose checkpoint exists is returned as is (no second stream). A phase that finds
  events after the last checkpoint is a *recovery*: it appends ``response.in_progress`` carrying the
  snapshot as of the last checkpoint (clients drop their partial item, rule R4) and re-runs only this
  phase. Non-background responses are not re-run but failed (R8). Every append is fenced by the blob's
  append position, so a zombie's next append fails and it stops (R6).
* ``finalize``: the terminal status is decided by an ETag compare-and-swap (R5: a cancel that already
  won stays); the terminal event is appended only if the log does not end with one already.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from resilient.agents.base import Agent, AgentRequest, Phase, PhaseContext
from resilient.engine.batching import Appender, ControlPoller, Tuning
from resilient.engine.snapshot import response_object
from resilient.ids import new_message_id
from resilient.protocol import events as ev
from resilient.protocol.items import ItemStatus, output_message, text_of
from resilient.protocol.response import estimate_tokens, usage_for
from resilient.settings import Settings
from resilient.storage.errors import InvalidTransition, LostOwnership, NotFound
from resilient.storage.feed import COMMITTED
from resilient.storage.ports import (
    ACTIVE_STATUSES,
    TERMINAL_STATUSES,
    Control,
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
REMEMBERED_RUNS = 1024
# After an activity of a run ends here, its next one usually starts here within a Durable hop: readers in
# this process wait for it on the in-process feed (polling storage only as a safety net) for this long.
NEXT_ACTIVITY_EXPECTED_S = 5.0
NON_BACKGROUND_CRASH_MESSAGE = (
    "The worker running this response stopped. Non-background responses are not re-run; "
    "use background=true for crash-resilient runs."
)


def _boundary(last_event: JsonDict | None, index: int) -> bool:
    """True when the log ends exactly where phase ``index`` should start (so nothing partial is visible)."""
    if last_event is None:
        return False
    kind = last_event.get("type")
    if kind == "response.in_progress":
        return True
    return kind == "response.output_item.done" and last_event.get("output_index") == index - 1


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


@dataclass(frozen=True)
class _Claim:
    """A phase's hold on the end of the log (its opening events are appended) and what it starts from."""

    record: ResponseRecord
    control: Control
    writer: EventWriter
    plan: list[Phase]
    previous: list[JsonDict]  # the checkpoints of the phases before this one
    recovery: bool
    request: AgentRequest | None  # known already (None: build it)
    calls_before: int = 0  # the writer's storage calls before this phase (a kept writer has earlier ones)


class Engine:
    """Activity logic over storage + an agent. One instance per worker process."""

    def __init__(self, storage: Storage, agent: Agent, settings: Settings, tuning: Tuning | None = None) -> None:
        self.storage = storage
        self.agent = agent
        self.settings = settings
        self.tuning = tuning or Tuning.from_settings(settings)
        self._runs: OrderedDict[str, _RunMemo] = OrderedDict()

    def _remember(self, memo: _RunMemo) -> None:
        rid = memo.record.response_id
        self._runs[rid] = memo
        self._runs.move_to_end(rid)
        while len(self._runs) > REMEMBERED_RUNS:
            self._runs.popitem(last=False)

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
    def remember_created(self, record: ResponseRecord, input_items: Sequence[JsonDict]) -> None:
        """The HTTP layer created this response in this process: its plan activity, if it runs here too, need
        not read the row and the input items back (a stale row only loses its CAS). Only for a turn without
        earlier turns, whose agent request is then complete."""
        if _previous_turn(record) is not None:
            return
        request = AgentRequest(
            response_id=record.response_id,
            model=str(record.doc.get("model") or ""),
            instructions=record.doc.get("instructions"),
            input_items=list(input_items),
            history=[],
            metadata=dict(record.doc.get("metadata") or {}),
        )
        self._remember(_RunMemo(record, request, []))

    async def plan(self, response_id: str) -> JsonDict:
        """Persist the plan (once) and move the response to ``in_progress``. Returns ``{"phases": n}``."""
        responses = self.storage.responses
        memo = self._runs.pop(response_id, None)
        # the row carries the cancel flag too (a remembered one may be stale: then its CAS below fails)
        record = memo.record if memo is not None else await responses.get(response_id)
        if record.status in TERMINAL_STATUSES:
            return {"stop": "cancelled" if record.status == "cancelled" else "failed"}
        if record.cancel_requested:
            return {"stop": "cancelled"}
        request = memo.request if memo is not None else await self._agent_request(record)
        plan = record.doc.get("plan")
        if plan is None:
            phases = list(await self.agent.plan(request))
            if not 1 <= len(phases) <= MAX_PHASES:
                raise ValueError(f"an agent plan must have 1..{MAX_PHASES} phases, got {len(phases)}")
            plan = [p.to_json() for p in phases]
        try:
            record = await responses.transition(
                response_id, "in_progress", allowed_from=ACTIVE_STATUSES, doc_changes={"plan": plan}, current=record
            )
        except InvalidTransition:
            return {"stop": "cancelled"}
        in_progress = [ev.response_in_progress(response_object(record, []))]

        def opening(last: JsonDict | None) -> list[JsonDict]:
            return in_progress if (last or {}).get("type") in ("response.created", "response.queued") else []

        writer = await self._append_at_end(response_id, opening)
        self.storage.events.keep_writer(writer)
        self._remember(_RunMemo(record, request, []))
        COMMITTED.expect(response_id, NEXT_ACTIVITY_EXPECTED_S)
        log.info("planned", extra={"response_id": response_id, "phases": len(plan)})
        return {"phases": len(plan)}

    async def mark_queued(self, response_id: str) -> JsonDict:
        """Append ``response.queued`` (once) for a turn that waits for its chain's lock."""
        record = await self.storage.responses.get(response_id)
        queued = [ev.response_queued(response_object(record, []))]

        def after_created(last: JsonDict | None) -> list[JsonDict]:
            return queued if (last or {}).get("type") == "response.created" else []

        self.storage.events.keep_writer(await self._append_at_end(response_id, after_created))
        return {"queued": True}

    # ------------------------------------------------------------- run_phase
    async def run_phase(self, response_id: str, index: int) -> JsonDict:
        """Stream one phase into the event log and checkpoint its output item. Returns a small summary."""
        try:
            return await self._run_phase(response_id, index)
        except BaseException:
            COMMITTED.expect(response_id, 0)  # its retry comes after a durable timer, maybe elsewhere
            raise

    async def _run_phase(self, response_id: str, index: int) -> JsonDict:
        storage = self.storage
        item_id = new_message_id()
        claim = await self._claim_as_remembered(response_id, index, item_id)
        if claim is None:
            claim = await self._claim_from_storage(response_id, index, item_id)
        if isinstance(claim, dict):
            return claim
        record, control, writer = claim.record, claim.control, claim.writer
        request = claim.request or await self._agent_request(record)
        context = PhaseContext(
            request=request,
            plan=claim.plan,
            phase_index=index,
            is_recovery=claim.recovery,
            output_so_far=claim.previous,
            pending_input_count=control.pending_input_count,
            cancelled=control.cancel_requested,
        )
        with COMMITTED.writing(response_id):  # readers here get the phase from the feed, not by polling
            text, stopped = await self._stream(response_id, writer, context, item_id)
            COMMITTED.expect(response_id, NEXT_ACTIVITY_EXPECTED_S)
        status: ItemStatus = "incomplete" if stopped else "completed"
        item = output_message(item_id, text, status=status)
        await storage.items.put_output_item(response_id, index, item)
        storage.events.keep_writer(writer)
        self._remember(_RunMemo(record, request, [*claim.previous, item]))
        log.info("phase done", extra={"response_id": response_id, "phase": index, "chars": len(text),
                                      "storage_calls": writer.storage_calls - claim.calls_before})
        return self._summary(index, item, context.cancelled, context.pending_input_count, stopped=stopped)

    async def _claim_as_remembered(self, response_id: str, index: int, item_id: str) -> _Claim | JsonDict | None:
        """Claim the log for phase ``index`` from what this process remembers of the run: one control read,
        then the opening append through the kept writer. None when there is nothing (consistent) to go by,
        or when that append lost: another process advanced the run, so storage must be read."""
        memo = self._runs.pop(response_id, None)
        writer = self.storage.events.take_writer(response_id)
        if memo is None or writer is None or len(memo.checkpoints) != index or not _boundary(writer.last_event, index):
            return None
        plan = [Phase.from_json(p) for p in memo.record.doc.get("plan") or []]
        if not 0 <= index < len(plan):
            return None
        control = await self.storage.responses.get_control(response_id)
        if control.status in TERMINAL_STATUSES or control.cancel_requested:
            return {"index": index, "stop": "cancelled"}
        if control.pending_input_count > 0:
            return {"index": index, "stop": "steered"}
        calls_before = writer.storage_calls
        try:
            await writer.append(ev.phase_opening_events(index, item_id))  # at once: never delay a phase's start
        except LostOwnership:
            return None
        return _Claim(memo.record, control, writer, plan, memo.checkpoints, False, memo.request, calls_before)

    async def _claim_from_storage(self, response_id: str, index: int, item_id: str) -> _Claim | JsonDict:
        """Claim the log for phase ``index`` from what storage says (the first activity of a run in this
        process, a re-delivery, a recovery after a crash)."""
        storage = self.storage
        record = await storage.responses.get(response_id)  # carries the control columns too
        control = Control(record.status, record.cancel_requested, record.pending_input_count)

        plan = [Phase.from_json(p) for p in record.doc.get("plan") or []]
        if not 0 <= index < len(plan):
            raise ValueError(f"phase {index} is outside the plan of {len(plan)} phases")
        for attempt in range(OPEN_ATTEMPTS):
            # Claim the end of the log. Losing this first append means a zombie copy of this activity
            # appended since we looked; look again (it may even have finished the phase) and retry.
            # Once our append lands, the zombie's next append is refused and it stops.
            # One read gives both the checkpoint of this phase (a re-delivery of a finished phase returns
            # it and streams nothing) and the items before it (the snapshot of a recovery reset).
            checkpoints = await storage.items.list_output_items(response_id)
            if len(checkpoints) > index:
                existing = checkpoints[index]
                return self._summary(index, existing, control.cancel_requested, control.pending_input_count,
                                     stopped=existing.get("status") == "incomplete")
            if attempt == 0 and (record.status in TERMINAL_STATUSES or control.cancel_requested):
                return {"index": index, "stop": "cancelled"}
            if attempt == 0 and control.pending_input_count > 0:
                return {"index": index, "stop": "steered"}
            previous = checkpoints[:index]
            writer = await storage.events.open_writer(response_id)  # last: keep the race window small
            recovery = not _boundary(writer.last_event, index)
            opening: list[JsonDict] = []
            if recovery:
                if not record.doc.get("background", False):
                    log.warning("non-background crash", extra={"response_id": response_id, "phase": index})
                    return {"index": index, "stop": "failed",
                            "error": {"code": "server_error", "message": NON_BACKGROUND_CRASH_MESSAGE}}
                log.warning("recovering phase", extra={"response_id": response_id, "phase": index})
                opening.append(ev.response_in_progress(response_object(record, previous, status="in_progress")))
            opening += ev.phase_opening_events(index, item_id)
            try:
                await writer.append(opening)  # flushed at once: the first event of a phase is never delayed
                return _Claim(record, control, writer, plan, previous, recovery, None)
            except LostOwnership:
                await asyncio.sleep(0.01)
        raise LostOwnership(f"could not claim the event log of {response_id} for phase {index}")

    @staticmethod
    def _summary(index: int, item: JsonDict, cancelled: bool, pending: int, *, stopped: bool) -> JsonDict:
        stop = None
        if cancelled:
            stop = "cancelled"
        elif pending > 0 or stopped:
            stop = "steered"
        return {"index": index, "stop": stop, "chars": len(text_of(item))}

    async def _stream(
        self, response_id: str, writer: EventWriter, context: PhaseContext, item_id: str
    ) -> tuple[str, bool]:
        """Pump the agent's deltas into the log and close the phase there: group-committed appends (see
        :mod:`resilient.engine.batching`) and control flags refreshed in the background. Returns the text
        and whether the phase stopped early (cancel or steering)."""
        appender = Appender(writer, self.tuning)
        control = ControlPoller(self.storage.responses, response_id, context, self.tuning.control_interval_s)
        index = context.phase_index
        pieces: list[str] = []
        stopped = False
        deltas: AsyncIterator[str] = aiter(self.agent.run_phase(context))
        control.start()
        try:
            while True:
                if context.should_stop:
                    stopped = True
                    break
                try:
                    delta = await anext(deltas)
                except StopAsyncIteration:
                    stopped = context.should_stop  # the agent saw the flags first and ended the phase early
                    break
                control.raise_if_failed()
                if delta:
                    pieces.append(delta)
                    appender.add(ev.output_text_delta(item_id, index, 0, delta))
            text = "".join(pieces)
            status: ItemStatus = "incomplete" if stopped else "completed"
            await appender.finish(ev.phase_closing_events(index, item_id, text, status))
        except BaseException:
            appender.cancel()
            raise
        finally:
            await control.stop()
            closer = getattr(deltas, "aclose", None)
            if closer is not None:
                try:
                    await closer()
                except Exception:  # an agent's cleanup error must not lose the phase
                    log.exception("agent generator close failed")
        return text, stopped

    # -------------------------------------------------------------- finalize
    async def finalize(self, response_id: str, outcome: JsonDict) -> JsonDict:
        """Decide the terminal status (CAS) and append the single terminal event (idempotent)."""
        storage = self.storage
        output = await storage.items.list_output_items(response_id)
        wanted = str(outcome.get("status", "completed"))
        memo = self._runs.pop(response_id, None)
        try:
            record = memo.record if memo is not None else await storage.responses.get(response_id)
            changes: JsonDict = {
                "completed_at": int(time.time()),
                "usage": usage_for(self._input_tokens(record), sum(estimate_tokens(text_of(i)) for i in output)),
            }
            if wanted == "failed":
                changes["error"] = outcome.get("error") or {"code": "server_error", "message": "The response failed."}
            try:
                record = await storage.responses.transition(
                    response_id, wanted, allowed_from=ACTIVE_STATUSES, doc_changes=changes, current=record
                )
            except InvalidTransition:
                record = await storage.responses.get(response_id)  # a cancel (or an earlier finalize) won
        except NotFound:  # already delivered and forgotten (store=false) or purged: nothing left to do
            return {"status": "gone"}
        terminal = [_terminal_event(record, output)]

        def unless_ended(last: JsonDict | None) -> list[JsonDict]:
            return [] if (last or {}).get("type") in ev.TERMINAL_EVENT_TYPES else terminal

        await self._append_at_end(response_id, unless_ended)  # a zombie phase may append meanwhile: retried
        COMMITTED.expect(response_id, 0)
        log.info("finalized", extra={"response_id": response_id, "status": record.status})
        return {"status": record.status}

    @staticmethod
    def _input_tokens(record: ResponseRecord) -> int:
        return estimate_tokens(str(record.doc.get("instructions") or "")) + int(record.doc.get("input_chars", 0)) // 4

    # --------------------------------------------------------------- helpers
    async def _agent_request(self, record: ResponseRecord) -> AgentRequest:
        items = await self._all_input_items(record.response_id)
        history = await self._history(record)
        return AgentRequest(
            response_id=record.response_id,
            model=str(record.doc.get("model") or ""),
            instructions=record.doc.get("instructions"),
            input_items=items,
            history=history,
            metadata=dict(record.doc.get("metadata") or {}),
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
