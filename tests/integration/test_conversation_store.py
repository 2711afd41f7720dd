"""The ``ConversationStore`` contract, held to the same rules on Azurite and in memory: create-if-absent,
compare-and-swap on the ETag, idempotent batch and hidden-item rows, deletion, id validation; and the
chain row's deletion."""

from __future__ import annotations

import pytest

from resilient.ids import InvalidId, new_conversation_id, new_response_id
from resilient.storage.errors import AlreadyExists, NotFound, PreconditionFailed
from resilient.storage.factory import Storage

pytestmark = pytest.mark.azurite
STORAGE_ADAPTERS = ("azurite", "memory")


async def test_a_created_conversation_reads_back_as_written(storage: Storage) -> None:
    cid = new_conversation_id()
    created = await storage.conversations.create(cid, 1_700_000_000, {"topic": "tea"}, 1)
    read = await storage.conversations.get(cid)
    assert (read.conversation_id, read.created_at, read.metadata, read.batches, read.deleted) == (
        cid, 1_700_000_000, {"topic": "tea"}, 1, False)
    assert read.etag and created.etag == read.etag
    with pytest.raises(AlreadyExists):
        await storage.conversations.create(cid, 1, {}, 0)


async def test_an_unknown_conversation_is_not_found(storage: Storage) -> None:
    with pytest.raises(NotFound):
        await storage.conversations.get(new_conversation_id())


async def test_replace_is_a_compare_and_swap(storage: Storage) -> None:
    cid = new_conversation_id()
    first = await storage.conversations.create(cid, 5, {}, 0)
    second = await storage.conversations.replace(first, metadata={"k": "v"}, batches=2)
    assert (second.metadata, second.batches, second.deleted) == ({"k": "v"}, 2, False)
    with pytest.raises(PreconditionFailed):  # the first read's ETag is stale now
        await storage.conversations.replace(first, deleted=True)
    marked = await storage.conversations.replace(second, deleted=True)
    assert (await storage.conversations.get(cid)).deleted and marked.metadata == {"k": "v"}
    await storage.conversations.delete(cid)
    with pytest.raises(NotFound):
        await storage.conversations.replace(marked, deleted=False)


async def test_batches_and_hidden_items_are_listed_in_order_and_idempotent(storage: Storage) -> None:
    cid, turn = new_conversation_id(), new_response_id()
    await storage.conversations.create(cid, 5, {}, 3)
    await storage.conversations.add_batch(cid, 2, turn)
    await storage.conversations.add_batch(cid, 1, None)
    await storage.conversations.add_batch(cid, 2, turn)  # a retried write changes nothing
    await storage.conversations.hide_item(cid, "msg_a")
    await storage.conversations.hide_item(cid, "msg_a")
    edits = await storage.conversations.edits(cid)
    assert edits.batches == ((1, None), (2, turn)) and edits.hidden == frozenset({"msg_a"})
    empty = await storage.conversations.edits(new_conversation_id())
    assert empty.batches == () and empty.hidden == frozenset()


async def test_delete_removes_everything_but_the_chain_row_and_is_idempotent(storage: Storage) -> None:
    cid, turn = new_conversation_id(), new_response_id()
    await storage.conversations.create(cid, 5, {}, 1)
    await storage.conversations.add_batch(cid, 1, None)
    await storage.conversations.hide_item(cid, "msg_b")
    chain = await storage.chains.append_turn(await storage.chains.get(cid), turn, [turn])
    await storage.conversations.delete(cid)
    await storage.conversations.delete(cid)
    with pytest.raises(NotFound):
        await storage.conversations.get(cid)
    assert (await storage.conversations.edits(cid)).batches == ()
    assert (await storage.chains.get(cid)).latest_response_id == chain.latest_response_id == turn
    await storage.chains.delete(cid)
    await storage.chains.delete(cid)
    assert (await storage.chains.get(cid)).etag is None


@pytest.mark.parametrize("bad", ["../x", "conv_a'b", "resp_" + "a" * 10, "conv_" + "a" * 200, ""])
async def test_hostile_ids_never_reach_storage(storage: Storage, bad: str) -> None:
    with pytest.raises(InvalidId):
        await storage.conversations.get(bad)
    with pytest.raises(InvalidId):
        await storage.conversations.hide_item(new_conversation_id(), "../" + bad)
    with pytest.raises(InvalidId):
        await storage.conversations.add_batch(new_conversation_id(), 1, "a'b")
