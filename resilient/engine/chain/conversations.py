"""The rules of a conversation's life: creating it (with its first items), reading and updating it, and
deleting it with everything it holds.

A conversation *is* the chain the service keeps for its turns (named by the conversation id): its items
are its turns' input and output items plus the batches added through the API
(:mod:`resilient.engine.chain.conversation_items`). Its own row only says that it exists, its metadata, and how
many batches were added. Deletion is decided by one compare-and-swap that marks the row deleted (404 from
then on, for reads and for ``conversation`` on a new turn); then its turns' responses (as a response
DELETE removes them), its batches, its chain row and finally its own row are removed. A deletion that died
halfway is finished by the next DELETE, which then answers 404 as a repeated DELETE does.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from resilient.engine.chain import lifecycle, turns
from resilient.engine.chain.conversation_items import add_items, segment_id, turn_ids
from resilient.engine.chain.refusals import Contended, NotStored, Refused
from resilient.ids import CONVERSATION_PREFIX, InvalidId, new_conversation_id, validate_id
from resilient.protocol import errors
from resilient.storage.cas import retry_cas
from resilient.storage.errors import NotFound
from resilient.storage.ports import ConversationRecord, JsonDict

if TYPE_CHECKING:
    from resilient.storage.factory import Storage

CAS_ATTEMPTS = 20


class ConversationMissing(Exception):
    """No conversation by that id for a client: unknown, malformed, hostile or deleted."""


async def create(storage: Storage, metadata: dict[str, str], items: list[JsonDict]) -> ConversationRecord:
    """A new conversation holding ``items`` (already stored-shaped, with new ids). The items are written
    before the row: the conversation becomes visible whole, or (a crash in between) not at all."""
    conversation_id = new_conversation_id()
    batches = 0
    if items:
        batches = 1
        await storage.items.put_input_items(segment_id(conversation_id, 1), items)
        await storage.conversations.add_batch(conversation_id, 1, None)
    return await storage.conversations.create(conversation_id, int(time.time()), metadata, batches)


async def live(storage: Storage, conversation_id: str) -> ConversationRecord:
    """The conversation's row; :class:`ConversationMissing` for unknown, malformed or deleted ids (the id
    is validated before it reaches storage)."""
    try:
        validate_id(conversation_id, prefix=CONVERSATION_PREFIX)
        record = await storage.conversations.get(conversation_id)
    except (InvalidId, NotFound):
        raise ConversationMissing(conversation_id) from None
    if record.deleted:
        raise ConversationMissing(conversation_id)
    return record


async def update(storage: Storage, conversation_id: str, metadata: dict[str, str]) -> ConversationRecord:
    """Replace the metadata (a compare-and-swap, so a racing item batch keeps its count)."""

    async def attempt() -> ConversationRecord:
        return await storage.conversations.replace(await live(storage, conversation_id), metadata=metadata)

    return await _retried(attempt, conversation_id)


async def append(storage: Storage, conversation_id: str, items: list[JsonDict]) -> list[JsonDict]:
    """Add ``items`` after everything the conversation holds now (see :func:`add_items`)."""

    async def reserve() -> ConversationRecord:
        record = await live(storage, conversation_id)
        return await storage.conversations.replace(record, batches=record.batches + 1)

    record = await _retried(reserve, conversation_id)
    await add_items(storage, conversation_id, record.batches, items)
    return items


async def delete(storage: Storage, conversation_id: str) -> None:
    """Delete the conversation and what it holds; :class:`ConversationMissing` if it is unknown or already
    deleted (after finishing a deletion that was interrupted). A turn still running refuses the deletion
    (409 ``response_in_progress``, before anything is changed): cancel it first."""
    try:
        validate_id(conversation_id, prefix=CONVERSATION_PREFIX)
        record = await storage.conversations.get(conversation_id)
    except (InvalidId, NotFound):
        raise ConversationMissing(conversation_id) from None
    if not record.deleted:
        chain = await storage.chains.get(conversation_id)
        if any([await turns.active(storage, turn) for turn in chain.open_turns]):
            raise Refused(errors.CODE_STILL_RUNNING, "Cannot delete a conversation while one of its responses "
                          "is still running; cancel it first.", param="conversation_id")

        async def mark() -> ConversationRecord:
            return await storage.conversations.replace(await live(storage, conversation_id), deleted=True)

        record = await _retried(mark, conversation_id)
        await _remove(storage, record)
        return
    await _remove(storage, record)
    raise ConversationMissing(conversation_id)


async def _remove(storage: Storage, record: ConversationRecord) -> None:
    cid = record.conversation_id
    for turn in await turn_ids(storage, cid):
        try:
            await lifecycle.delete(storage, turn)
        except NotStored:
            continue  # deleted already
    for number in range(1, record.batches + 1):
        await storage.items.delete_all(segment_id(cid, number))
    await storage.chains.delete(cid)
    await storage.conversations.delete(cid)


async def _retried(attempt: Callable[[], Awaitable[ConversationRecord]], conversation_id: str) -> ConversationRecord:
    try:
        return await retry_cas(attempt, CAS_ATTEMPTS, Contended)
    except NotFound:  # the row went away between the read and the write
        raise ConversationMissing(conversation_id) from None
