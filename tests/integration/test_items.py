"""TableItemStore against Azurite: ordering, paging with ``after``, spill, output checkpoints."""

from __future__ import annotations

import pytest

from resilient.storage.connection import StorageClients
from resilient.storage.errors import NotFound
from resilient.storage.factory import Storage
from resilient.storage.items import TableItemStore

pytestmark = pytest.mark.azurite
STORAGE_ADAPTERS = ("azurite", "memory")  # the storage contract: both adapters must pass it


def _item(n: int, text: str | None = None) -> dict[str, object]:
    return {
        "id": f"msg_{n:04d}",
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": text if text is not None else f"hello {n}"}],
    }


async def _pages(storage: Storage, rid: str, order: str, limit: int) -> list[str]:
    seen: list[str] = []
    after: str | None = None
    while True:
        page = await storage.items.list_input_items(rid, after=after, limit=limit, order=order)  # type: ignore[arg-type]
        seen += [item["id"] for item in page.data]
        if not page.has_more:
            return seen
        assert len(page.data) == limit
        after = page.data[-1]["id"]


async def test_input_items_order_and_paging(storage: Storage, rid: str) -> None:
    items = [_item(n) for n in range(230)]  # more than one 100-operation transaction
    await storage.items.put_input_items(rid, items)
    await storage.items.put_input_items(rid, items)  # idempotent
    ids = [str(item["id"]) for item in items]

    first = await storage.items.list_input_items(rid, after=None, limit=10, order="asc")
    assert [i["id"] for i in first.data] == ids[:10] and first.has_more
    assert first.data[0] == items[0]
    assert await _pages(storage, rid, "asc", 17) == ids
    assert await _pages(storage, rid, "desc", 17) == ids[::-1]
    assert await _pages(storage, rid, "asc", 230) == ids

    tail = await storage.items.list_input_items(rid, after=ids[-3], limit=5, order="asc")
    assert [i["id"] for i in tail.data] == ids[-2:] and not tail.has_more
    exact = await storage.items.list_input_items(rid, after=ids[-4], limit=3, order="asc")
    assert [i["id"] for i in exact.data] == ids[-3:] and not exact.has_more
    head = await storage.items.list_input_items(rid, after=ids[3], limit=10, order="desc")
    assert [i["id"] for i in head.data] == ids[2::-1] and not head.has_more
    assert (await storage.items.list_input_items(rid, after=ids[0], limit=5, order="desc")).data == []
    assert (await storage.items.list_input_items(rid, after=ids[-1], limit=5, order="asc")).data == []


@pytest.mark.adapters("azurite")  # counts Azure round trips
async def test_paging_reads_only_what_it_needs(storage: Storage, rid: str) -> None:
    store = storage.items
    assert isinstance(store, TableItemStore)
    await store.put_input_items(rid, [_item(n) for n in range(150)])
    for after, order, expected_calls in (
        (None, "asc", 1),
        (None, "desc", 2),
        ("msg_0100", "asc", 2),
        ("msg_0100", "desc", 2),
    ):
        before = store.storage_calls
        page = await store.list_input_items(rid, after=after, limit=5, order=order)  # type: ignore[arg-type]
        assert store.storage_calls - before == expected_calls, (after, order)
        assert len(page.data) == 5 and page.has_more


@pytest.mark.adapters("azurite")  # counts Azure round trips
async def test_one_item_put_is_one_write_and_lists_both_ways(storage: Storage, rid: str) -> None:
    store = storage.items
    assert isinstance(store, TableItemStore)
    before = store.storage_calls
    await store.put_input_items(rid, [_item(7)])
    assert store.storage_calls - before == 1  # one entity write, no transaction and no count row
    rows = [row async for row in store._table.query_entities("PartitionKey eq @pk", parameters={"pk": rid})]
    assert [row["RowKey"] for row in rows] == ["i-000000"]
    for order in ("asc", "desc"):
        before = store.storage_calls
        page = await store.list_input_items(rid, after=None, limit=5, order=order)  # type: ignore[arg-type]
        assert page.data == [_item(7)] and not page.has_more, order
        assert store.storage_calls - before == (1 if order == "asc" else 2), order
        after = await store.list_input_items(rid, after="msg_0007", limit=5, order=order)  # type: ignore[arg-type]
        assert after.data == [] and not after.has_more, order


@pytest.mark.adapters("azurite")  # deletes a raw table row
async def test_multi_item_put_without_its_count_row_lists_nothing_descending(storage: Storage, rid: str) -> None:
    """A multi-item put writes its count row last: until then its first row carries no count, so a
    descending listing cannot mistake it for a one-item put and show one item of several."""
    store = storage.items
    assert isinstance(store, TableItemStore)
    await store.put_input_items(rid, [_item(1), _item(2)])
    await store._table.delete_entity(rid, "n")  # as if the put were still being written
    page = await store.list_input_items(rid, after=None, limit=5, order="desc")
    assert page.data == [] and not page.has_more


async def test_unknown_after_is_not_found(storage: Storage, rid: str) -> None:
    await storage.items.put_input_items(rid, [_item(1)])
    with pytest.raises(NotFound):
        await storage.items.list_input_items(rid, after="msg_nope", limit=5, order="asc")
    empty = await storage.items.list_input_items("resp_empty" + rid[5:20], after=None, limit=5, order="desc")
    assert empty.data == [] and not empty.has_more


async def test_large_items_spill_and_round_trip(storage: Storage, rid: str) -> None:
    big = "🙂" * (50 * 1024) + "x" * (5 * 1024)  # 200 KiB UTF-8; 4-byte chars count double in UTF-16
    items = [_item(0), _item(1, big), _item(2)]
    await storage.items.put_input_items(rid, items)
    page = await storage.items.list_input_items(rid, after=None, limit=10, order="asc")
    assert page.data == items
    output = {
        "id": "msg_out",
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": big}],
    }
    await storage.items.put_output_item(rid, 0, output)
    assert await storage.items.get_output_item(rid, 0) == output
    if not isinstance(storage.clients, StorageClients):
        return  # the memory adapter keeps large values whole: there is no spill to look at
    spill = storage.clients.container(storage.clients.spill_container_name)
    names = sorted([b.name async for b in spill.list_blobs(name_starts_with=f"{rid}/")])
    assert len(names) == 2 and names[0].startswith(f"{rid}/i-000001-") and names[1].startswith(f"{rid}/o-000000-")
    await storage.items.delete_all(rid)
    assert [b.name async for b in spill.list_blobs(name_starts_with=f"{rid}/")] == []


async def test_output_items_are_checkpoints(storage: Storage, rid: str) -> None:
    assert await storage.items.get_output_item(rid, 0) is None
    for index in (2, 0, 1, 10):
        await storage.items.put_output_item(rid, index, {"id": f"msg_{index}", "phase": index})
    await storage.items.put_output_item(rid, 1, {"id": "msg_1", "phase": 1, "rewritten": True})
    listed = await storage.items.list_output_items(rid)
    assert [item["phase"] for item in listed] == [0, 1, 2, 10]
    assert listed[1]["rewritten"] is True
    await storage.items.put_input_items(rid, [_item(5)])
    await storage.items.delete_all(rid)
    assert await storage.items.list_output_items(rid) == []
    assert (await storage.items.list_input_items(rid, after=None, limit=5, order="asc")).data == []


async def test_item_ids_must_be_safe_and_unique(storage: Storage, rid: str) -> None:
    with pytest.raises(ValueError):
        await storage.items.put_input_items(rid, [_item(1), _item(1)])
    with pytest.raises(ValueError):
        await storage.items.put_input_items(rid, [{"id": "x' or 'a'='a", "type": "message"}])
    with pytest.raises(ValueError):
        await storage.items.put_input_items(rid, [{"type": "message"}])
