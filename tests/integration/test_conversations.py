"""The Conversations API at the service + engine level, on Azurite and in memory: a conversation is its
chain (turn inputs and outputs, in order) plus the items added through the API, which reach the next
turn's agent in their place; item deletion hides an item from both; deletion removes what the
conversation holds; ``conversation`` on a turn must name a live conversation."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest

from resilient.agents.base import AgentRequest, Phase, PhaseContext
from resilient.agents.research import ResearchAgent
from resilient.engine.activities import Engine
from resilient.http.conversations import ConversationsService
from resilient.http.service import ResponsesService
from resilient.protocol.errors import ApiError
from resilient.protocol.items import text_of
from resilient.settings import Settings
from resilient.storage.errors import NotFound
from resilient.storage.factory import Storage

pytestmark = pytest.mark.azurite
STORAGE_ADAPTERS = ("azurite", "memory")


class _Runtime:
    async def start(self, instance_id: str, payload: dict[str, Any]) -> None:
        return None

    async def raise_event(self, instance_id: str, name: str, data: Any) -> None:
        return None


class Recorder(ResearchAgent):
    """Answers every turn with one phase "answer to <question>" and records what each turn was given."""

    seen: list[AgentRequest]

    async def plan(self, request: AgentRequest) -> list[Phase]:
        self.seen.append(request)
        return [Phase("only")]

    async def run_phase(self, context: PhaseContext) -> AsyncIterator[str]:
        yield f"answer to {context.request.question()}"


class Rig:
    def __init__(self, storage: Storage, settings: Settings) -> None:
        self.responses = ResponsesService(storage, _Runtime(), settings)
        self.conversations = ConversationsService(storage)
        self.agent = Recorder(settings)
        self.agent.seen = []
        self.engine = Engine(storage, self.agent, settings)

    async def turn(self, text: str, conversation: str, **body: Any) -> dict[str, Any]:
        """A turn run to completion by the engine (as the orchestration would)."""
        result = await self.responses.create(json.dumps({"model": "m", "input": text, "background": True,
                                                         "conversation": conversation, **body}).encode())
        assert result.status == 200, result.body
        rid = result.body["id"]
        await self.engine.plan(rid)
        await self.engine.run_phase(rid, 0)
        await self.engine.finalize(rid, {"status": "completed"})
        answer: dict[str, Any] = result.body
        return answer

    async def items(self, cid: str, **query: str) -> dict[str, Any]:
        result = await self.conversations.list_items(cid, list(query.items()))
        assert result.status == 200, result.body
        listed: dict[str, Any] = result.body
        return listed


def _texts(items: list[dict[str, Any]]) -> list[str]:
    return [text_of(item) for item in items]


async def _error(call: Any) -> ApiError:
    with pytest.raises(ApiError) as caught:
        await call
    return caught.value


@pytest.fixture
def rig(storage: Storage, settings: Settings) -> Rig:
    return Rig(storage, settings)


async def _create(rig: Rig, **body: Any) -> str:
    result = await rig.conversations.create(json.dumps(body).encode())
    assert result.status == 200 and result.body["object"] == "conversation", result.body
    return str(result.body["id"])


async def test_items_are_the_turns_inputs_and_outputs_with_added_items_in_their_place(rig: Rig) -> None:
    cid = await _create(rig, items=[{"role": "system", "content": "be brief"}], metadata={"topic": "tea"})
    await rig.turn("first", cid)
    added = await rig.conversations.add_items(cid, [("include[]", "message.output_text.logprobs")],
                                              json.dumps({"items": [{"role": "user", "content": "note"}]}).encode())
    assert added.body["object"] == "list" and _texts(added.body["data"]) == ["note"]
    await rig.turn("second", cid)
    assert _texts(rig.agent.seen[0].history) == ["be brief"]
    assert _texts(rig.agent.seen[1].history) == ["be brief", "first", "answer to first", "note"]
    listed = await rig.items(cid, order="asc")
    expected = ["be brief", "first", "answer to first", "note", "second", "answer to second"]
    assert _texts(listed["data"]) == expected and listed["has_more"] is False
    assert listed["first_id"] == listed["data"][0]["id"] and listed["last_id"] == listed["data"][-1]["id"]
    newest = await rig.items(cid)  # default: desc, 20
    assert _texts(newest["data"]) == list(reversed(expected))
    page = await rig.items(cid, order="asc", limit="2", after=listed["data"][1]["id"])
    assert _texts(page["data"]) == ["answer to first", "note"] and page["has_more"] is True
    one = await rig.conversations.retrieve_item(cid, listed["data"][2]["id"], [])
    assert one.body == listed["data"][2]


async def test_a_deleted_item_leaves_the_listing_and_the_next_history(rig: Rig) -> None:
    cid = await _create(rig, items=[{"role": "user", "content": "keep"}, {"role": "user", "content": "drop"}])
    drop = (await rig.items(cid, order="asc"))["data"][1]["id"]
    answer = await rig.conversations.delete_item(cid, drop)
    assert answer.body["id"] == cid and answer.body["object"] == "conversation"
    assert _texts((await rig.items(cid))["data"]) == ["keep"]
    await rig.turn("next", cid)
    assert _texts(rig.agent.seen[-1].history) == ["keep"]
    assert (await _error(rig.conversations.retrieve_item(cid, drop, []))).status == 404
    assert (await _error(rig.conversations.delete_item(cid, drop))).status == 404


async def test_retrieve_update_and_unknown_ids(rig: Rig) -> None:
    cid = await _create(rig, metadata={"a": "1"})
    got = await rig.conversations.retrieve(cid)
    assert got.body["metadata"] == {"a": "1"} and isinstance(got.body["created_at"], int)
    updated = await rig.conversations.update(cid, json.dumps({"metadata": {"b": "2"}}).encode())
    assert updated.body["metadata"] == {"b": "2"}
    assert (await rig.conversations.retrieve(cid)).body["metadata"] == {"b": "2"}
    for bad in ("conv_" + "0" * 48, "../x", "resp_abc", "conv_a'b"):
        missing = await _error(rig.conversations.retrieve(bad))
        assert (missing.status, missing.code) == (404, "not_found")
    missing = await _error(rig.conversations.retrieve("conv_nothing"))
    assert missing.message == "Conversation with id 'conv_nothing' not found."
    assert (await _error(rig.conversations.retrieve_item(cid, "msg_nothing", []))).status == 404
    bad_after = await _error(rig.conversations.list_items(cid, [("after", "msg_nothing")]))
    assert (bad_after.status, bad_after.param) == (404, "after")
    malformed_after = await _error(rig.conversations.list_items(cid, [("after", "../x")]))
    assert (malformed_after.status, malformed_after.param) == (400, "after")
    bad_include = await _error(rig.conversations.list_items(cid, [("include", "everything")]))
    assert (bad_include.status, bad_include.param) == (400, "include")
    too_many = await _error(rig.conversations.add_items(cid, [], json.dumps(
        {"items": [{"role": "user", "content": "x"}] * 21}).encode()))
    assert (too_many.status, too_many.param) == (400, "items")


async def test_a_turn_must_name_a_live_conversation(rig: Rig) -> None:
    refused = await _error(rig.responses.create(json.dumps(
        {"model": "m", "input": "x", "conversation": "conv_nevermade"}).encode()))
    assert (refused.status, refused.code, refused.param) == (404, "not_found", "conversation")
    assert refused.message == "Conversation with id 'conv_nevermade' not found."


async def test_a_store_false_turn_leaves_nothing_in_the_conversation(rig: Rig) -> None:
    cid = await _create(rig)
    await rig.turn("kept", cid)
    result = await rig.responses.create(json.dumps({"model": "m", "input": "secret", "store": False,
                                                    "stream": True, "conversation": cid}).encode())
    assert result.status == 200 and result.stream is not None
    first = await anext(result.stream)  # response.created names the response
    found = re.search(rb'"id":"(resp_[0-9a-f]+)"', first)
    assert found is not None
    rid = found.group(1).decode()
    await rig.engine.plan(rid)  # the unstored run reads the conversation's history as it stands ...
    await rig.engine.run_phase(rid, 0)
    await rig.engine.finalize(rid, {"status": "completed"})
    assert _texts(rig.agent.seen[-1].history) == ["kept", "answer to kept"]
    assert _texts((await rig.items(cid, order="asc"))["data"]) == ["kept", "answer to kept"]  # ... and joins none
    await rig.turn("after", cid)
    assert _texts(rig.agent.seen[-1].history) == ["kept", "answer to kept"]


async def test_deleting_a_conversation_deletes_its_turns_and_items(rig: Rig, storage: Storage) -> None:
    cid = await _create(rig, items=[{"role": "user", "content": "hello"}])
    turn = await rig.turn("one", cid)
    added = await rig.conversations.add_items(cid, [], json.dumps({"items": [{"role": "user",
                                                                              "content": "x"}]}).encode())
    deleted = await rig.conversations.delete(cid)
    assert deleted.body == {"id": cid, "object": "conversation.deleted", "deleted": True}
    for call in (rig.conversations.retrieve(cid), rig.conversations.list_items(cid, []),
                 rig.conversations.delete(cid), rig.responses.retrieve(turn["id"], {}, {}),
                 rig.responses.create(json.dumps({"model": "m", "input": "x", "conversation": cid}).encode())):
        assert (await _error(call)).status == 404
    with pytest.raises(NotFound):
        await storage.responses.get(turn["id"])
    assert (await storage.chains.get(cid)).etag is None
    assert (await storage.items.list_input_items(f"{cid}-000002", after=None, limit=5, order="asc")).data == []
    assert added.status == 200


async def test_a_running_turn_refuses_the_deletion(rig: Rig) -> None:
    cid = await _create(rig)
    result = await rig.responses.create(json.dumps({"model": "m", "input": "x", "background": True,
                                                    "conversation": cid}).encode())
    refused = await _error(rig.conversations.delete(cid))
    assert (refused.status, refused.code) == (409, "response_in_progress")
    assert (await rig.conversations.retrieve(cid)).status == 200
    assert result.status == 200
