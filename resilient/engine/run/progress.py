"""Writing a step's progress (:class:`~resilient.agents.base.SaveProgress`) into its response row.

A step that keeps progress keeps it often (a hosted agent: the model's decision, then each tool's result),
and nothing else writes the row's document while the step runs. So each write is one compare-and-swap
with the ETag the previous one returned (first: the row as the attempt read it), and the row is read
again only when the swap is lost (a cancel or a steering turn changed the row meanwhile).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from resilient.engine.run import steps
from resilient.storage.cas import ROW_CAS_ATTEMPTS, retry_cas
from resilient.storage.errors import PreconditionFailed
from resilient.storage.ports import ResponseRecord

if TYPE_CHECKING:
    from resilient.storage.factory import Storage


class ProgressWriter:
    """Keeps step ``step``'s progress in its row (``steps.PROGRESS_KEY``); call it with the value."""

    def __init__(self, storage: Storage, record: ResponseRecord, step: int) -> None:
        self._storage = storage
        self._response_id = record.response_id
        self._known: ResponseRecord | None = record
        self._step = step

    async def __call__(self, value: Any) -> None:
        changes = steps.progress_record(self._step, value)

        async def attempt() -> None:
            known = self._known or await self._storage.responses.get(self._response_id)
            try:
                self._known = await self._storage.responses.replace(known, doc_changes=changes)
            except PreconditionFailed:
                self._known = None  # read the row again
                raise

        await retry_cas(attempt, ROW_CAS_ATTEMPTS,
                        lambda: PreconditionFailed(f"could not keep the progress of {self._response_id}"))
