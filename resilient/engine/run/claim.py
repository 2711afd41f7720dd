"""Claiming a run's event log for one phase attempt: where the log ends (:func:`claim_log_end`: a crash to
recover from, or another attempt still writing), what the attempt appends before its first item, and the
fenced first append that claims the log (:class:`Claim`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from resilient.engine.chain.snapshot import response_object
from resilient.engine.run import recovery
from resilient.engine.run.liveness import Liveness, behind_live_writer
from resilient.engine.run.phase_items import PhaseItems
from resilient.protocol import events as ev
from resilient.storage.cas import LOG_END_ATTEMPTS
from resilient.storage.errors import LostOwnership
from resilient.storage.ports import EventWriter, JsonDict, ResponseRecord
from resilient.telemetry import metrics, spans

if TYPE_CHECKING:
    from resilient.storage.factory import Storage

log = logging.getLogger("resilient.engine")


class Superseded(Exception):
    """Another attempt of the same phase checkpointed it while this one waited for its first output."""

    def __init__(self, items: list[JsonDict]) -> None:
        super().__init__("phase already checkpointed")
        self.items = items


@dataclass(frozen=True)
class LogEnd:
    """The end of the log as this attempt takes it: the writer to append with, what to append before the
    first item (a recovery head, or nothing at a phase boundary), the first stream index this attempt may
    use, and whether the log shows a crash (it ends inside an item)."""

    writer: EventWriter
    head: list[JsonDict]
    first_index: int
    crashed: bool


async def claim_log_end(storage: Storage, liveness: Liveness, record: ResponseRecord, index: int,
                        writer: EventWriter | None, previous: list[JsonDict],
                        deadline: float | None) -> Claim | list[JsonDict]:
    """This attempt's claim on the end of the log, where phase ``index`` starts (``writer``: one kept by
    this process, else one is opened). Returns the checkpoints instead when another attempt, still
    writing, finishes the phase.

    The log does not end where the checkpoints say this phase starts (inside an item, or after an item
    that has no checkpoint yet): is its writer dead, or another delivery of this phase? (A live attempt
    checkpoints right after its item's closing events; a duplicate delivery that read the checkpoints a
    moment before that sees none and would otherwise stream the phase again.)"""
    writer = writer or await storage.events.open_writer(record.response_id)
    end = LogEnd(writer, *await head(storage, record, writer, previous))
    if end.head:
        found = await behind_live_writer(storage.events, storage.items, record.response_id, index, writer,
                                         liveness, deadline)
        if isinstance(found, list):
            return found  # the live attempt finished the phase
        if found is not writer:  # it went quiet: take over from where it stopped
            end = LogEnd(found, *await head(storage, record, found, previous))
    return Claim(storage, liveness, record, index, end, previous, deadline)


async def head(storage: Storage, record: ResponseRecord, writer: EventWriter,
               previous: list[JsonDict]) -> tuple[list[JsonDict], int, bool]:
    """What this attempt must append before its first item, the first stream index it may use, and
    whether the log shows a crash (it ends inside an item, not after a closed one)."""
    last = writer.last_event
    if recovery.boundary(last, previous):
        return [], recovery.next_index_at_boundary(last), False
    tail = await recovery.scan_tail(storage.events, record.response_id, writer.next_sequence_number)
    reset = ev.response_in_progress(response_object(record, previous, status="in_progress"))
    crashed = (last or {}).get("type") != ev.OUTPUT_ITEM_DONE
    return [*tail.closing, reset], tail.last_index + 1, crashed


class Claim:
    """This attempt's writer. Its first append carries the recovery head and so claims the log.

    Losing the first append means another writer appended since we looked (a zombie, or another
    delivery of this phase): look again. The phase may be checkpointed already (then this attempt is
    superseded); otherwise build a new head and move this attempt's stream indexes past the ones the
    other writer used. Once an append lands, a later loss means this attempt is the zombie: it raises.
    """

    def __init__(self, storage: Storage, liveness: Liveness, record: ResponseRecord, index: int, end: LogEnd,
                 previous: list[JsonDict], deadline: float | None = None) -> None:
        self.crashed = end.crashed  # the log showed a crash: an earlier attempt died inside an item
        self.recovering = bool(end.head)  # the first append carries a recovery head: the phase runs again
        self.items: PhaseItems | None = None  # the attempt's items, moved along when the log grew (see append)
        self._storage = storage
        self._liveness = liveness
        self._deadline = deadline
        self._record = record
        self._index = index
        self._writer = end.writer
        self._head = end.head
        self._first_index = end.first_index
        self._previous = previous
        self.appended = False
        self._first_writer = end.writer
        self._calls_before = end.writer.storage_calls  # a kept writer carries earlier phases' calls

    @property
    def first_index(self) -> int:
        """The first stream index this attempt may use."""
        return self._first_index

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
        storage = self._storage
        rid = self._record.response_id
        batch = list(events)
        for _ in range(LOG_END_ATTEMPTS):
            try:
                last = await self._writer.append([*self._head, *batch])
                self.appended = True
                if self._head:  # the reset is in the log: this attempt repeats the phase
                    log.warning("recovering phase", extra={"response_id": rid, "phase": self._index})
                    spans.set_current(**{"phase.is_recovery": True})
                    metrics.RECOVERIES.add(1)
                return last
            except LostOwnership:
                checkpoints = await storage.items.list_output_items(rid)
                if len(checkpoints) > self._index:
                    raise Superseded(checkpoints[self._index:]) from None
                # somebody appended since we looked, most likely another delivery of this phase that
                # is streaming now: let it finish rather than take the log from it
                found = await behind_live_writer(storage.events, storage.items, rid, self._index,
                                                 await storage.events.open_writer(rid), self._liveness,
                                                 self._deadline)
                if isinstance(found, list):
                    raise Superseded(found[self._index:]) from None
                self._writer = found
                self._head, first, _ = await head(storage, self._record, self._writer, self._previous)
                shift = first - self._first_index
                self._first_index = first
                if self.items is not None:
                    self.items.shift(shift)
                batch = [shifted(event, shift) for event in batch]
                await asyncio.sleep(0.01)
        raise LostOwnership(f"could not claim the event log of {rid} for phase {self._index}")


def shifted(event: JsonDict, by: int) -> JsonDict:
    index = event.get("output_index")
    return {**event, "output_index": index + by} if isinstance(index, int) and by else event
