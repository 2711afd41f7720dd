"""The read–compare-and-swap–retry loop every conditional write of a row or chain goes through."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from resilient.storage.errors import PreconditionFailed


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
