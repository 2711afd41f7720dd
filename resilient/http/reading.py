"""The read side of the Responses API: retrieving a response, following its log live, and answering a
synchronous request once its run is over.

Why reads nudge the repair path: a read of an unfinished response (``GET``, or a stream that sees no
progress) asks it to check the run's orchestration, throttled per response; a run whose orchestration died
resumes. Streams end cleanly before the host's ``functionTimeout`` (``Settings.stream_limit_seconds``): a
timeout would restart the worker and kill every run in it; the client reconnects with ``starting_after``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from resilient.engine.chain import lifecycle
from resilient.engine.chain.snapshot import response_object
from resilient.engine.heal import unstored
from resilient.engine.heal.repair import DurableControl, Repairer
from resilient.engine.orchestration import terms as terms
from resilient.engine.worker_state import WorkerState
from resilient.http.paces import WAITED_FOR
from resilient.http.results import HttpResult, translated
from resilient.http.streaming import tail_events
from resilient.ids import RESPONSE_PREFIX, InvalidId, validate_id
from resilient.protocol import errors
from resilient.protocol.params import parse_bool, parse_int
from resilient.settings import Settings
from resilient.storage.logend import log_ended
from resilient.storage.ports import ACTIVE_STATUSES, TERMINAL_STATUSES, CommittedBlock, ReadResult, ResponseRecord

if TYPE_CHECKING:
    from resilient.storage.factory import Storage

log = logging.getLogger("resilient.http")

FINALIZE_GRACE_SECONDS = 120.0  # > the orchestrator's finalize retries (2+4+8+16+32 s)
MAX_SEQUENCE_NUMBER = 2**53  # the largest integer every JSON client reads exactly


class DurableRuntime(DurableControl, Protocol):
    """What the app needs from Durable Functions: start (also over a terminal instance), status and entity
    signals (for the repair path, :class:`~resilient.engine.heal.repair.DurableControl`), and raising events
    (cancel). The endpoints themselves only start and raise events."""

    async def raise_event(self, instance_id: str, name: str, data: Any) -> None: ...


# An SSE comment (clients ignore it) on a stream ended by the time limit, for people reading the raw stream.
# One newline only, like the keep-alive: a blank line after it would dispatch an empty event, because a client
# keeps the last event id (SSE spec), and the ``openai`` client then fails to parse its empty data.
STREAM_LIMIT_NOTE = b": stream time limit reached; reconnect with starting_after=<last sequence_number>\n"
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no", "Content-Type": "text/event-stream"}


class ResponseReader:
    """The read endpoint (``GET /responses/{id}``, with or without ``stream``) and the reads the write endpoints
    answer with: a stored row or 404, a response object, a create's live stream, a synchronous create's answer.
    The service holds one (built per request with it, around the request's Durable client)."""

    def __init__(self, storage: Storage, runtime: DurableRuntime, settings: Settings, *,
                 repairer: Repairer | None = None, worker: WorkerState | None = None) -> None:
        self.storage = storage
        self.runtime = runtime
        self.settings = settings
        self.repairer = repairer  # on-demand repair of runs whose orchestration died (None: off)
        self.worker = worker if worker is not None else WorkerState.sharing(storage)  # what this process knows

    async def wait_for_terminal(self, record: ResponseRecord, created: CommittedBlock | None) -> dict[str, Any]:
        """A synchronous (non-background, non-stream) request: follow the log to its terminal event, but
        answer with the response as it is before the host's functionTimeout would restart the worker.

        For ``store=false`` the end of this request, however it ends, lets the run forget: an answer cut
        short by the time limit is "abandoned" (the run is stopped: nobody can read the rest)."""
        limit = self.settings.stream_limit_seconds
        delivered = False
        try:
            try:
                async with asyncio.timeout(limit):
                    async for _ in tail_events(self.storage.events, record.response_id, -1, paces=WAITED_FOR,
                                               finished=self._finished_probe(record.response_id), start=created,
                                               widen=self.worker.load_factor, feed=self.worker.feed):
                        pass
            except TimeoutError:
                log.warning("synchronous request reached the time limit", extra={"response_id": record.response_id})
                return await self.response(record.response_id)
            final = await self.response(record.response_id)
            delivered = True
            return final
        finally:
            if not record.doc.get("store", True):
                self._client_done(record.response_id, delivered)

    def stream_created(self, record: ResponseRecord, created: CommittedBlock | None) -> HttpResult:
        """The answer of ``POST /responses`` with ``stream=true``: its log from the start, live, starting from
        ``created`` (the block the create committed) instead of a storage read."""
        return HttpResult(200, stream=self._limited(self._stream_then_forget(record, -1, created)),
                          headers=dict(SSE_HEADERS))

    async def _stream_then_forget(self, record: ResponseRecord, starting_after: int,
                                  start: CommittedBlock | None) -> AsyncIterator[bytes]:
        """The live stream of ``POST /responses``. For ``store=false`` the end of this generator, however
        it ends (terminal event sent, client gone, time limit, worker shutting down), lets the run forget."""
        delivered = False
        try:
            async for frame in tail_events(self.storage.events, record.response_id, starting_after,
                                           finished=self._finished_probe(record.response_id), start=start,
                                           widen=self.worker.load_factor, feed=self.worker.feed):
                yield frame
            delivered = True
        finally:
            if not record.doc.get("store", True):
                self._client_done(record.response_id, delivered)

    def _client_done(self, response_id: str, delivered: bool) -> None:
        """``store=false``: tell the run its client is done with it (it then deletes everything, see
        ``resilient/engine/heal/unstored.py``); a client that left early also stops the run. Detached: a
        stream whose client left is being cancelled and cannot await anything."""

        async def report() -> None:
            if not delivered:
                log.info("store=false client gone before the end", extra={"response_id": response_id})
                await unstored.abandon(self.storage, response_id)
            try:
                await self.runtime.raise_event(response_id, terms.CLIENT_DONE_EVENT, {"delivered": delivered})
            except Exception:  # the run already forgot it after its grace period: nothing left to tell
                log.info("client_done not delivered", extra={"response_id": response_id})

        self.worker.detached.start(report(), "client_done")

    # -------------------------------------------------------------- retrieve
    async def retrieve(self, response_id: str, query: Mapping[str, str], headers: Mapping[str, str]) -> HttpResult:
        stream = _optional_bool(query, "stream")
        _optional_bool(query, "include_obfuscation")  # accepted and ignored, but only as a boolean
        if not stream:
            starting_after = _starting_after(query, headers)
            record = await self.stored(response_id)
            if record.status in ACTIVE_STATUSES:
                await self._nudge(response_id)
            return HttpResult(200, await self.response(response_id, record))
        # A reconnect: read the log while the row is checked (one round trip instead of two before the first
        # event). Nothing read is sent unless the checks pass; they are made in the order a plain read makes them.
        starting_after = _starting_after(query, headers)
        start = self.worker.remembered_log(response_id, starting_after)
        first_read = None if start is not None else self._early_read(response_id, starting_after)
        try:
            record = await self.stored(response_id)
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
                                                                widen=self.worker.load_factor, feed=self.worker.feed)),
                          headers=dict(SSE_HEADERS))

    def _early_read(self, response_id: str, starting_after: int) -> asyncio.Future[ReadResult] | None:
        """Start reading the log for a well-formed reconnect (no storage call for a malformed id)."""
        try:
            validate_id(response_id, prefix=RESPONSE_PREFIX)
        except InvalidId:
            return None
        task = asyncio.ensure_future(self.storage.events.read_first(response_id, starting_after))
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
        if self.repairer is None or self.worker.run_here(response_id):
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
            if await log_ended(self.storage.events, response_id):
                return True
            await self._nudge(response_id)  # terminal status but no terminal event yet
            terminal_since[:] = terminal_since or [time.monotonic()]
            return time.monotonic() - terminal_since[0] > FINALIZE_GRACE_SECONDS

        return finished

    async def response(self, response_id: str, record: ResponseRecord | None = None) -> dict[str, Any]:
        """The response object as the API returns it (``record``: its row, when the caller has it)."""
        record = record or await self.storage.responses.get(response_id)
        output = await self.storage.items.list_output_items(response_id)
        return response_object(record, output)

    async def stored(self, response_id: str) -> ResponseRecord:
        """The stored row, or 404 for unknown ids, hostile ids, deleted or ``store=false`` responses."""
        with translated(response_id):
            return await lifecycle.stored(self.storage, response_id)

def _consume_outcome(task: asyncio.Future[ReadResult]) -> None:
    if not task.cancelled():
        task.exception()


def _optional_bool(query: Mapping[str, str], name: str) -> bool:
    return name in query and parse_bool(query[name], param=name)


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


