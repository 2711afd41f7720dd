"""Endpoint logic for the Responses API, independent of the Functions host: the write endpoints here, the
read side in :mod:`resilient.http.reading`, results and error mapping in :mod:`resilient.http.results`.

Every handler returns an :class:`HttpResult` (status, headers, JSON body or a byte stream); the bindings
in ``resilient/functions/http.py`` turn it into a FastAPI response. The durable side is reached through
the tiny :class:`DurableRuntime` port, so the same logic runs under ``func start``, the host double and
unit tests. The rules themselves (a turn's place on its chain, cancel, delete) are the engine's
(:mod:`resilient.engine.chain.turns`, :mod:`resilient.engine.chain.lifecycle`); this layer translates requests and
their answers.

Ordering rules that make crashes harmless:
* create: input items, response row, event log (``response.created``) and the entry in the index of
  unfinished runs are written together, then the orchestration starts. A crash before the start leaves a
  ``queued`` row without an orchestration; the client got no 2xx, so it retries and gets a new response
  (ids are never reused), and the repair path starts the orphan after its grace period, so it never stays
  ``queued`` (see :mod:`resilient.engine.heal.repair`).
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
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from resilient.engine.chain import conversations, lifecycle, references, turns
from resilient.engine.chain.continuation import (
    HISTORY_IN_INPUT_KEY,
    Continuation,
    answered_already,
    answered_turn,
    check_continuation,
)
from resilient.engine.chain.lifecycle import CANCEL_SETTLE_SECONDS
from resilient.engine.chain.refusals import Refused
from resilient.engine.chain.snapshot import response_object
from resilient.engine.heal.repair import Repairer
from resilient.engine.orchestration import terms as terms
from resilient.engine.worker_state import WorkerState
from resilient.http.reading import (
    STREAM_LIMIT_NOTE,
    DurableRuntime,
    ResponseReader,
)
from resilient.http.results import HttpResult, error_result, guarded, translated
from resilient.ids import InvalidId, new_input_item_id, new_message_id, new_response_id, validate_id
from resilient.protocol import errors
from resilient.protocol import events as ev
from resilient.protocol.items import text_of
from resilient.protocol.params import parse_int
from resilient.settings import Settings
from resilient.storage.errors import NotFound
from resilient.storage.ports import EventWriter, ResponseRecord
from resilient.telemetry import spans

if TYPE_CHECKING:
    from resilient.protocol.request import CreateResponseRequest
    from resilient.storage.factory import Storage

log = logging.getLogger("resilient.http")

__all__ = [
    "STREAM_LIMIT_NOTE",
    "DurableRuntime",
    "HttpResult",
    "ResponsesService",
    "error_result",
    "guarded",
]

MAX_BODY_BYTES = 2 * 1024 * 1024


CreatedHook = Callable[[ResponseRecord, list[dict[str, Any]]], None]


class ResponsesService:
    """The Responses API: create, cancel, delete and input items here; retrieve, the streams and the reads these
    answer with are its :class:`ResponseReader`'s (``reader``)."""

    cancel_settle_seconds: float = CANCEL_SETTLE_SECONDS  # how long a cancel waits for the run to stop

    def __init__(self, storage: Storage, runtime: DurableRuntime, settings: Settings, *,
                 repairer: Repairer | None = None, on_created: CreatedHook | None = None,
                 worker: WorkerState | None = None) -> None:
        self.reader = ResponseReader(storage, runtime, settings, repairer=repairer, worker=worker)
        self.storage = storage
        self.runtime = runtime
        self.settings = settings
        self.worker = self.reader.worker  # one view of this process's runs for reads and writes
        self._on_created = on_created  # the engine of this process remembers what it need not read back

    # -------------------------------------------------------------- retrieve
    async def retrieve(self, response_id: str, query: Mapping[str, str], headers: Mapping[str, str]) -> HttpResult:
        """``GET /responses/{id}`` (a reconnect with ``stream=true``): see :meth:`ResponseReader.retrieve`."""
        return await self.reader.retrieve(response_id, query, headers)

    # ---------------------------------------------------------------- create
    async def create(self, body: bytes) -> HttpResult:
        """``POST /responses``: validate, place the turn on its chain, write its draft, start its run, answer."""
        if len(body) > MAX_BODY_BYTES:
            raise errors.payload_too_large(MAX_BODY_BYTES)
        # The request models (pydantic, ~40 ms to build) load with the first create, not when a new worker
        # indexes the app: a worker that only runs phases or serves reads never needs them.
        from resilient.protocol.request import normalize_input_items, parse_create_request

        request = parse_create_request(body)
        chain_id, previous = await self._resolve_chain(request)
        continuation = await self._continuation(request, chain_id, previous)
        response_id = new_response_id()
        chain_id, previous_turn, turns_ahead = await self._place_turn(request, response_id, chain_id, previous)
        items = normalize_input_items(request, lambda: new_message_id(response_id),
                                      lambda kind: new_input_item_id(kind, response_id))
        items = references.in_place(items, continuation.referenced)  # the items they name, stored in place
        doc = self._draft_doc(request, items, previous, chain_id, previous_turn)
        if turns_ahead:
            doc[turns.STEERING_KEY] = True  # queued behind a running turn that it asks to finish early
        if continuation.resume is not None:
            doc["resume"] = continuation.resume
        owns_lock = chain_id == response_id  # a stored root turn: its chain's lock is its own from the start
        record, writer = await self._write_draft(response_id, doc, items,
                                                 opens_in_progress=chain_id is None or owns_lock)
        created = writer.last_committed  # a stream of this create starts from it, not from a storage read
        if self._on_created is not None:
            self._on_created(record, items)
        await self._start_run(response_id, _run_input(response_id, chain_id, doc, owns_lock, turns_ahead))
        await turns.steer(self.storage, turns_ahead, +1)
        if not turns_ahead:  # its first activity comes next, probably here; a queued turn waits for its lock
            self.worker.expect_next_activity(response_id)
        log.info("created", extra={"response_id": response_id, "chain_id": chain_id,
                                   "background": request.background, "stream": request.stream})
        if request.stream:
            return self.reader.stream_created(record, created)
        if request.background:
            return HttpResult(200, response_object(record, []))
        return HttpResult(200, await self.reader.wait_for_terminal(record, created))

    async def _place_turn(self, request: CreateResponseRequest, response_id: str, chain_id: str | None,
                          previous: str | None) -> tuple[str | None, str | None, list[str]]:
        """The turn's chain, the turn before it and the turns still running ahead of it (registered on the
        chain row). A ``store=false`` turn must leave nothing behind, so it does not join its chain: it reads
        the chain's history as it stands and neither queues, steers nor appears in the chain row. A stored
        root turn is its own chain: later turns queue behind it."""
        if not request.store:
            previous_turn = previous
            if previous_turn is None and chain_id is not None:  # a conversation: after its newest turn
                previous_turn = (await self.storage.chains.get(chain_id)).latest_response_id
            return None, previous_turn, []
        if chain_id is None:
            return response_id, None, []
        with translated(response_id):
            try:
                turns_ahead, previous_turn = await turns.register_turn(
                    self.storage, chain_id, response_id, previous,
                    is_conversation=request.conversation is not None, steerable=self.settings.steerable_conversations)
            except Refused as refused:  # an approval answer that lost the race to another answer of its request
                if refused.code == errors.CODE_FORK_NOT_SUPPORTED and _names_no_turn(request):
                    raise answered_already(request) from None
                raise
        return chain_id, previous_turn, turns_ahead

    def _draft_doc(self, request: CreateResponseRequest, items: list[dict[str, Any]], previous: str | None,
                   chain_id: str | None, previous_turn: str | None) -> dict[str, Any]:
        """The response row's document as the create writes it."""
        doc: dict[str, Any] = {
            "created_at": int(time.time()),
            "model": request.model,
            "instructions": request.instructions,
            "background": request.background,
            "stream": request.stream,
            "store": request.store,
            "metadata": request.metadata or {},
            "previous_response_id": previous if request.previous_response_id else None,  # as the client sent it
            "conversation_id": request.conversation,
            "chain_id": chain_id,
            "previous_turn": previous_turn,
            "input_chars": sum(len(text_of(i)) for i in items),
            "tools": [tool.to_json() for tool in request.tools],
            "tool_choice": request.tool_choice,
            **request.model_params(),  # by OpenAI name: the agent reads them from here
        }
        if not request.store:
            doc[terms.FORGET_AFTER_KEY] = self.settings.unstored_grace_seconds
        if previous is not None and _names_no_turn(request):  # an approval answer that resent its history
            doc[HISTORY_IN_INPUT_KEY] = True
        return doc

    async def _write_draft(self, response_id: str, doc: dict[str, Any], items: list[dict[str, Any]], *,
                           opens_in_progress: bool) -> tuple[ResponseRecord, EventWriter]:
        """The turn's input items, row, event log and repair-index entry, written together. Independent
        writes: nothing runs the response until its orchestration starts, so their order does not matter
        for crashes (a crash here leaves an unstarted, invisible draft). A turn with no lock to wait for (a
        root turn owns its chain's, ``store=false`` takes none) opens its log with ``response.in_progress``
        too, and its plan appends nothing (one append fewer per run; a queued turn gets it once its lock is
        granted)."""
        draft = ResponseRecord(response_id, "queued", doc, etag="")
        opening = [ev.response_created(response_object(draft, []))]
        if opens_in_progress:
            opening.append(ev.response_in_progress(response_object(draft, [], status="in_progress")))
        _, record, writer, _ = await asyncio.gather(
            self.storage.items.put_input_items(response_id, items),
            self.storage.responses.create(response_id, "queued", doc),
            self.storage.events.create(response_id, opening),
            self.storage.active.add(response_id, doc["created_at"]),  # watched by the repair path until final
        )
        self.storage.events.keep_writer(writer)  # the run's first activity, if it runs here, appends with it
        return record, writer

    async def _start_run(self, response_id: str, run_input: dict[str, Any]) -> None:
        """Start the turn's orchestration; a draft whose run cannot start is failed, and the client gets 503."""
        spans.describe_run(run_input, response_id, run_input["chain_id"])  # the run joins this request's trace
        try:
            await self.runtime.start(response_id, run_input)
        except Exception:
            log.exception("could not start the orchestration", extra={"response_id": response_id})
            await lifecycle.fail_unstarted(self.storage, response_id)
            raise errors.service_unavailable() from None

    async def _resolve_chain(self, request: CreateResponseRequest) -> tuple[str | None, str | None]:
        """A chain is named by ``conversation``, by following ``previous_response_id`` to its root, or by
        the stored approval request an answer without either names (``continuation.answered_turn``)."""
        if request.conversation:  # it must exist (created with POST /conversations) and not be deleted
            try:
                await conversations.live(self.storage, request.conversation)
            except conversations.ConversationMissing:
                raise errors.ApiError(404, errors.INVALID_REQUEST, f"Conversation with id "
                                      f"{errors.echo(request.conversation)} not found.", param="conversation",
                                      code=errors.CODE_NOT_FOUND) from None
            return request.conversation, None
        if not request.previous_response_id:
            with translated(""):
                answered = await answered_turn(self.storage, request)
            return (answered.chain_id, answered.response_id) if answered is not None else (None, None)
        try:
            previous = await self.storage.responses.get(request.previous_response_id)
        except NotFound:
            previous = None
        if previous is None or not lifecycle.is_stored(previous.doc):
            raise errors.invalid_request(  # 400, as the OpenAI API answers (not 404: the route exists)
                f"Previous response with id {errors.echo(request.previous_response_id)} not found.",
                code=errors.CODE_PREVIOUS_RESPONSE_NOT_FOUND, param="previous_response_id")
        chain = previous.doc.get("chain_id") or previous.response_id
        return str(chain), previous.response_id

    async def _continuation(self, request: CreateResponseRequest, chain_id: str | None,
                            previous: str | None) -> Continuation:
        """Tool outputs, approval answers and item references must refer to the input or the chain's turns
        (checked before the turn is registered, so a 400 leaves no trace on the chain)."""
        refers = request.function_outputs() or request.approval_responses() or request.function_calls()
        if not refers and not request.item_references() and previous is None:
            return Continuation()
        if previous is None and request.conversation is not None and chain_id is not None:
            previous = (await self.storage.chains.get(chain_id)).latest_response_id
        reach = None if _names_no_turn(request) else chain_id  # an input that is its history: any stored item
        with translated(previous or ""):
            return await check_continuation(self.storage, request, previous, chain_id=reach)

    # ---------------------------------------------------------------- cancel
    async def cancel(self, response_id: str) -> HttpResult:
        """Cancel a background response; the answer (and every later read) carries its partial output.
        The rules (and why a cancel waits for the run to stop) are in :func:`resilient.engine.chain.lifecycle.cancel`;
        it waits at most ``cancel_settle_seconds``."""
        record = await self.reader.stored(response_id)

        async def wake() -> None:  # a queued turn waits for its chain lock; a running phase sees the flag
            try:
                await self.runtime.raise_event(response_id, terms.CANCEL_EVENT, {"cancel": True})
            except Exception:
                log.warning("cancel event not delivered (the flag still stops the run)",
                            extra={"response_id": response_id})

        with translated(response_id):
            final, cancelled_now = await lifecycle.cancel(self.storage, record, wake, self.cancel_settle_seconds)
        if cancelled_now:
            log.info("cancelled", extra={"response_id": response_id})
        return HttpResult(200, await self.reader.response(response_id, final))

    # ---------------------------------------------------------------- delete
    async def delete(self, response_id: str) -> HttpResult:
        """Delete a finished response. Exactly one of several concurrent DELETEs answers 200; the others,
        and every later one, answer 404 (as the OpenAI API does); see
        :func:`resilient.engine.chain.lifecycle.delete`."""
        with translated(response_id):
            await lifecycle.delete(self.storage, response_id)
        log.info("deleted", extra={"response_id": response_id})
        return HttpResult(200, {"id": response_id, "object": "response.deleted", "deleted": True})

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
        await self.reader.stored(response_id)
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


def _safe(value: str) -> bool:
    try:
        validate_id(value)
        return True
    except InvalidId:
        return False


def _names_no_turn(request: CreateResponseRequest) -> bool:
    """Neither ``previous_response_id`` nor ``conversation``: the input is the turn's whole history."""
    return request.previous_response_id is None and request.conversation is None


def _run_input(response_id: str, chain_id: str | None, doc: dict[str, Any], owns_lock: bool,
               turns_ahead: list[str]) -> dict[str, Any]:
    """The orchestration's input: the response, its chain, and what the run may skip waiting for."""
    run_input: dict[str, Any] = {"response_id": response_id, "chain_id": chain_id}
    if owns_lock:
        run_input[terms.OWNS_LOCK_KEY] = True
    elif chain_id is not None and not turns_ahead:
        run_input[terms.NOTHING_AHEAD_KEY] = True  # a holder it meets is a finished turn: inspect it at once
    if terms.FORGET_AFTER_KEY in doc:  # in the row too: a repaired execution must still delete itself at its end
        run_input[terms.FORGET_AFTER_KEY] = doc[terms.FORGET_AFTER_KEY]
    return run_input
