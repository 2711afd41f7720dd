"""Endpoint logic for the Responses API, independent of the Functions host.

Every handler returns an :class:`HttpResult` (status, headers, JSON body or a byte stream); the bindings
in ``resilient/functions/http.py`` turn it into a FastAPI response. The durable side is reached through
the tiny :class:`DurableRuntime` port, so the same logic runs under ``func start``, the host double and
unit tests.

Ordering rules that make crashes harmless:
* create: input items, response row, event log (``response.created``) and the entry in the index of
  unfinished runs are written together, then the orchestration starts. A crash before the start leaves a
  ``queued`` row without an orchestration; the client got no 2xx, so it retries and gets a new response
  (ids are never reused), and the repair path starts the orphan after its grace period, so it never stays
  ``queued`` (see :mod:`resilient.engine.repair`).
* a read of an unfinished response (``GET``, or a stream that sees no progress) asks the repair path to
  check its orchestration, throttled per response; a run whose orchestration died resumes.
* streams end cleanly before the host's ``functionTimeout`` (``Settings.stream_limit_seconds``): a timeout
  would restart the worker and kill every run in it; the client reconnects with ``starting_after``.
* every event a client sees is read back from the event log (R1), so a live stream and a replay are the
  same bytes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from resilient.engine import orchestrator as orch
from resilient.engine import unstored
from resilient.engine.batching import expect_next_activity, load_factor
from resilient.engine.repair import DurableControl, Repairer
from resilient.engine.snapshot import response_object
from resilient.http.continuation import Continuation, check_continuation
from resilient.http.streaming import tail_events
from resilient.ids import (
    RESPONSE_PREFIX,
    InvalidId,
    new_input_item_id,
    new_message_id,
    new_response_id,
    validate_id,
)
from resilient.protocol import errors
from resilient.protocol import events as ev
from resilient.protocol.errors import ApiError
from resilient.protocol.items import text_of
from resilient.protocol.params import parse_bool, parse_int
from resilient.settings import Settings
from resilient.storage.errors import InvalidTransition, NotFound, PreconditionFailed, StorageUnavailable
from resilient.storage.feed import COMMITTED
from resilient.storage.ports import ACTIVE_STATUSES, TERMINAL_STATUSES, CommittedBlock, ReadResult, ResponseRecord

if TYPE_CHECKING:
    from resilient.protocol.request import CreateResponseRequest
    from resilient.storage.factory import Storage

log = logging.getLogger("resilient.http")

MAX_BODY_BYTES = 2 * 1024 * 1024
CHAIN_CAS_ATTEMPTS = 20
FINALIZE_GRACE_SECONDS = 120.0  # > the orchestrator's finalize retries (2+4+8+16+32 s)
# A running phase sees a cancel within one control poll (0.2 s) plus one agent delta, then checkpoints;
# the bound covers slow agents and a re-delivered phase (the orchestrator's first retry waits 2 s).
CANCEL_SETTLE_SECONDS = 10.0
CANCEL_POLL_SECONDS = 0.05
ORCHESTRATOR_NAME = "responses_orchestrator"
RUN_OVER_WAIT_SECONDS = 2.0
DELETED_MARK = "deleted"  # doc key set by the one DELETE that wins; the row is 404 from then on


class DurableRuntime(DurableControl, Protocol):
    """What the app needs from Durable Functions: start (also over a terminal instance), status and entity
    signals (for the repair path, :class:`~resilient.engine.repair.DurableControl`), and raising events
    (cancel). The endpoints themselves only start and raise events."""

    async def raise_event(self, instance_id: str, name: str, data: Any) -> None: ...


@dataclass
class HttpResult:
    status: int
    body: Any = None
    stream: AsyncIterator[bytes] | None = None
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def is_stream(self) -> bool:
        return self.stream is not None


def error_result(error: ApiError) -> HttpResult:
    return HttpResult(error.status, error.body(), headers=error.headers())


# An SSE comment (clients ignore it) on a stream ended by the time limit, for people reading the raw stream.
# One newline only, like the keep-alive: a blank line after it would dispatch an empty event, because a client
# keeps the last event id (SSE spec), and the ``openai`` client then fails to parse its empty data.
STREAM_LIMIT_NOTE = b": stream time limit reached; reconnect with starting_after=<last sequence_number>\n"
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no", "Content-Type": "text/event-stream"}


CreatedHook = Callable[[ResponseRecord, list[dict[str, Any]]], None]


class ResponsesService:
    cancel_settle_seconds: float = CANCEL_SETTLE_SECONDS  # how long a cancel waits for the run to stop

    def __init__(self, storage: Storage, runtime: DurableRuntime, settings: Settings, *,
                 repairer: Repairer | None = None, on_created: CreatedHook | None = None) -> None:
        self.storage = storage
        self.runtime = runtime
        self.settings = settings
        self.repairer = repairer  # on-demand repair of runs whose orchestration died (None: off)
        self._on_created = on_created  # the engine of this process remembers what it need not read back

    # ---------------------------------------------------------------- create
    async def create(self, body: bytes) -> HttpResult:
        if len(body) > MAX_BODY_BYTES:
            raise errors.payload_too_large(MAX_BODY_BYTES)
        # The request models (pydantic, ~40 ms to build) load with the first create, not when a new worker
        # indexes the app: a worker that only runs phases or serves reads never needs them.
        from resilient.protocol.request import normalize_input_items, parse_create_request

        request = parse_create_request(body)
        chain_id, previous = await self._resolve_chain(request)
        continuation = await self._continuation(request, chain_id, previous)
        response_id = new_response_id()
        turns_ahead: list[str] = []
        previous_turn: str | None = None
        if not request.store:
            # Nothing of a store=false turn may stay behind, so it does not join its chain: it reads the
            # chain's history as it stands and neither queues, steers nor appears in the chain row.
            previous_turn = previous
            if previous_turn is None and chain_id is not None:  # a conversation: after its newest turn
                previous_turn = (await self.storage.chains.get(chain_id)).latest_response_id
            chain_id = None
        elif chain_id is not None:
            turns_ahead, previous_turn = await self._register_turn(
                chain_id, response_id, previous, is_conversation=request.conversation is not None)
        else:
            chain_id = response_id  # a stored root turn is its own chain: later turns queue behind it
        items = normalize_input_items(request, new_message_id, new_input_item_id)
        doc: dict[str, Any] = {
            "created_at": int(time.time()),
            "model": request.model,
            "instructions": request.instructions,
            "background": request.background,
            "stream": request.stream,
            "store": request.store,
            "metadata": request.metadata or {},
            "previous_response_id": previous,
            "conversation_id": request.conversation,
            "chain_id": chain_id,
            "previous_turn": previous_turn,
            "input_chars": sum(len(text_of(i)) for i in items),
            "tools": [tool.to_json() for tool in request.tools],
            "tool_choice": request.tool_choice,
        }
        if continuation.resume is not None:
            doc["resume"] = continuation.resume
        if not request.store:
            doc[orch.FORGET_AFTER_KEY] = self.settings.unstored_grace_seconds
        # Independent writes, issued together: nothing runs the response until the orchestration starts,
        # so their order does not matter for crashes (a crash here leaves an unstarted, invisible draft).
        draft = ResponseRecord(response_id, "queued", doc, etag="")
        owns_lock = chain_id == response_id  # a stored root turn: its chain's lock is its own from the start
        opening = [ev.response_created(response_object(draft, []))]
        if chain_id is None or owns_lock:
            # No lock to wait for (a root turn owns its chain's, store=false takes none): nothing can come
            # between its create and its run, so the log opens with ``response.in_progress`` too and the
            # plan appends nothing (one append fewer per run; a queued turn gets it once its lock is granted).
            opening.append(ev.response_in_progress(response_object(draft, [], status="in_progress")))
        _, record, writer, _ = await asyncio.gather(
            self.storage.items.put_input_items(response_id, items),
            self.storage.responses.create(response_id, "queued", doc),
            self.storage.events.create(response_id, opening),
            self.storage.active.add(response_id, doc["created_at"]),  # watched by the repair path until final
        )
        run_input: dict[str, Any] = {"response_id": response_id, "chain_id": chain_id}
        if owns_lock:
            run_input[orch.OWNS_LOCK_KEY] = True
        elif chain_id is not None and not turns_ahead:
            run_input[orch.NOTHING_AHEAD_KEY] = True  # a holder it meets is a finished turn: inspect it at once
        if not request.store:  # in the row too: a repaired execution must still delete itself at its end
            run_input[orch.FORGET_AFTER_KEY] = doc[orch.FORGET_AFTER_KEY]
        self.storage.events.keep_writer(writer)  # the run's first activity, if it runs here, appends with it
        created = writer.last_committed  # a stream of this create starts from it, not from a storage read
        if self._on_created is not None:
            self._on_created(record, items)
        try:
            await self.runtime.start(response_id, run_input)
        except Exception:
            log.exception("could not start the orchestration", extra={"response_id": response_id})
            await self._fail_unstarted(response_id)
            raise errors.service_unavailable() from None
        await self._steer(turns_ahead, +1)
        if not turns_ahead:  # its first activity comes next, probably here; a queued turn waits for its lock
            expect_next_activity(response_id)
        log.info("created", extra={"response_id": response_id, "chain_id": chain_id,
                                   "background": request.background, "stream": request.stream})
        if request.stream:
            return HttpResult(200, stream=self._limited(self._stream_then_forget(record, -1, created)),
                              headers=dict(SSE_HEADERS))
        if request.background:
            return HttpResult(200, response_object(record, []))
        return HttpResult(200, await self._wait_for_terminal(record, created))

    async def _resolve_chain(self, request: CreateResponseRequest) -> tuple[str | None, str | None]:
        """A chain is named by ``conversation`` or by following ``previous_response_id`` to its root."""
        if request.conversation:
            return request.conversation, None
        if not request.previous_response_id:
            return None, None
        try:
            previous = await self.storage.responses.get(request.previous_response_id)
        except NotFound:
            previous = None
        if previous is None or not previous.doc.get("store", True) or previous.doc.get(DELETED_MARK):
            raise errors.invalid_request(  # 400, as the OpenAI API answers (not 404: the route exists)
                f"Previous response with id {errors.echo(request.previous_response_id)} not found.",
                code=errors.CODE_PREVIOUS_RESPONSE_NOT_FOUND, param="previous_response_id")
        chain = previous.doc.get("chain_id") or previous.response_id
        return str(chain), previous.response_id

    async def _continuation(self, request: CreateResponseRequest, chain_id: str | None,
                            previous: str | None) -> Continuation:
        """Tool outputs and approval answers must answer the chain's newest turn (checked before the turn
        is registered, so a 400 leaves no trace on the chain)."""
        if not request.function_outputs() and not request.approval_responses() and previous is None:
            return Continuation()
        if previous is None and request.conversation is not None and chain_id is not None:
            previous = (await self.storage.chains.get(chain_id)).latest_response_id
        return await check_continuation(self.storage, request, previous)

    async def _register_turn(self, chain_id: str, response_id: str, previous: str | None, *,
                             is_conversation: bool) -> tuple[list[str], str | None]:
        """Append this turn to its chain (one CAS on the chain row); return the unfinished turns ahead and
        the chain's previous newest turn (the start of this turn's history).

        S1/S3: with steering off, a busy chain answers 409 ``conversation_locked``. A
        ``previous_response_id`` that is not the chain's newest turn is a fork (409). A chain named by a
        response id has no row until its second turn: its root is then the newest and only turn.
        """
        chains = self.storage.chains
        for _ in range(CHAIN_CAS_ATTEMPTS):
            chain = await chains.get(chain_id)
            rooted = chain.etag is None and not is_conversation
            latest = chain.latest_response_id or (chain_id if rooted else None)
            if previous is not None and latest is not None and latest != previous and await self._exists(latest):
                raise errors.conflict(
                    errors.CODE_FORK_NOT_SUPPORTED,
                    "previous_response_id must be the latest response of its conversation chain; "
                    "forking a chain is not supported.", param="previous_response_id")
            candidates = list(chain.open_turns) or ([chain_id] if rooted else [])
            ahead = [turn for turn in candidates if await self._active(turn)]
            if ahead and not self.settings.steerable_conversations:
                raise errors.conflict(errors.CODE_CONVERSATION_LOCKED,
                                      "Another response is in progress on this conversation; try again when it "
                                      "completes.", param="previous_response_id" if previous else "conversation")
            try:
                await chains.append_turn(chain, response_id, [*ahead, response_id])
                return ahead, latest
            except PreconditionFailed:
                continue  # another turn landed on this chain meanwhile: look again
        raise errors.service_unavailable()

    async def _status(self, response_id: str) -> str | None:
        """The turn's status, or None when it has no row (deleted, or a create that never finished)."""
        try:
            return (await self.storage.responses.get_control(response_id)).status
        except NotFound:
            return None

    async def _active(self, response_id: str) -> bool:
        return await self._status(response_id) in ACTIVE_STATUSES

    async def _exists(self, response_id: str) -> bool:
        return await self._status(response_id) is not None

    async def _steer(self, turns: list[str], delta: int) -> None:
        """S2: every unfinished turn ahead sees one more (or, on a queued turn's cancel, one fewer) turn
        waiting behind it; a running phase reads the live count and finishes early."""
        for turn in turns:
            try:
                await self.storage.responses.add_pending_input(turn, delta)
            except NotFound:
                continue

    async def _fail_unstarted(self, response_id: str) -> None:
        try:
            if not (await self.storage.responses.get(response_id)).doc.get("store", True):
                await unstored.forget(self.storage, response_id)  # nothing will run: nothing may stay
                return
            record = await self.storage.responses.transition(
                response_id, "failed", allowed_from=ACTIVE_STATUSES,
                doc_changes={"error": {"code": "server_error", "message": "The run could not be started."}},
            )
            writer = await self.storage.events.open_writer(response_id)  # one terminal event (R5), and a
            if (writer.last_event or {}).get("type") not in ev.TERMINAL_EVENT_TYPES:  # deletable response
                await writer.append([ev.response_failed(response_object(record, []))])
        except Exception:
            log.exception("could not mark an unstarted response failed", extra={"response_id": response_id})

    async def _wait_for_terminal(self, record: ResponseRecord, created: CommittedBlock | None) -> dict[str, Any]:
        """A synchronous (non-background, non-stream) request: follow the log to its terminal event, but
        answer with the response as it is before the host's functionTimeout would restart the worker.

        For ``store=false`` the end of this request, however it ends, lets the run forget: an answer cut
        short by the time limit is "abandoned" (the run is stopped: nobody can read the rest)."""
        limit = self.settings.stream_limit_seconds
        delivered = False
        try:
            try:
                async with asyncio.timeout(limit):
                    async for _ in tail_events(self.storage.events, record.response_id, -1, keepalive_seconds=None,
                                               finished=self._finished_probe(record.response_id), start=created,
                                               widen=_load_factor_here):
                        pass
            except TimeoutError:
                log.warning("synchronous request reached the time limit", extra={"response_id": record.response_id})
                return await self._response(record.response_id)
            final = await self._response(record.response_id)
            delivered = True
            return final
        finally:
            if not record.doc.get("store", True):
                self._client_done(record.response_id, delivered)

    async def _stream_then_forget(self, record: ResponseRecord, starting_after: int,
                                  start: CommittedBlock | None) -> AsyncIterator[bytes]:
        """The live stream of ``POST /responses``. For ``store=false`` the end of this generator, however
        it ends (terminal event sent, client gone, time limit, worker shutting down), lets the run forget."""
        delivered = False
        try:
            async for frame in tail_events(self.storage.events, record.response_id, starting_after,
                                           finished=self._finished_probe(record.response_id), start=start,
                                           widen=_load_factor_here):
                yield frame
            delivered = True
        finally:
            if not record.doc.get("store", True):
                self._client_done(record.response_id, delivered)

    def _client_done(self, response_id: str, delivered: bool) -> None:
        """``store=false``: tell the run its client is done with it (it then deletes everything, see
        ``resilient/engine/unstored.py``); a client that left early also stops the run. Detached: a
        stream whose client left is being cancelled and cannot await anything."""

        async def report() -> None:
            if not delivered:
                log.info("store=false client gone before the end", extra={"response_id": response_id})
                await unstored.abandon(self.storage, response_id)
            try:
                await self.runtime.raise_event(response_id, orch.CLIENT_DONE_EVENT, {"delivered": delivered})
            except Exception:  # the run already forgot it after its grace period: nothing left to tell
                log.info("client_done not delivered", extra={"response_id": response_id})

        unstored.detach(report(), "client_done")

    # -------------------------------------------------------------- retrieve
    async def retrieve(self, response_id: str, query: Mapping[str, str], headers: Mapping[str, str]) -> HttpResult:
        stream = _optional_bool(query, "stream")
        _optional_bool(query, "include_obfuscation")  # accepted and ignored, but only as a boolean
        if not stream:
            starting_after = _starting_after(query, headers)
            record = await self._stored(response_id)
            if record.status in ACTIVE_STATUSES:
                await self._nudge(response_id)
            return HttpResult(200, await self._response(response_id, record))
        # A reconnect: read the log while the row is checked (one round trip instead of two before the first
        # event). Nothing read is sent unless the checks pass; they fail in the same order as ever.
        starting_after = _starting_after(query, headers)
        start = _remembered(response_id, starting_after)
        first_read = None if start is not None else self._early_read(response_id, starting_after)
        try:
            record = await self._stored(response_id)
            if not record.doc.get("background", False):
                raise errors.invalid_request(
                    "Streaming a stored response is only possible for responses created with background=true.",
                    code=errors.CODE_BACKGROUND_REQUIRED, param="stream")
        except BaseException:
            if first_read is not None:
                first_read.cancel()
            raise
        return HttpResult(200, stream=self._limited(tail_events(self.storage.events, response_id, starting_after,
                                                                finished=self._finished_probe(response_id),
                                                                start=start, first_read=first_read,
                                                                widen=_load_factor_here)),
                          headers=dict(SSE_HEADERS))

    def _early_read(self, response_id: str, starting_after: int) -> asyncio.Future[ReadResult] | None:
        """Start reading the log for a well-formed reconnect (no storage call for a malformed id)."""
        try:
            validate_id(response_id, prefix=RESPONSE_PREFIX)
        except InvalidId:
            return None
        task = asyncio.ensure_future(self.storage.events.read_after(response_id, starting_after))
        task.add_done_callback(_consume_outcome)  # an unused read's failure is not an unhandled error
        return task

    async def _nudge(self, response_id: str) -> None:
        """The client reads a run that is not over: let the repair path check that its orchestration still
        lives (throttled per response; never raises).

        Not while a phase of the run streams in this process or its next activity is expected here (its
        create or its last activity ran here moments ago): that is evidence of a live orchestration, and
        the check (a control read and a Durable status call) would only add load when the process is
        busiest, typically the first poll right after a create. Such a skipped read does not use up the
        throttle, so the first read after that window checks: an orchestration stopped meanwhile (terminated,
        or failed by a worker that died elsewhere) is found at most one phase plus the expectation (5 s,
        up to 20 s under load; see :func:`expect_next_activity`) later. A worker that dies takes this
        memory with it: its successor checks at once."""
        if self.repairer is None or COMMITTED.writing_here(response_id) or COMMITTED.expected_here(response_id):
            return
        await self.repairer.nudge(response_id)

    async def _limited(self, frames: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """End a stream cleanly before the host's functionTimeout (which would restart the worker). The
        stream then ends without a terminal event; the client reconnects with ``starting_after`` = the last
        ``sequence_number`` it got. Frames (keep-alives included) come at least every 15 s, so the limit is
        kept within that; it sits a minute below the timeout."""
        limit = self.settings.stream_limit_seconds
        try:
            deadline = None if limit is None else time.monotonic() + limit
            async for frame in frames:
                yield frame
                if deadline is not None and time.monotonic() >= deadline:
                    yield STREAM_LIMIT_NOTE
                    return
        finally:
            closer = getattr(frames, "aclose", None)
            if closer is not None:
                await closer()

    def _finished_probe(self, response_id: str) -> Callable[[], Awaitable[bool]]:
        """Tells an idle replay that nothing more will come. A terminal *status* is not enough: finalize
        (and a cancel) sets it before the terminal *event* is appended, and a stream that stopped in that
        window would never deliver its terminal event. So: the log must end with it, or the status must
        have been terminal without it for FINALIZE_GRACE_SECONDS (a run whose finalize never wrote it)."""
        terminal_since: list[float] = []

        async def finished() -> bool:
            if (await self.storage.responses.get_control(response_id)).status not in TERMINAL_STATUSES:
                await self._nudge(response_id)  # no progress for a while: is its orchestration alive?
                return False
            if await self._run_over(response_id):
                return True
            await self._nudge(response_id)  # terminal status but no terminal event yet
            terminal_since[:] = terminal_since or [time.monotonic()]
            return time.monotonic() - terminal_since[0] > FINALIZE_GRACE_SECONDS

        return finished

    async def _response(self, response_id: str, record: ResponseRecord | None = None) -> dict[str, Any]:
        record = record or await self.storage.responses.get(response_id)
        output = await self.storage.items.list_output_items(response_id)
        return response_object(record, output)

    async def _stored(self, response_id: str) -> ResponseRecord:
        """The stored row, or 404 for unknown ids, hostile ids, deleted or ``store=false`` responses."""
        try:
            validate_id(response_id, prefix=RESPONSE_PREFIX)
            record = await self.storage.responses.get(response_id)
        except (InvalidId, NotFound):
            raise errors.not_found("Response", response_id) from None
        if not record.doc.get("store", True) or record.doc.get(DELETED_MARK):
            raise errors.not_found("Response", response_id)
        return record

    # ---------------------------------------------------------------- cancel
    async def cancel(self, response_id: str) -> HttpResult:
        """Cancel a background response; the answer (and every later read) carries its partial output.

        Why cancel waits: the run stops at its next delta and then checkpoints the partial item. Were
        ``cancelled`` written at once, readers would see it with that item missing for a moment. So a
        running response only gets its cancel flag here; the run itself sets ``cancelled`` right after
        its checkpoint (``Engine.settle_cancel``), and this waits for that, bounded by
        ``cancel_settle_seconds``. A run that does not react in time (its worker is gone, storage is
        failing) is cancelled here; its partial item, if any, then follows when the run resumes. A turn
        that has not started (``queued``) has no output to wait for and is cancelled at once."""
        record = await self._stored(response_id)
        if not record.doc.get("background", False):
            raise errors.invalid_request("Only responses created with background=true can be cancelled.",
                                         code=errors.CODE_BACKGROUND_REQUIRED, param="response_id")
        if record.status == "cancelled":
            return HttpResult(200, await self._response(response_id, record))
        if record.status in TERMINAL_STATUSES:
            raise errors.conflict(errors.CODE_ALREADY_FINISHED,
                                  f"Cannot cancel a response that is already {record.status}.", param="response_id")
        try:
            flagged = await self._raise_cancel_flag(response_id)
        except InvalidTransition as lost:
            if lost.current_status == "cancelled":
                return HttpResult(200, await self._response(response_id))
            raise errors.conflict(errors.CODE_ALREADY_FINISHED,
                                  f"Cannot cancel a response that is already {lost.current_status}.",
                                  param="response_id") from None
        try:  # wakes a queued turn that waits for its chain lock; a running phase sees the flag itself
            await self.runtime.raise_event(response_id, orch.CANCEL_EVENT, {"cancel": True})
        except Exception:
            log.warning("cancel event not delivered (the flag still stops the run)", extra={"response_id": response_id})
        if flagged.status == "cancelled" and flagged.doc.get("chain_id"):  # it was queued: S4
            await self._steer(await self._turns_ahead(str(flagged.doc["chain_id"]), response_id), -1)
        final = flagged if flagged.status == "cancelled" else await self._await_settled_cancel(response_id)
        if final.status != "cancelled":
            raise errors.conflict(errors.CODE_ALREADY_FINISHED,
                                  f"Cannot cancel a response that is already {final.status}.", param="response_id")
        log.info("cancelled", extra={"response_id": response_id})
        return HttpResult(200, await self._response(response_id, final))

    async def _raise_cancel_flag(self, response_id: str) -> ResponseRecord:
        """One CAS on the row: a ``queued`` turn (nothing planned, no phase can start without reading the
        flag) becomes ``cancelled`` at once; a running one only gets ``cancel_requested``. Raises
        InvalidTransition when the response is already terminal."""
        responses = self.storage.responses
        for _ in range(CHAIN_CAS_ATTEMPTS):
            record = await responses.get(response_id)
            if record.status not in ACTIVE_STATUSES:
                raise InvalidTransition(record.status, "cancelled")
            try:
                if record.status == "queued":
                    return await responses.replace(record, status="cancelled", cancel_requested=True,
                                                   doc_changes={"completed_at": int(time.time())})
                return await responses.replace(record, cancel_requested=True)
            except PreconditionFailed:
                continue  # the run (or a steering turn) wrote the row meanwhile: look again
        raise errors.service_unavailable()

    async def _await_settled_cancel(self, response_id: str) -> ResponseRecord:
        """Wait until the run has stopped and set the terminal status; past the bound, set it here."""
        deadline = time.monotonic() + self.cancel_settle_seconds
        while time.monotonic() < deadline:
            if (await self.storage.responses.get_control(response_id)).status in TERMINAL_STATUSES:
                return await self.storage.responses.get(response_id)
            await asyncio.sleep(CANCEL_POLL_SECONDS)
        log.warning("cancel: the run did not stop in time; status set without waiting for it",
                    extra={"response_id": response_id, "waited_s": self.cancel_settle_seconds})
        try:
            return await self.storage.responses.transition(
                response_id, "cancelled", allowed_from=ACTIVE_STATUSES, cancel_requested=True,
                doc_changes={"completed_at": int(time.time())})
        except InvalidTransition:
            return await self.storage.responses.get(response_id)  # the run settled just now

    async def _turns_ahead(self, chain_id: str, response_id: str) -> list[str]:
        chain = await self.storage.chains.get(chain_id)
        turns = list(chain.open_turns)
        ahead = turns[: turns.index(response_id)] if response_id in turns else []
        return [turn for turn in ahead if await self._active(turn)]

    # ---------------------------------------------------------------- delete
    async def delete(self, response_id: str) -> HttpResult:
        """Delete a finished response. Exactly one of several concurrent DELETEs answers 200; the others,
        and every later one, answer 404 (as the OpenAI API does).

        The winner is decided by an ETag compare-and-swap that marks the row deleted (from then on it is
        404 everywhere); only then are the items, the log and the row removed. A crash halfway leaves a
        marked, finished row, which the retention clean-up removes with everything else later."""
        for _ in range(CHAIN_CAS_ATTEMPTS):
            record = await self._stored(response_id)  # 404 once another DELETE has marked it
            if record.status in ACTIVE_STATUSES or not await self._run_over_soon(response_id):
                raise errors.conflict(
                    errors.CODE_STILL_RUNNING,
                    "Cannot delete a response that is still running; cancel it first (a cancelled response can "
                    "be deleted once its run has stopped, usually within a second).", param="response_id")
            try:
                await self.storage.responses.replace(record, doc_changes={DELETED_MARK: True})
                break
            except PreconditionFailed:
                continue  # the row changed since it was read (maybe another DELETE won): look again
        else:
            raise errors.service_unavailable()
        await self.storage.items.delete_all(response_id)
        await self.storage.events.delete(response_id)
        await self.storage.responses.delete(response_id)
        log.info("deleted", extra={"response_id": response_id})
        return HttpResult(200, {"id": response_id, "object": "response.deleted", "deleted": True})

    async def _run_over_soon(self, response_id: str) -> bool:
        """``_run_over``, waiting up to RUN_OVER_WAIT_SECONDS: a terminal status comes a moment before the
        terminal event (finalize's CAS, then its append; a cancel, then the run's next delta), and a client
        that saw ``completed`` or just cancelled should not get a 409 for that moment."""
        deadline = time.monotonic() + RUN_OVER_WAIT_SECONDS
        while not await self._run_over(response_id):
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    async def _run_over(self, response_id: str) -> bool:
        """Whether the run has written its terminal event. A cancel sets the terminal status at once, but
        the run stops only at its next delta and then still writes its partial item and the terminal
        event (so does finalize, just after its status CAS): deleting before that races those writes and
        leaves a half-deleted response (orphan item rows, failed activities)."""
        try:
            writer = await self.storage.events.open_writer(response_id)
        except NotFound:
            return True  # no log at all: nothing appends to it any more
        return (writer.last_event or {}).get("type") in ev.TERMINAL_EVENT_TYPES

    # ----------------------------------------------------------- input items
    async def input_items(self, response_id: str, query: Mapping[str, str]) -> HttpResult:
        limit = 20 if "limit" not in query else parse_int(query["limit"], param="limit", minimum=1, maximum=100)
        order = query.get("order", "desc")
        if order not in ("asc", "desc"):
            raise errors.invalid_request("'order' must be 'asc' or 'desc'.", param="order",
                                         code=errors.CODE_INVALID_VALUE)
        after = query.get("after")
        if after is not None and not _safe(after):
            raise errors.invalid_request("'after' is not a valid item id.", param="after",
                                         code=errors.CODE_INVALID_VALUE)
        await self._stored(response_id)
        try:
            page = await self.storage.items.list_input_items(response_id, after=after, limit=limit,
                                                             order="asc" if order == "asc" else "desc")
        except NotFound:  # a well-formed cursor naming nothing: 404, like an unknown response id
            raise errors.ApiError(404, errors.INVALID_REQUEST,
                                  f"No input item with id {errors.echo(after)} in this response.",
                                  param="after", code=errors.CODE_NOT_FOUND) from None
        data = page.data
        return HttpResult(200, {
            "object": "list",
            "data": data,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
            "has_more": page.has_more,
        })


def _consume_outcome(task: asyncio.Future[ReadResult]) -> None:
    if not task.cancelled():
        task.exception()


def _safe(value: str) -> bool:
    try:
        validate_id(value)
        return True
    except InvalidId:
        return False


MAX_SEQUENCE_NUMBER = 2**53  # the largest integer every JSON client reads exactly


def _optional_bool(query: Mapping[str, str], name: str) -> bool:
    return name in query and parse_bool(query[name], param=name)


def _load_factor_here() -> float:
    """The process's load factor (see :func:`~resilient.engine.batching.load_factor`): how much a reader's
    storage paces stretch (all but the shortest, see :func:`~resilient.http.streaming.tail_events`)."""
    return load_factor(COMMITTED)


def _remembered(response_id: str, starting_after: int) -> CommittedBlock | None:
    """A reconnect's first events from this process's memory of the log (a true prefix of the stored log,
    see ``resilient/storage/recent.py``), when that prefix is the whole log (it ends with the terminal
    event) or the run is being written here (the rest then arrives through the feed). Otherwise None: the
    first events are read from storage. The response's row is checked either way."""
    block = COMMITTED.recent(response_id, starting_after)
    if block is None or not block.events:
        return None
    if block.events[-1].type in ev.TERMINAL_EVENT_TYPES:
        return block
    if COMMITTED.writing_here(response_id) or COMMITTED.expected_here(response_id):
        return block
    return None


def _starting_after(query: Mapping[str, str], headers: Mapping[str, str]) -> int:
    """``starting_after``, else the SSE reconnect header ``Last-Event-ID``, else -1 (from the start).

    Both are validated whenever present (the query wins), so a bad header is a 400 naming the header
    even next to a good query value."""
    found = -1
    header = headers.get("last-event-id")
    if header is not None:
        found = parse_int(header, param="Last-Event-ID", minimum=-1, maximum=MAX_SEQUENCE_NUMBER)
    if "starting_after" in query:
        found = parse_int(query["starting_after"], param="starting_after", minimum=-1, maximum=MAX_SEQUENCE_NUMBER)
    return found


async def guarded(call: Any) -> HttpResult:
    """Run a handler and map every failure to the OpenAI error shape (never a 500 for client input)."""
    try:
        result: HttpResult = await call
        return result
    except ApiError as exc:
        return error_result(exc)
    except StorageUnavailable:
        return error_result(errors.service_unavailable())
    except NotFound:
        return error_result(errors.ApiError(404, errors.INVALID_REQUEST, "Not found.", code=errors.CODE_NOT_FOUND))
    except TimeoutError:
        return error_result(errors.service_unavailable())
    except Exception:
        log.exception("unhandled error")
        return error_result(errors.ApiError(500, errors.SERVER_ERROR, "The server had an error processing the "
                                            "request.", code=errors.CODE_SERVER_ERROR, retryable=True))
