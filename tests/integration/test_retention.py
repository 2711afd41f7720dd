"""Retention clean-up against Azurite: finished responses go (row, items, log); running ones stay."""

from __future__ import annotations

import time

import pytest

from resilient.engine.heal.retention import MIN_RETENTION_MINUTES, purge_expired
from resilient.storage.errors import NotFound
from resilient.storage.factory import Storage
from resilient.storage.ports import ACTIVE_STATUSES

pytestmark = pytest.mark.azurite


async def _response(storage: Storage, rid: str, status: str) -> None:
    await storage.items.put_input_items(rid, [{"id": "msg_1", "type": "message", "role": "user",
                                               "status": "completed", "content": []}])
    await storage.responses.create(rid, "in_progress", {"created_at": 1})
    await storage.events.create(rid, [{"type": "response.created"}])
    if status != "in_progress":
        await storage.responses.transition(rid, status, allowed_from=ACTIVE_STATUSES)


async def test_purge_removes_only_finished_responses_past_retention(storage: Storage) -> None:
    suffix = str(int(time.time() * 1000))
    done, cancelled, running = f"resp_done{suffix}", f"resp_canc{suffix}", f"resp_run{suffix}"
    for rid, status in ((done, "completed"), (cancelled, "cancelled"), (running, "in_progress")):
        await _response(storage, rid, status)
    purged_history: list[str] = []

    async def purge_history(rid: str) -> None:
        purged_history.append(rid)

    assert await purge_expired(storage, retention_minutes=60, now_epoch_seconds=time.time()) == []
    later = time.time() + 61 * 60
    purged = await purge_expired(storage, retention_minutes=60, now_epoch_seconds=later, limit=1000,
                                 purge_history=purge_history)
    assert {done, cancelled} <= set(purged) and running not in purged
    assert {done, cancelled} <= set(purged_history)
    for rid in (done, cancelled):
        with pytest.raises(NotFound):
            await storage.responses.get(rid)
        with pytest.raises(NotFound):
            await storage.events.read_after(rid, -1)
        assert await storage.items.list_output_items(rid) == []
    assert (await storage.responses.get(running)).status == "in_progress"
    assert len((await storage.events.read_after(running, -1)).events) == 1


async def test_retention_never_goes_below_the_replay_minimum(storage: Storage) -> None:
    rid = f"resp_fresh{int(time.time() * 1000)}"
    await _response(storage, rid, "completed")
    soon = time.time() + (MIN_RETENTION_MINUTES - 1) * 60
    assert rid not in await purge_expired(storage, retention_minutes=0, now_epoch_seconds=soon, limit=1000)
