"""Concluding a run: the one terminal transition, the single terminal event, and leaving the repair index.

``finalize`` (run by the plan's last phase when it ends without a stop, else as its own activity): the
terminal status is decided by an ETag compare-and-swap (R5: a requested cancel wins over the outcome, a
terminal status already set stays); the terminal event is appended only if the log does not end with one
already. Then the response leaves the index of unfinished runs that the repair path watches.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from resilient.engine.chain.snapshot import response_object
from resilient.engine.run import recovery
from resilient.engine.worker_state import WorkerState
from resilient.protocol import events as ev
from resilient.protocol.items import text_of
from resilient.protocol.response import estimate_tokens, usage_for
from resilient.storage.cas import ROW_CAS_ATTEMPTS, retry_cas
from resilient.storage.errors import LostOwnership, NotFound, PreconditionFailed
from resilient.storage.logend import append_at_end, log_ended
from resilient.storage.ports import ACTIVE_STATUSES, TERMINAL_STATUSES, JsonDict, ResponseRecord
from resilient.telemetry import metrics

if TYPE_CHECKING:
    from resilient.storage.factory import Storage

log = logging.getLogger("resilient.engine")

ESTIMATED_USAGE_KEY = "usage_estimated"  # in a row's document: the agent has no model to count tokens


async def finalize(storage: Storage, worker: WorkerState, response_id: str, outcome: JsonDict,
                   output: Sequence[JsonDict] | None = None) -> JsonDict:
    """Decide the terminal status (CAS) and append the single terminal event (idempotent).

    ``output``: the response's checkpointed output when the caller has just written it (the plan's last
    phase concluding the run in its own activity): the list storage would return, not read back. Any
    other caller passes nothing and the checkpoints are read, since a phase may have run elsewhere."""
    output = list(output) if output is not None else await storage.items.list_output_items(response_id)
    memo = worker.runs.pop(response_id)
    try:
        record = await conclude(storage, response_id, output, str(outcome.get("status", "completed")),
                                outcome.get("error"), current=memo.record if memo is not None else None)
    except NotFound:  # already delivered and forgotten (store=false) or purged: nothing left to do
        await leave_index(storage, response_id)
        return {"status": "gone"}
    terminal = [terminal_event(record, output)]
    mend = await mend_left_open(storage, response_id, record, output)

    ending: list[bool] = []  # whether this call's last attempt appended the terminal event (else it was there)

    def unless_ended(last: JsonDict | None) -> list[JsonDict]:
        ending[:] = [False]
        if (last or {}).get("type") in ev.TERMINAL_EVENT_TYPES:
            return []
        ending[:] = [True]
        if mend is not None and (last or {}).get("sequence_number") == mend[0]:
            return [*mend[1], *terminal]
        return terminal

    try:
        await append_at_end(storage.events, response_id, unless_ended)  # a zombie phase may append meanwhile
        ended = True
    except LostOwnership:
        ended = False
    if ended and ending == [True]:  # counted once per run: a repeated finalize finds the event there
        metrics.RUNS_FINISHED.add(1, {"status": record.status})
    worker.feed.expect(response_id, 0)
    if ended:
        await leave_index(storage, response_id)
    log.info("finalized", extra={"response_id": response_id, "status": record.status})
    return {"status": record.status}


async def mend_left_open(
    storage: Storage, response_id: str, record: ResponseRecord, output: list[JsonDict]
) -> tuple[int, list[JsonDict]] | None:
    """When the log does not end where the checkpoints end, what finalize appends before the terminal
    event, and the sequence number of the last event it was decided on; else None.

    A run can end without another phase attempt after a dead one: its worker died mid-phase and the
    retry found the run cancelled or steered (it returns at once), or the crash budget ran out. The
    dead attempt's item is then still open in the stream (or closed but never checkpointed), and the
    terminal event's output does not hold it. The item is closed, as it is before any re-run phase (R4),
    ``incomplete``, and a ``response.in_progress`` carrying the checkpointed output follows, so a client
    that rebuilds the output from the stream drops it and gets what ``GET`` returns.
    """
    events = storage.events
    writer = events.take_writer(response_id) or await events.open_writer(response_id)
    events.keep_writer(writer)  # the terminal append below takes it again (its append confirms it)
    last = writer.last_event
    if last is None or not isinstance(last.get("output_index"), int) or recovery.boundary(last, output):
        return None
    tail = await recovery.scan_tail(events, response_id, writer.next_sequence_number)
    reset = ev.response_in_progress(response_object(record, output, status="in_progress"))
    return int(last["sequence_number"]), [*tail.closing, reset]


async def leave_index(storage: Storage, response_id: str) -> None:
    """The run is over: drop it from the index the repair path watches. Best effort: a leftover entry
    costs the repair path one look, after which it removes the entry itself."""
    try:
        await storage.active.remove(response_id)
    except Exception:
        log.warning("could not drop the response from the active index", extra={"response_id": response_id})


async def inspect(storage: Storage, response_id: str) -> JsonDict:
    """Whether a response's run is over: a terminal status *and* its terminal event in the log (a
    cancelled run still writes its partial item and terminal event after the status changed).
    A response that no longer exists (deleted, forgotten, purged) is over too."""
    try:
        status = (await storage.responses.get_control(response_id)).status
    except NotFound:
        return {"status": "gone", "over": True}
    return {"status": status, "over": status in TERMINAL_STATUSES and await log_ended(storage.events, response_id)}


async def settle_cancel(storage: Storage, response_id: str) -> None:
    """Set ``cancelled`` once the run has stopped and its output is checkpointed (no-op when a
    terminal status is already set). Finalize still appends the terminal event."""
    output = await storage.items.list_output_items(response_id)
    try:
        record = await conclude(storage, response_id, output, "cancelled", None)
    except NotFound:
        return
    log.info("cancel settled", extra={"response_id": response_id, "status": record.status, "items": len(output)})


async def conclude(storage: Storage, response_id: str, output: Sequence[JsonDict], wanted: str,
                   error: JsonDict | None, *, current: ResponseRecord | None = None) -> ResponseRecord:
    """The one terminal transition (ETag CAS from an active status; a terminal status already set
    stays). A raised cancel flag turns any outcome into ``cancelled``: the flag is set by a CAS that
    only succeeds on an active row, so either it landed first and the cancel wins here, or this
    transition landed first and the cancel is refused (R5)."""
    responses = storage.responses
    known = [current] if current is not None else []  # a row read or written earlier: a stale one only loses

    async def attempt() -> ResponseRecord:
        record = known.pop() if known else await responses.get(response_id)
        if record.status not in ACTIVE_STATUSES:
            return record  # a cancel (or an earlier finalize) won
        status = "cancelled" if record.cancel_requested else wanted
        changes: JsonDict = {"completed_at": int(time.time()), "usage": usage(record, output)}
        if status == "failed":
            changes["error"] = error or {"code": "server_error", "message": "The response failed."}
        # a lost CAS: the row changed (a cancel flag, a pending-input count): decide again
        return await responses.replace(record, status=status, doc_changes=changes)

    return await retry_cas(attempt, ROW_CAS_ATTEMPTS, lambda: PreconditionFailed(
        f"response {response_id!r}: the terminal transition kept losing the CAS"))


def usage(record: ResponseRecord, output: Sequence[JsonDict]) -> JsonDict | None:
    """The model's own token counts, added up over the phases, when an agent reported them. None when no
    model reported any: a count nobody made is not presented as the model's. An agent with no model that
    says so (``estimates_usage``, the offline sample) gets an estimate of about four characters a token."""
    reported = [v for k, v in record.doc.items() if k.startswith("usage_") and isinstance(v, dict)]
    if reported:
        return usage_for(
            sum(int(u.get("input_tokens", 0)) for u in reported),
            sum(int(u.get("output_tokens", 0)) for u in reported),
            cached_tokens=sum(int(u.get("cached_tokens", 0)) for u in reported),
            reasoning_tokens=sum(int(u.get("reasoning_tokens", 0)) for u in reported),
        )
    if not record.doc.get(ESTIMATED_USAGE_KEY):
        return None
    estimated_input = estimate_tokens(str(record.doc.get("instructions") or "")) + int(
        record.doc.get("input_chars", 0)) // 4
    return usage_for(estimated_input, sum(estimate_tokens(text_of(i)) for i in output))


def terminal_event(record: ResponseRecord, output: Sequence[JsonDict]) -> JsonDict:
    snapshot = response_object(record, output)
    if record.status == "completed":
        return ev.response_completed(snapshot)
    if record.status == "incomplete":
        return ev.response_incomplete(snapshot)
    return ev.response_failed(snapshot)  # failed, and cancelled (the client has no response.cancelled)
