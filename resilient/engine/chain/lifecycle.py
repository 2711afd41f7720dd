"""The rules for a response's life outside its run: reading it as a client may, cancelling, deleting, and
failing a create whose run could not be started.

Cancel is atomic to readers: a running response only gets its cancel flag; the run sets ``cancelled``
itself once the phase it stopped has checkpointed its partial item (``settle_cancel``), and the cancel waits
for that, bounded. Delete is decided by one compare-and-swap that marks the row deleted; only the winner
then removes the items, the log and the row.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from resilient.engine.chain import turns
from resilient.engine.chain.refusals import Contended, Invalid, NotStored, Refused
from resilient.engine.chain.snapshot import response_object
from resilient.engine.heal import unstored
from resilient.ids import RESPONSE_PREFIX, InvalidId, validate_id
from resilient.protocol import errors
from resilient.protocol import events as ev
from resilient.storage.cas import CHAIN_CAS_ATTEMPTS, retry_cas
from resilient.storage.errors import InvalidTransition, NotFound
from resilient.storage.logend import log_ended
from resilient.storage.ports import ACTIVE_STATUSES, TERMINAL_STATUSES, ResponseRecord

if TYPE_CHECKING:
    from resilient.storage.factory import Storage

# The lines these rules log describe API requests, so they go to the HTTP layer's logger (one place for an operator
# to filter requests), although the rules are the engine's.
log = logging.getLogger("resilient.http")

DELETED_MARK = "deleted"  # doc key set by the one DELETE that wins; the row is 404 from then on
# A running phase sees a cancel at once when this process handled it, else within one control interval
# (RESILIENT_CONTROL_INTERVAL_MS × the load factor), plus one agent delta, then checkpoints;
# the bound covers slow agents and a re-delivered phase (the orchestrator's first retry waits 2 s).
CANCEL_SETTLE_SECONDS = 10.0
CANCEL_POLL_SECONDS = 0.05
RUN_OVER_WAIT_SECONDS = 2.0


def is_stored(doc: dict[str, object]) -> bool:
    """Whether a response's document may be read back: stored (``store`` not false) and not deleted."""
    return bool(doc.get("store", True)) and not doc.get(DELETED_MARK)


async def stored(storage: Storage, response_id: str) -> ResponseRecord:
    """The stored row; :class:`NotStored` for unknown ids, hostile ids, deleted or ``store=false`` responses."""
    try:
        validate_id(response_id, prefix=RESPONSE_PREFIX)
        record = await storage.responses.get(response_id)
    except (InvalidId, NotFound):
        raise NotStored(response_id) from None
    if not is_stored(record.doc):
        raise NotStored(response_id)
    return record


async def cancel(storage: Storage, record: ResponseRecord, wake: Callable[[], Awaitable[None]],
                 settle_seconds: float) -> tuple[ResponseRecord, bool]:
    """Cancel a background response: the row as cancelled, and whether this call cancelled it.

    Why cancel waits: the run stops at its next delta and then checkpoints the partial item. Were
    ``cancelled`` written at once, readers would see it with that item missing for a moment. So a running
    response only gets its cancel flag here; the run itself sets ``cancelled`` right after its checkpoint
    (``Engine.settle_cancel``), and this waits for that, bounded by ``settle_seconds``. A run that does not
    react in time (its worker is gone, storage is failing) is cancelled here; its partial item, if any,
    then follows when the run resumes. A turn that has not started (``queued``) has no output to wait for
    and is cancelled at once. ``wake`` tells a queued turn waiting for its chain lock."""
    response_id = record.response_id
    if not record.doc.get("background", False):
        raise Invalid(errors.CODE_BACKGROUND_REQUIRED,
                      "Only responses created with background=true can be cancelled.", param="response_id")
    if record.status == "cancelled":
        return record, False
    if record.status in TERMINAL_STATUSES:
        raise Refused(errors.CODE_ALREADY_FINISHED,
                      f"Cannot cancel a response that is already {record.status}.", param="response_id")
    try:
        flagged = await raise_cancel_flag(storage, response_id)
    except InvalidTransition as lost:
        if lost.current_status == "cancelled":
            return await storage.responses.get(response_id), False
        raise Refused(errors.CODE_ALREADY_FINISHED,
                      f"Cannot cancel a response that is already {lost.current_status}.",
                      param="response_id") from None
    await wake()  # a running phase sees the flag itself
    if flagged.status == "cancelled" and flagged.doc.get("chain_id"):  # it was queued: S4
        chain_id = str(flagged.doc["chain_id"])
        await turns.steer(storage, await turns.turns_ahead(storage, chain_id, response_id), -1)
    final = flagged if flagged.status == "cancelled" else await await_settled_cancel(
        storage, response_id, settle_seconds)
    if final.status != "cancelled":
        raise Refused(errors.CODE_ALREADY_FINISHED,
                      f"Cannot cancel a response that is already {final.status}.", param="response_id")
    return final, True


async def raise_cancel_flag(storage: Storage, response_id: str) -> ResponseRecord:
    """One CAS on the row: a ``queued`` turn (nothing planned, no phase can start without reading the
    flag) becomes ``cancelled`` at once; a running one only gets ``cancel_requested``. Raises
    InvalidTransition when the response is already terminal."""
    responses = storage.responses

    async def attempt() -> ResponseRecord:
        record = await responses.get(response_id)
        if record.status not in ACTIVE_STATUSES:
            raise InvalidTransition(record.status, "cancelled")
        # a lost CAS: the run (or a steering turn) wrote the row meanwhile: look again
        if record.status == "queued":
            return await responses.replace(record, status="cancelled", cancel_requested=True,
                                           doc_changes={"completed_at": int(time.time())})
        return await responses.replace(record, cancel_requested=True)

    return await retry_cas(attempt, CHAIN_CAS_ATTEMPTS, Contended)


async def await_settled_cancel(storage: Storage, response_id: str, settle_seconds: float) -> ResponseRecord:
    """Wait until the run has stopped and set the terminal status; past the bound, set it here."""
    deadline = time.monotonic() + settle_seconds
    while time.monotonic() < deadline:
        if (await storage.responses.get_control(response_id)).status in TERMINAL_STATUSES:
            return await storage.responses.get(response_id)
        await asyncio.sleep(CANCEL_POLL_SECONDS)
    log.warning("cancel: the run did not stop in time; status set without waiting for it",
                extra={"response_id": response_id, "waited_s": settle_seconds})
    try:
        return await storage.responses.transition(
            response_id, "cancelled", allowed_from=ACTIVE_STATUSES, cancel_requested=True,
            doc_changes={"completed_at": int(time.time())})
    except InvalidTransition:
        return await storage.responses.get(response_id)  # the run settled just now


async def delete(storage: Storage, response_id: str) -> None:
    """Delete a finished response; exactly one of several concurrent calls succeeds, the others (and
    every later one) get :class:`NotStored`.

    The winner is decided by an ETag compare-and-swap that marks the row deleted (from then on it is
    404 everywhere); only then are the items, the log and the row removed. A crash halfway leaves a
    marked, finished row, which the retention clean-up removes with everything else later."""

    async def attempt() -> None:
        record = await stored(storage, response_id)  # NotStored once another DELETE has marked it
        if record.status in ACTIVE_STATUSES or not await run_over_soon(storage, response_id):
            raise Refused(
                errors.CODE_STILL_RUNNING,
                "Cannot delete a response that is still running; cancel it first (a cancelled response can "
                "be deleted once its run has stopped, usually within a second).", param="response_id")
        # a lost CAS: the row changed since it was read (maybe another DELETE won): look again
        await storage.responses.replace(record, doc_changes={DELETED_MARK: True})

    await retry_cas(attempt, CHAIN_CAS_ATTEMPTS, Contended)
    await storage.items.delete_all(response_id)
    await storage.events.delete(response_id)
    await storage.responses.delete(response_id)


async def run_over_soon(storage: Storage, response_id: str) -> bool:
    """Whether the run has written its terminal event, waiting up to RUN_OVER_WAIT_SECONDS: a terminal
    status comes a moment before the terminal event (finalize's CAS, then its append; a cancel, then the
    run's next delta), and a client that saw ``completed`` or just cancelled should not be refused for
    that moment. Deleting before the terminal event races the run's last writes and leaves a
    half-deleted response (orphan item rows, failed activities)."""
    deadline = time.monotonic() + RUN_OVER_WAIT_SECONDS
    while not await log_ended(storage.events, response_id):
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def fail_unstarted(storage: Storage, response_id: str) -> None:
    """The orchestration of a new response could not be started: fail it (one terminal event, R5, so it
    is deletable), or forget it at once when it is ``store=false`` (nothing will run: nothing may stay)."""
    try:
        if not (await storage.responses.get(response_id)).doc.get("store", True):
            await unstored.forget(storage, response_id)
            return
        record = await storage.responses.transition(
            response_id, "failed", allowed_from=ACTIVE_STATUSES,
            doc_changes={"error": {"code": "server_error", "message": "The run could not be started."}},
        )
        writer = await storage.events.open_writer(response_id)
        if (writer.last_event or {}).get("type") not in ev.TERMINAL_EVENT_TYPES:
            await writer.append([ev.response_failed(response_object(record, []))])
    except Exception:
        log.exception("could not mark an unstarted response failed", extra={"response_id": response_id})
