"""The read–compare-and-swap–retry loop every conditional write of a row or chain goes through, and the
response row's two retried writes built on it (the same for every adapter: each brings its ``get`` and its
``replace``, the compare-and-swap)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from resilient.storage.errors import InvalidTransition, PreconditionFailed
from resilient.storage.ports import JsonDict, ResponseRecord, ResponseStore

# One bound per kind of conditional write. A loop that loses this many times in a row is being starved:
# it surfaces that instead of spinning.
ROW_CAS_ATTEMPTS = 50  # a response row: status, document, control columns (ETag CAS)
CHAIN_CAS_ATTEMPTS = 20  # a chain row: the turns registered on it (ETag CAS)
LOG_END_ATTEMPTS = 20  # the end of a run's event log: an append fenced on the blob's append position


async def retry_cas[T](attempt: Callable[[], Awaitable[T]], attempts: int,
                       exhausted: Callable[[], BaseException]) -> T:
    """Run ``attempt`` (read, decide, write with the ETag read) until its write lands.

    Why a loop: a lost CAS only means the row changed since it was read (a cancel flag, a steering
    turn, a concurrent writer), so reading again and deciding anew is always correct. ``attempt`` may
    return without writing when the fresh read shows nothing is left to do. After ``attempts`` lost
    swaps, ``exhausted()`` is raised: contention that heavy is a failure to report, not to spin on.
    """
    for _ in range(attempts):
        try:
            return await attempt()
        except PreconditionFailed:
            continue
    raise exhausted()


async def transition_row(store: ResponseStore, rid: str, to_status: str, *, allowed_from: frozenset[str],
                         doc_changes: JsonDict | None, cancel_requested: bool | None,
                         current: ResponseRecord | None) -> ResponseRecord:
    """:meth:`~resilient.storage.ports.ResponseStore.transition` over ``store``'s ``get`` and ``replace``
    (``rid`` already validated)."""
    known = [current] if current is not None and current.response_id == rid else []

    async def attempt() -> ResponseRecord:
        record = known.pop() if known else await store.get(rid)
        if record.status not in allowed_from:
            raise InvalidTransition(record.status, to_status)
        return await store.replace(record, status=to_status, doc_changes=doc_changes,
                                   cancel_requested=cancel_requested)

    return await retry_cas(attempt, ROW_CAS_ATTEMPTS, lambda: PreconditionFailed(
        f"response {rid!r}: transition to {to_status!r} kept losing the CAS"))


async def add_pending_input(store: ResponseStore, rid: str, delta: int) -> ResponseRecord:
    """:meth:`~resilient.storage.ports.ResponseStore.add_pending_input` over ``store``'s ``get`` and
    ``replace`` (``rid`` already validated)."""

    async def attempt() -> ResponseRecord:
        record = await store.get(rid)
        return await store.replace(record, pending_input_count=record.pending_input_count + delta)

    return await retry_cas(attempt, ROW_CAS_ATTEMPTS, lambda: PreconditionFailed(
        f"response {rid!r}: pending input update kept losing the CAS"))
