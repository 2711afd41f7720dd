"""Retention: delete finished responses (row, items, event log, orchestration history) after a while.

Why a clean-up at all: event logs and items grow without bound otherwise, and Azure bills storage.
Why not sooner than the setting: reconnect/replay must keep working for a while after the terminal
event (rule R7: at least 10 minutes; the template keeps 7 days by default).
Order matters for crash safety: items and the log go first and the row last, so a clean-up that dies
halfway finds the same response again next time.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from resilient.storage.factory import Storage


log = logging.getLogger("resilient.retention")

MIN_RETENTION_MINUTES = 10


async def purge_expired(
    storage: Storage,
    *,
    retention_minutes: int,
    now_epoch_seconds: float,
    limit: int = 200,
    purge_history: Callable[[str], Awaitable[None]] | None = None,
) -> list[str]:
    """Delete up to ``limit`` responses that finished more than ``retention_minutes`` ago; return their ids."""
    minutes = max(MIN_RETENTION_MINUTES, retention_minutes)
    expired = await storage.responses.list_finished_before(now_epoch_seconds - minutes * 60, limit)
    for response_id in expired:
        await storage.items.delete_all(response_id)
        await storage.events.delete(response_id)
        if purge_history is not None:
            try:
                await purge_history(response_id)
            except Exception:  # history purge is best effort: the host purges its own history too
                log.warning("history purge failed", extra={"response_id": response_id})
        await storage.responses.delete(response_id)
    if expired:
        log.info("retention purge", extra={"purged": len(expired)})
    return expired
