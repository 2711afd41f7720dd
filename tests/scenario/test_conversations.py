"""The Conversations API with the unmodified ``openai`` client under the host double, on Azurite: create
(items, metadata), turns with ``conversation=``, items listed in order with pagination, items added between
turns reaching the next turn, retrieve, update, item deletion, deletion (then 404s), a missing
conversation on a turn, a ``store=false`` turn leaving nothing, and both route prefixes."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from tests.scenario.conftest import knobs

pytestmark = pytest.mark.azurite


def _text(item: Any) -> str:
    return "".join(part.text for part in item.content)


def _texts(items: Any) -> list[str]:
    return [_text(item) for item in items]


def test_a_conversation_from_create_to_delete(client: OpenAI) -> None:
    conversation = client.conversations.create(items=[{"role": "user", "content": "Remember: tea."}],
                                               metadata={"topic": "drinks"})
    assert conversation.id.startswith("conv_") and conversation.metadata == {"topic": "drinks"}
    first = client.responses.create(model="m", input="What is tea?", conversation=conversation.id,
                                    metadata=knobs(phases=1, words=3))
    second = client.responses.create(model="m", input="And coffee?", conversation={"id": conversation.id},
                                     metadata=knobs(phases=2, words=3))
    assert first.conversation is not None and first.conversation.id == conversation.id
    assert second.status == "completed" and len(second.output) == 2
    listed = list(client.conversations.items.list(conversation.id, order="asc", limit=2))  # pages of 2
    assert [item.id for item in listed] == [
        client.conversations.items.list(conversation.id, order="asc").data[0].id,
        *[i.id for i in client.responses.input_items.list(first.id).data], first.output[0].id,
        *[i.id for i in client.responses.input_items.list(second.id).data], *[o.id for o in second.output]]
    assert _texts(listed)[:3] == ["Remember: tea.", "What is tea?", first.output_text]
    page = client.conversations.items.list(conversation.id, limit=2)  # newest first
    assert [i.id for i in page.data] == [second.output[1].id, second.output[0].id] and page.has_more
    assert page.first_id == second.output[1].id and page.last_id == second.output[0].id

    added = client.conversations.items.create(conversation.id, items=[{"role": "user", "content": "Note: milk."}],
                                              include=["message.output_text.logprobs"])
    assert added.object == "list" and _texts(added.data) == ["Note: milk."]
    third = client.responses.create(model="m", input="Summarize.", conversation=conversation.id,
                                    metadata=knobs(phases=1, words=3))
    newest = client.conversations.items.list(conversation.id, limit=4).data
    assert _texts(newest[1:3]) == ["Summarize.", "Note: milk."] and newest[0].id == third.output[0].id
    assert client.conversations.items.retrieve(added.data[0].id, conversation_id=conversation.id).id == added.data[0].id

    assert client.conversations.retrieve(conversation.id).metadata == {"topic": "drinks"}
    assert client.conversations.update(conversation.id, metadata={"topic": "tea"}).metadata == {"topic": "tea"}
    after_delete = client.conversations.items.delete(added.data[0].id, conversation_id=conversation.id)
    assert after_delete.id == conversation.id and after_delete.object == "conversation"
    assert "Note: milk." not in _texts(client.conversations.items.list(conversation.id, order="asc"))

    deleted = client.conversations.delete(conversation.id)
    assert deleted.id == conversation.id and deleted.deleted and deleted.object == "conversation.deleted"
    for call in (lambda: client.conversations.retrieve(conversation.id),
                 lambda: client.conversations.items.list(conversation.id),
                 lambda: client.conversations.delete(conversation.id),
                 lambda: client.responses.retrieve(first.id)):
        with pytest.raises(openai.NotFoundError):
            call()


def test_the_next_turn_continues_from_the_conversations_items(client: OpenAI) -> None:
    """The offline agent's follow-up turn mentions the chain's last user message: here an item added
    through the API, not a turn's input."""
    conversation = client.conversations.create()
    client.responses.create(model="m", input="Why is the sky blue?", conversation=conversation.id,
                            metadata=knobs(phases=1, words=3))
    client.conversations.items.create(conversation.id, items=[{"role": "user", "content": "Why is grass green?"}])
    follow = client.responses.create(model="m", input=[{"role": "user", "content": "Go on."}],
                                     conversation=conversation.id, metadata=knobs(phases=1, words=30))
    assert "Why is grass green?" in follow.output_text


def test_a_turn_on_a_missing_conversation_is_refused_as_openai_does(client: OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as refused:
        client.responses.create(model="m", input="x", conversation="conv_nevercreated")
    body: Any = refused.value.body
    assert body["message"] == "Conversation with id 'conv_nevercreated' not found."
    assert body["param"] == "conversation" and body["code"] == "not_found"


def test_a_store_false_turn_leaves_nothing_in_the_conversation(client: OpenAI) -> None:
    conversation = client.conversations.create(items=[{"role": "user", "content": "kept"}])
    unstored = client.responses.create(model="m", input="not kept", store=False, conversation=conversation.id,
                                       metadata=knobs(phases=1, words=3))
    assert unstored.status == "completed"
    assert _texts(client.conversations.items.list(conversation.id)) == ["kept"]


def test_both_prefixes_and_openai_error_shapes(base_url: str, http: httpx.Client) -> None:
    root = base_url.rstrip("/").removesuffix("/v1")
    created = httpx.post(f"{root}/conversations", json={"metadata": {"a": "b"}}, timeout=30).json()
    for prefix in ("", "/v1"):
        got = httpx.get(f"{root}{prefix}/conversations/{created['id']}", timeout=30)
        assert got.status_code == 200 and got.json() == created
        empty = httpx.get(f"{root}{prefix}/conversations/{created['id']}/items", timeout=30).json()
        assert empty == {"object": "list", "data": [], "first_id": None, "last_id": None, "has_more": False}
        missing = httpx.get(f"{root}{prefix}/conversations/conv_none/items/msg_none", timeout=30)
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
        hostile = httpx.get(f"{root}{prefix}/conversations/conv_a%27b", timeout=30)
        assert hostile.status_code == 404
        bad = httpx.post(f"{root}{prefix}/conversations", json={"items": "x"}, timeout=30)
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "items"
