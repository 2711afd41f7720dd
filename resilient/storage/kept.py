"""The event-log writers this process keeps between the activities of a run (see ``EventLog.take_writer``)."""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the blob SDK loads with storage, not with the engine that holds this
    from resilient.storage.eventwriter import BlobEventWriter

KEPT_WRITERS = 1024


class KeptWriters:
    """Live writers by response id, newest kept (bounded). A kept writer may be stale: its fenced append
    then fails without writing and the caller opens a fresh one."""

    def __init__(self, capacity: int = KEPT_WRITERS) -> None:
        self._capacity = capacity
        self._kept: OrderedDict[str, BlobEventWriter] = OrderedDict()

    def take(self, response_id: str) -> BlobEventWriter | None:
        writer = self._kept.pop(response_id, None)
        return None if writer is None or writer.dead else writer

    def keep(self, writer: BlobEventWriter) -> None:
        self._kept[writer.response_id] = writer
        self._kept.move_to_end(writer.response_id)
        while len(self._kept) > self._capacity:
            self._kept.popitem(last=False)

    def drop(self, response_id: str) -> None:
        self._kept.pop(response_id, None)
