"""Hostile ids never reach storage; an unreachable account fails fast with StorageUnavailable."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import pytest

from resilient.ids import InvalidId
from resilient.storage.connection import RetryConfig, StorageClients
from resilient.storage.controls import ControlBoard
from resilient.storage.errors import StorageUnavailable
from resilient.storage.factory import Storage, build_storage
from resilient.storage.feed import CommittedFeed
from resilient.storage.ports import ReadCursor, ResponseRecord
from tests.integration.conftest import dead_settings, unique_prefix

pytestmark = pytest.mark.azurite

HOSTILE = ["../x", "a/b", "a'b", "%2F", "", "x" * 200, "ünï", "a b", "a#b", "a\nb", "resp_ok?x=1"]


def calls_on(storage: Storage, rid: str) -> list[Callable[[], Awaitable[object]]]:
    """Every public storage method, called with ``rid`` (and a hostile ``after``)."""
    r, i, e = storage.responses, storage.items, storage.events
    record = ResponseRecord(rid, "queued", {}, 'W/"x"')
    return [
        lambda: r.create(rid, "queued", {}),
        lambda: r.get(rid),
        lambda: r.get_control(rid),
        lambda: r.replace(record, status="failed"),
        lambda: r.transition(rid, "failed", allowed_from=frozenset({"queued"})),
        lambda: r.add_pending_input(rid, 1),
        lambda: r.delete(rid),
        lambda: i.put_input_items(rid, [{"id": "msg_1"}]),
        lambda: i.list_input_items(rid, after=None, limit=5, order="asc"),
        lambda: i.put_output_item(rid, 0, {"id": "msg_1"}),
        lambda: i.get_output_item(rid, 0),
        lambda: i.list_output_items(rid),
        lambda: i.find_items(rid, ["msg_1"]),
        lambda: i.delete_all(rid),
        lambda: e.create(rid, [{"type": "response.created"}]),
        lambda: e.open_writer(rid),
        lambda: e.read_after(rid, -1),
        lambda: e.read_more(rid, ReadCursor(0, 0, -1)),
        lambda: e.delete(rid),
    ]


@pytest.mark.parametrize("bad", HOSTILE)
async def test_hostile_ids_are_rejected_before_any_storage_call(dead_storage: Storage, bad: str) -> None:
    # Any storage call on these stores would raise StorageUnavailable, not InvalidId.
    for call in calls_on(dead_storage, bad):
        with pytest.raises(InvalidId):
            await call()
    for after in HOSTILE:
        with pytest.raises(InvalidId):
            await dead_storage.items.list_input_items("resp_ok", after=after, limit=5, order="asc")
        with pytest.raises(InvalidId):
            await dead_storage.items.put_input_items("resp_ok", [{"id": after}])
        with pytest.raises(InvalidId):  # an item id a reference names goes into the query's filter
            await dead_storage.items.find_items("resp_ok", ["msg_1", after])


async def test_hostile_ids_make_no_calls_on_live_storage(storage: Storage) -> None:
    counters = [storage.responses, storage.items, storage.events, storage.events.reader]
    before = [c.storage_calls for c in counters]  # type: ignore[attr-defined]
    for bad in HOSTILE:
        for call in calls_on(storage, bad):
            with pytest.raises(InvalidId):
                await call()
    assert [c.storage_calls for c in counters] == before  # type: ignore[attr-defined]


async def test_closed_port_raises_storage_unavailable_quickly(dead_storage: Storage) -> None:
    for call in calls_on(dead_storage, "resp_fine"):
        started = time.monotonic()
        with pytest.raises(StorageUnavailable):
            await call()
        assert time.monotonic() - started < 5


@pytest.mark.slow(seconds=12)
async def test_default_retry_bridges_seconds_but_does_not_hang() -> None:
    clients = StorageClients(dead_settings(unique_prefix()), retry=RetryConfig())
    try:
        storage = build_storage(clients, feed=CommittedFeed(), controls=ControlBoard())
        started = time.monotonic()
        with pytest.raises(StorageUnavailable):
            await storage.responses.get("resp_fine")
        with pytest.raises(StorageUnavailable):
            await storage.events.read_after("resp_fine", -1)
        elapsed = time.monotonic() - started
        assert 2 < elapsed < 30, elapsed
    finally:
        await clients.close()


async def test_ensure_created_on_closed_port(dead_storage: Storage) -> None:
    with pytest.raises(StorageUnavailable):
        await dead_storage.clients.ensure_created()
