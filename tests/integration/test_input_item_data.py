"""Input items with data (images, files) through real storage: a large ``data:`` URL goes to a spill blob,
not into the table row, and comes back whole; ``item_reference`` items an input stored before the create
resolved them (it keeps them as sent) are resolved for the agent along the response's own chain only."""

from __future__ import annotations

import base64
import json
import os

import pytest

from resilient.engine.run.agent_request import all_input_items
from resilient.ids import new_input_item_id, new_message_id, new_response_id
from resilient.protocol.request import normalize_input_items, parse_create_request
from resilient.storage.connection import StorageClients
from resilient.storage.factory import Storage
from resilient.storage.items import input_key

pytestmark = pytest.mark.azurite
STORAGE_ADAPTERS = ("azurite", "memory")


def _image_url(size: int) -> str:
    return "data:image/png;base64," + base64.b64encode(os.urandom(size)).decode()


@pytest.mark.adapters("azurite")  # reads the raw table row and the spill container
async def test_a_large_data_url_is_stored_in_a_blob_and_listed_whole(storage: Storage, rid: str) -> None:
    image = _image_url(1_200_000)  # 1.6 MB of base64: 25 times what one table property holds
    body = {"input": [{"role": "user", "content": [{"type": "input_text", "text": "what is this?"},
                                                   {"type": "input_image", "image_url": image, "detail": "high"}]},
                      {"role": "user", "content": "and a small one"}]}
    items = normalize_input_items(parse_create_request(json.dumps(body).encode()), lambda: new_message_id(rid),
                                  lambda kind: new_input_item_id(kind, rid))
    await storage.items.put_input_items(rid, items)

    assert isinstance(storage.clients, StorageClients)
    table = storage.clients.table(storage.clients.items_table_name)
    row = await table.get_entity(rid, input_key(0))
    assert row["body"] == "" and row["body_blob"].startswith(f"{rid}/i-000000-")
    assert image not in json.dumps(dict(row)), "the data is not in the row"
    small = await table.get_entity(rid, input_key(1))
    assert small["body_blob"] == "" and "and a small one" in small["body"]
    blob = await (await storage.clients.container(storage.clients.spill_container_name)
                  .download_blob(row["body_blob"])).readall()
    assert image.encode() in blob

    listed = (await storage.items.list_input_items(rid, after=None, limit=10, order="asc")).data
    assert listed == items
    assert listed[0]["content"][1] == {"type": "input_image", "image_url": image, "detail": "high"}
    assert await all_input_items(storage, rid) == items  # the agent gets the full data too


async def test_item_references_are_resolved_for_the_agent_along_the_chain_only(storage: Storage) -> None:
    first, second, other = new_response_id(), new_response_id(), new_response_id()
    call = {"id": "fc_first", "type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}",
            "status": "completed"}
    question = {"id": "msg_q", "type": "message", "role": "user", "status": "completed",
                "content": [{"type": "input_image", "image_url": _image_url(100), "detail": "auto"}]}
    await storage.responses.create(first, "completed", {"created_at": 1})
    await storage.items.put_input_items(first, [question])
    await storage.items.put_output_item(first, 0, call)
    await storage.responses.create(other, "completed", {"created_at": 1})
    await storage.items.put_output_item(other, 0, {**call, "id": "fc_other"})

    answer = {"id": "fco_1", "type": "function_call_output", "call_id": "call_1", "output": "x",
              "status": "completed"}
    sent = [{"type": "item_reference", "id": "msg_q"}, {"type": "item_reference", "id": "fc_first"}, answer,
            {"type": "item_reference", "id": "fc_other"}]
    await storage.responses.create(second, "queued", {"created_at": 2, "previous_turn": first})
    await storage.items.put_input_items(second, sent)

    assert (await storage.items.list_input_items(second, after=None, limit=10, order="asc")).data == sent
    resolved = await all_input_items(storage, second)
    assert resolved[:3] == [question, call, answer]
    assert resolved[3] == sent[3], "another chain's item is never reached"
