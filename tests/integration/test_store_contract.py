"""The parts of the storage contract no adapter-specific test covered, on Azurite and in memory alike:
the chain row's compare-and-swap, the active index, retention's listing, kept writers and a deleted log."""

from __future__ import annotations

import asyncio
import time

import pytest

from resilient.ids import new_response_id
from resilient.storage.errors import LostOwnership, NotFound, PreconditionFailed
from resilient.storage.factory import Storage

pytestmark = pytest.mark.azurite
STORAGE_ADAPTERS = ("azurite", "memory")


def _chain() -> str:
    return "conv_" + new_response_id()[5:17]


async def test_a_chain_row_is_created_once_and_moved_by_compare_and_swap(storage: Storage) -> None:
    cid = _chain()
    empty = await storage.chains.get(cid)
    assert (empty.latest_response_id, empty.open_turns, empty.etag) == (None, (), None)
    first, second, third = new_response_id(), new_response_id(), new_response_id()
    created = await storage.chains.append_turn(empty, first, [first])
    assert created.etag is not None
    with pytest.raises(PreconditionFailed):  # a second creator lost the race
        await storage.chains.append_turn(empty, second, [second])
    moved = await storage.chains.append_turn(created, second, [first, second])
    with pytest.raises(PreconditionFailed):  # a stale row
        await storage.chains.append_turn(created, third, [third])
    got = await storage.chains.get(cid)
    assert (got.latest_response_id, got.open_turns, got.etag) == (second, (first, second), moved.etag)


async def test_racing_turns_on_one_chain_have_one_winner(storage: Storage) -> None:
    cid = _chain()
    row = await storage.chains.append_turn(await storage.chains.get(cid), new_response_id(), [])
    turns = [new_response_id() for _ in range(4)]
    results = await asyncio.gather(*(storage.chains.append_turn(row, t, [t]) for t in turns),
                                   return_exceptions=True)
    winners = [t for t, r in zip(turns, results, strict=True) if not isinstance(r, BaseException)]
    assert len(winners) == 1 and all(isinstance(r, PreconditionFailed) for r in results
                                     if isinstance(r, BaseException))
    assert (await storage.chains.get(cid)).latest_response_id == winners[0]


async def test_the_active_index_is_idempotent(storage: Storage) -> None:
    a, b = new_response_id(), new_response_id()
    await storage.active.add(a, 100.0)
    await storage.active.add(a, 100.0)
    await storage.active.add(b, 200.0)
    listed = {e.response_id: e.since for e in await storage.active.list(100_000)}
    assert listed[a] == 100.0 and listed[b] == 200.0
    assert len(await storage.active.list(1)) == 1
    await storage.active.remove(a)
    await storage.active.remove(a)  # absent is fine
    listed = {e.response_id: e.since for e in await storage.active.list(100_000)}
    assert a not in listed and b in listed
    await storage.active.remove(b)


async def test_retention_lists_only_finished_responses_written_before_the_cutoff(storage: Storage) -> None:
    done, running = new_response_id(), new_response_id()
    await storage.responses.create(done, "completed", {"store": True})
    await storage.responses.create(running, "in_progress", {"store": True})
    later = await storage.responses.list_finished_before(time.time() + 3600, 100_000)
    assert done in later and running not in later
    assert done not in await storage.responses.list_finished_before(time.time() - 3600, 100_000)


async def test_a_kept_writer_is_handed_out_once_and_a_deleted_log_fences_it(storage: Storage) -> None:
    rid = new_response_id()
    writer = await storage.events.create(rid, [{"type": "response.created"}])
    assert storage.events.take_writer(rid) is None
    storage.events.keep_writer(writer)
    assert storage.events.take_writer(rid) is writer and storage.events.take_writer(rid) is None
    cursor = (await storage.events.read_after(rid, -1)).cursor
    await storage.events.delete(rid)
    with pytest.raises(LostOwnership):
        await writer.append([{"type": "response.in_progress"}])
    with pytest.raises(NotFound):
        await storage.events.read_more(rid, cursor)
