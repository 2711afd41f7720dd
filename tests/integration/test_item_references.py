"""``item_reference`` resolution through real storage: an item id names its response, so references to
several responses' items resolve with one row read and one item query per response (however many of its
items are referenced), on a turn with or without a chain; another chain's, a deleted and a
``store: false`` response's items are never reached."""

from __future__ import annotations

from typing import Any

import pytest

from resilient.engine.chain.references import find_referenced
from resilient.ids import new_function_call_id, new_input_item_id, new_message_id, new_response_id
from resilient.storage.factory import Storage

pytestmark = pytest.mark.azurite
STORAGE_ADAPTERS = ("azurite", "memory")


def _message(item_id: str, text: str) -> dict[str, Any]:
    return {"id": item_id, "type": "message", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def _call(item_id: str) -> dict[str, Any]:
    return {"id": item_id, "type": "function_call", "call_id": "call_" + item_id[-8:], "name": "f",
            "arguments": "{}", "status": "completed"}


async def _response(storage: Storage, *, chain: str | None = None, **doc: Any) -> tuple[str, list[dict[str, Any]]]:
    """A stored response with one input item and two output items (all with ids naming it)."""
    rid = new_response_id()
    question = {"id": new_input_item_id("message", rid), "type": "message", "role": "user",
                "content": [{"type": "input_text", "text": "q"}]}
    outputs = [_call(new_function_call_id(rid)), _message(new_message_id(rid), "a")]
    await storage.responses.create(rid, "completed", {"created_at": 1, "chain_id": chain or rid, **doc})
    await storage.items.put_input_items(rid, [question])
    await storage.items.put_output_items(rid, 0, outputs)
    return rid, [question, *outputs]


def _calls(storage: Storage) -> tuple[int, int]:
    return storage.responses.storage_calls, storage.items.storage_calls  # type: ignore[attr-defined]


async def test_a_stateless_turn_reads_each_referenced_response_once(storage: Storage) -> None:
    _, first = await _response(storage)
    _, second = await _response(storage)
    wanted = [first[0]["id"], first[1]["id"], first[2]["id"], second[2]["id"]]
    rows, items = _calls(storage)
    found = await find_referenced(storage, wanted, chain_id=None, previous_turn=None)
    assert found == {item["id"]: item for item in [*first, second[2]]}
    assert _calls(storage) == (rows + 2, items + 2), "one row read and one item query per response"


async def test_many_references_to_one_response_are_one_query(storage: Storage) -> None:
    rid = new_response_id()
    outputs = [_message(new_message_id(rid), str(n)) for n in range(40)]  # more than the filter names
    await storage.responses.create(rid, "completed", {"created_at": 1, "chain_id": rid})
    await storage.items.put_output_items(rid, 0, outputs)
    rows, items = _calls(storage)
    found = await find_referenced(storage, [o["id"] for o in outputs], chain_id=None, previous_turn=None)
    assert found == {o["id"]: o for o in outputs}
    assert _calls(storage) == (rows + 1, items + 1)


async def test_a_chained_turn_reaches_its_own_chains_items_only(storage: Storage) -> None:
    root, mine = await _response(storage)
    _, theirs = await _response(storage)
    forged = "msg_" + root[len("resp_"):] + "0" * 16  # names the chain's root, which holds no such item
    found = await find_referenced(storage, [mine[1]["id"], theirs[1]["id"], forged], chain_id=root,
                                  previous_turn=root)
    assert found == {mine[1]["id"]: mine[1]}


async def test_deleted_and_unstored_responses_items_are_not_found(storage: Storage) -> None:
    _, deleted = await _response(storage, deleted=True)
    _, unstored = await _response(storage, store=False)
    missing = new_message_id(new_response_id())
    found = await find_referenced(storage, [deleted[1]["id"], unstored[1]["id"], missing], chain_id=None,
                                  previous_turn=None)
    assert found == {}


async def test_an_id_of_another_shape_is_found_along_the_chain_only(storage: Storage) -> None:
    root, _ = await _response(storage)
    client_item = {"id": "my-own-id", "type": "message", "role": "user",
                   "content": [{"type": "input_text", "text": "mine"}]}
    turn = new_response_id()
    await storage.responses.create(turn, "completed", {"created_at": 2, "chain_id": root, "previous_turn": root})
    await storage.items.put_input_items(turn, [client_item])
    assert await find_referenced(storage, ["my-own-id"], chain_id=root, previous_turn=turn) == {
        "my-own-id": client_item}
    assert await find_referenced(storage, ["my-own-id"], chain_id=None, previous_turn=None) == {}
