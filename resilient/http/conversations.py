"""The Conversations API over HTTP: bodies and queries in, OpenAI's objects and errors out.

Only translation: the rules (does it exist, is it deleted, does the item belong to it, what may be
deleted) are :mod:`resilient.engine.chain.conversations` and :mod:`resilient.engine.chain.conversation_items`.
Unknown, malformed, hostile and deleted ids are 404 (``Conversation with id '…' not found.``), like a
response's.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from resilient.engine.chain import conversation_items as items
from resilient.engine.chain import conversations
from resilient.engine.chain.conversation_items import ItemMissing
from resilient.engine.chain.conversations import ConversationMissing
from resilient.http.results import HttpResult, translated
from resilient.ids import is_safe_id
from resilient.protocol import errors
from resilient.protocol.conversations import (
    CreateConversation,
    CreateItems,
    UpdateConversation,
    check_include,
    parse,
    stored_items,
)
from resilient.protocol.params import parse_int
from resilient.storage.ports import ConversationRecord, JsonDict

if TYPE_CHECKING:
    from resilient.storage.factory import Storage

Query = Sequence[tuple[str, str]]  # query pairs in order, repeated keys kept (``include``)


def conversation_object(record: ConversationRecord) -> dict[str, Any]:
    """The ``Conversation`` object of the ``openai`` client."""
    return {"id": record.conversation_id, "object": "conversation", "created_at": record.created_at,
            "metadata": record.metadata}


def item_list(data: list[JsonDict], has_more: bool) -> dict[str, Any]:
    """The ``ConversationItemList`` object (the shape of every list of the API)."""
    return {"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None, "has_more": has_more}


@contextmanager
def _answered(conversation_id: str, item_id: str | None = None) -> Iterator[None]:
    with translated(conversation_id):
        try:
            yield
        except ConversationMissing:
            raise errors.not_found("Conversation", conversation_id) from None
        except ItemMissing:
            raise errors.not_found("Item", item_id or "") from None


def _single(query: Query, name: str) -> str | None:
    values = [value for key, value in query if key == name]
    return values[-1] if values else None


def _include(query: Query) -> list[str]:
    return check_include([value for key, value in query if key in ("include", "include[]")])


class ConversationsService:
    """``/conversations`` and ``/conversations/{id}/items``; each method answers one operation."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    async def create(self, body: bytes) -> HttpResult:
        request = parse(CreateConversation, body)
        record = await conversations.create(self.storage, request.metadata or {}, stored_items(request.items))
        return HttpResult(200, conversation_object(record))

    async def retrieve(self, conversation_id: str) -> HttpResult:
        with _answered(conversation_id):
            return HttpResult(200, conversation_object(await conversations.live(self.storage, conversation_id)))

    async def update(self, conversation_id: str, body: bytes) -> HttpResult:
        with _answered(conversation_id):
            await conversations.live(self.storage, conversation_id)  # an unknown id is 404 before a bad body
            request = parse(UpdateConversation, body)
            record = await conversations.update(self.storage, conversation_id, request.metadata or {})
        return HttpResult(200, conversation_object(record))

    async def delete(self, conversation_id: str) -> HttpResult:
        with _answered(conversation_id):
            await conversations.delete(self.storage, conversation_id)
        return HttpResult(200, {"id": conversation_id, "object": "conversation.deleted", "deleted": True})

    async def list_items(self, conversation_id: str, query: Query) -> HttpResult:
        limit_text = _single(query, "limit")
        limit = 20 if limit_text is None else parse_int(limit_text, param="limit", minimum=1, maximum=100)
        order = _single(query, "order") or "desc"
        if order not in ("asc", "desc"):
            raise errors.invalid_request("'order' must be 'asc' or 'desc'.", param="order",
                                         code=errors.CODE_INVALID_VALUE)
        after = _single(query, "after")
        if after is not None and not is_safe_id(after):  # as for a response's input items (E10)
            raise errors.invalid_request("'after' is not a valid item id.", param="after",
                                         code=errors.CODE_INVALID_VALUE)
        _include(query)
        with _answered(conversation_id):
            await conversations.live(self.storage, conversation_id)
            everything = await items.all_items(self.storage, conversation_id)
        try:
            found = items.page(everything, after=after, limit=limit, order="asc" if order == "asc" else "desc")
        except ItemMissing:  # a cursor naming nothing: 404, as for a response's input items
            raise errors.ApiError(404, errors.INVALID_REQUEST,
                                  f"No item with id {errors.echo(after)} in this conversation.",
                                  param="after", code=errors.CODE_NOT_FOUND) from None
        return HttpResult(200, item_list(found.data, found.has_more))

    async def add_items(self, conversation_id: str, query: Query, body: bytes) -> HttpResult:
        _include(query)
        with _answered(conversation_id):
            await conversations.live(self.storage, conversation_id)
            request = parse(CreateItems, body)
            added = await conversations.append(self.storage, conversation_id, stored_items(request.items))
        return HttpResult(200, item_list(added, False))

    async def retrieve_item(self, conversation_id: str, item_id: str, query: Query) -> HttpResult:
        _include(query)
        with _answered(conversation_id, item_id):
            await conversations.live(self.storage, conversation_id)
            return HttpResult(200, await items.find(self.storage, conversation_id, item_id))

    async def delete_item(self, conversation_id: str, item_id: str) -> HttpResult:
        with _answered(conversation_id, item_id):
            await conversations.live(self.storage, conversation_id)
            await items.hide(self.storage, conversation_id, item_id)
            record = await conversations.live(self.storage, conversation_id)
        return HttpResult(200, conversation_object(record))
