"""TableResponseStore against Azurite: create-if-absent, CAS, transitions, control flags, spill."""

from __future__ import annotations

import asyncio

import pytest

from resilient.ids import new_response_id
from resilient.storage.connection import StorageClients
from resilient.storage.errors import InvalidTransition, NotFound, PreconditionFailed
from resilient.storage.factory import Storage
from resilient.storage.responses import TableResponseStore

pytestmark = pytest.mark.azurite
STORAGE_ADAPTERS = ("azurite", "memory")  # the storage contract: both adapters must pass it


def _doc(**extra: object) -> dict[str, object]:
    return {"model": "m", "created_at": 1, "background": True, "store": True, **extra}


async def test_create_is_idempotent(storage: Storage, rid: str) -> None:
    first = await storage.responses.create(rid, "queued", _doc(n=1))
    again = await storage.responses.create(rid, "in_progress", _doc(n=2))
    assert again.etag == first.etag
    assert again.status == "queued"
    assert again.doc == _doc(n=1)
    got = await storage.responses.get(rid)
    assert got == first


async def test_get_after_delete_is_not_found(storage: Storage, rid: str) -> None:
    with pytest.raises(NotFound):
        await storage.responses.get(rid)
    await storage.responses.create(rid, "queued", _doc())
    await storage.responses.delete(rid)
    await storage.responses.delete(rid)  # idempotent
    with pytest.raises(NotFound):
        await storage.responses.get(rid)
    with pytest.raises(NotFound):
        await storage.responses.get_control(rid)
    with pytest.raises(NotFound):
        await storage.responses.transition(rid, "completed", allowed_from=frozenset({"queued"}))


async def test_racing_terminal_transitions_have_exactly_one_winner(storage: Storage) -> None:
    for _ in range(20):
        rid = new_response_id()
        await storage.responses.create(rid, "queued", _doc())
        await storage.responses.transition(rid, "in_progress", allowed_from=frozenset({"queued"}))
        results = await asyncio.gather(
            storage.responses.transition(
                rid, "completed", allowed_from=frozenset({"in_progress"}), doc_changes={"by": "completer"}
            ),
            storage.responses.transition(
                rid, "cancelled", allowed_from=frozenset({"in_progress"}), doc_changes={"by": "canceller"}
            ),
            return_exceptions=True,
        )
        winners = [r for r in results if not isinstance(r, BaseException)]
        losers = [r for r in results if isinstance(r, BaseException)]
        assert len(winners) == 1 and len(losers) == 1, results
        assert isinstance(losers[0], InvalidTransition)
        assert losers[0].current_status == winners[0].status
        final = await storage.responses.get(rid)
        assert final.status == winners[0].status
        assert final.doc["by"] == ("completer" if final.status == "completed" else "canceller")


async def test_replace_with_stale_etag_fails(storage: Storage, rid: str) -> None:
    record = await storage.responses.create(rid, "queued", _doc())
    newer = await storage.responses.replace(record, doc_changes={"metadata": {"a": "1"}})
    assert newer.etag != record.etag
    with pytest.raises(PreconditionFailed):
        await storage.responses.replace(record, status="failed")
    assert (await storage.responses.get(rid)).status == "queued"
    assert (await storage.responses.get(rid)).doc["metadata"] == {"a": "1"}


async def test_transition_from_terminal_is_invalid(storage: Storage, rid: str) -> None:
    await storage.responses.create(rid, "completed", _doc())
    with pytest.raises(InvalidTransition) as caught:
        await storage.responses.transition(rid, "cancelled", allowed_from=frozenset({"queued", "in_progress"}))
    assert caught.value.current_status == "completed"


async def test_cancel_flag_and_pending_count_via_control(storage: Storage, rid: str) -> None:
    record = await storage.responses.create(rid, "in_progress", _doc())
    control = await storage.responses.get_control(rid)
    assert (control.status, control.cancel_requested, control.pending_input_count) == ("in_progress", False, 0)
    await storage.responses.replace(record, cancel_requested=True)
    await asyncio.gather(*(storage.responses.add_pending_input(rid, 1) for _ in range(8)))
    control = await storage.responses.get_control(rid)
    assert (control.cancel_requested, control.pending_input_count) == (True, 8)
    after = await storage.responses.add_pending_input(rid, -100)
    assert after.pending_input_count == 0
    assert after.doc == _doc()
    assert (await storage.responses.get_control(rid)).pending_input_count == 0


@pytest.mark.adapters("azurite")  # counts Azure round trips
async def test_control_read_is_one_call(storage: Storage, rid: str) -> None:
    store = storage.responses
    assert isinstance(store, TableResponseStore)
    await store.create(rid, "queued", _doc(instructions="x" * 200_000))
    before = store.storage_calls
    await store.get_control(rid)
    assert store.storage_calls - before == 1


async def test_large_instructions_spill_and_round_trip(storage: Storage, rid: str) -> None:
    big = "ü" * (200 * 1024)  # 200 KiB of non-ASCII text: far above a 64 KiB Table property
    created = await storage.responses.create(rid, "queued", _doc(instructions=big))
    got = await storage.responses.get(rid)
    assert got.doc["instructions"] == big
    if not isinstance(storage.clients, StorageClients):  # kept whole in memory: the contract part only
        moved = await storage.responses.transition(rid, "in_progress", allowed_from=frozenset({"queued"}))
        small = await storage.responses.replace(moved, doc_changes={"instructions": "short"})
        assert moved.doc["instructions"] == big and (await storage.responses.get(rid)).doc == small.doc
        assert created.etag != small.etag
        return
    entity = await storage.clients.table(storage.clients.responses_table_name).get_entity(rid, "r")
    assert entity["doc"] == "" and entity["doc_blob"].startswith(f"{rid}/doc-")
    # A small change keeps the spilled document; shrinking it moves it back inline.
    moved = await storage.responses.transition(rid, "in_progress", allowed_from=frozenset({"queued"}))
    assert moved.doc["instructions"] == big
    small = await storage.responses.replace(moved, doc_changes={"instructions": "short"})
    assert (await storage.responses.get(rid)).doc == small.doc == _doc(instructions="short")
    entity = await storage.clients.table(storage.clients.responses_table_name).get_entity(rid, "r")
    assert entity["doc_blob"] == "" and entity["doc"]
    assert created.etag != small.etag
    await storage.responses.delete(rid)
    spill = storage.clients.container(storage.clients.spill_container_name)
    assert [b.name async for b in spill.list_blobs(name_starts_with=f"{rid}/")] == []
