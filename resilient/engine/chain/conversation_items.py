"""A conversation's items, in order: what ``GET /conversations/{id}/items`` lists and what a turn's agent
gets as its history.

The items are never copied: they are read from where they are stored. A turn's input and output items
are the turn's own (walking the chain from its newest turn back through each turn's ``previous_turn``);
items added through the API are stored as numbered batches (an item partition per batch), each recorded
with the chain's newest turn when it was added, so it is listed (and given to agents) right after that
turn's items, or before every turn when it was added before the first. Items deleted from the
conversation are hidden (a mark per item id), not removed from the response that holds them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from resilient.ids import validate_id
from resilient.storage.errors import NotFound
from resilient.storage.ports import ConversationEdits, ItemPage, JsonDict

if TYPE_CHECKING:
    from resilient.storage.factory import Storage

_PAGE = 100


class ItemMissing(Exception):
    """No item by that id in the conversation (unknown, malformed, hidden, or another conversation's)."""


def segment_id(conversation_id: str, number: int) -> str:
    """The item partition of a conversation's batch ``number`` (never a response id: no ``resp_``)."""
    return validate_id(f"{conversation_id}-{number:06d}", param="conversation_id")


async def add_items(storage: Storage, conversation_id: str, number: int, items: Sequence[JsonDict]) -> None:
    """Store batch ``number`` after the chain's newest turn. The batch row is written last: until it
    exists the items are invisible, so a crash in between shows nothing half-added."""
    latest = (await storage.chains.get(conversation_id)).latest_response_id
    await storage.items.put_input_items(segment_id(conversation_id, number), items)
    await storage.conversations.add_batch(conversation_id, number, latest)


async def stored_inputs(storage: Storage, partition: str) -> list[JsonDict]:
    """Every input item of a response (or batch) partition, in order."""
    out: list[JsonDict] = []
    after: str | None = None
    while True:
        page = await storage.items.list_input_items(partition, after=after, limit=_PAGE, order="asc")
        out += page.data
        if not page.has_more or not page.data:
            return out
        after = str(page.data[-1]["id"])


async def turn_ids(storage: Storage, conversation_id: str) -> list[str]:
    """The conversation's turns, oldest first (the walk stops at a turn whose row is gone)."""
    found: list[str] = []
    turn = (await storage.chains.get(conversation_id)).latest_response_id
    while turn and turn not in found:
        try:
            record = await storage.responses.get(turn)
        except NotFound:
            break
        found.append(turn)
        turn = record.doc.get("previous_turn") or None
    found.reverse()
    return found


async def all_items(storage: Storage, conversation_id: str) -> list[JsonDict]:
    """Every item of the conversation, oldest first. Batches recorded after a turn the walk did not reach
    (its response was deleted) come last rather than not at all."""
    edits = await storage.conversations.edits(conversation_id)
    turns = await turn_ids(storage, conversation_id)
    held = [(turn, await stored_inputs(storage, turn) + await storage.items.list_output_items(turn))
            for turn in turns]
    items = await weave(storage, conversation_id, edits, held, reached_start=True)
    placed = {None, *turns}
    for number, after in edits.batches:
        if after not in placed:
            items += await _batch(storage, conversation_id, number, edits)
    return items


async def history(storage: Storage, conversation_id: str, turns: Sequence[tuple[str, Sequence[JsonDict]]], *,
                  reached_start: bool) -> list[JsonDict]:
    """A turn's history in its conversation: the earlier turns' items (``turns``, oldest first) with the
    batches added after each, and those added before the first turn when the walk reached it."""
    edits = await storage.conversations.edits(conversation_id)
    return await weave(storage, conversation_id, edits, turns, reached_start=reached_start)


async def weave(storage: Storage, conversation_id: str, edits: ConversationEdits,
                turns: Sequence[tuple[str, Sequence[JsonDict]]], *, reached_start: bool) -> list[JsonDict]:
    after: dict[str | None, list[int]] = {}
    for number, turn in edits.batches:
        after.setdefault(turn, []).append(number)
    out: list[JsonDict] = []
    for number in after.get(None, []) if reached_start else []:
        out += await _batch(storage, conversation_id, number, edits)
    for turn, items in turns:
        out += [item for item in items if item.get("id") not in edits.hidden]
        for number in after.get(turn, []):
            out += await _batch(storage, conversation_id, number, edits)
    return out


async def _batch(storage: Storage, conversation_id: str, number: int, edits: ConversationEdits) -> list[JsonDict]:
    items = await stored_inputs(storage, segment_id(conversation_id, number))
    return [item for item in items if item.get("id") not in edits.hidden]


def page(items: list[JsonDict], *, after: str | None, limit: int, order: Literal["asc", "desc"]) -> ItemPage:
    """One page in ``order`` after the item ``after`` (exclusive); :class:`ItemMissing` when ``after`` names
    no item of the conversation."""
    ordered = items if order == "asc" else list(reversed(items))
    if after is not None:
        at = next((i for i, item in enumerate(ordered) if item.get("id") == after), None)
        if at is None:
            raise ItemMissing(after)
        ordered = ordered[at + 1:]
    return ItemPage(data=ordered[:limit], has_more=len(ordered) > limit)


async def find(storage: Storage, conversation_id: str, item_id: str) -> JsonDict:
    """The item ``item_id`` of the conversation, or :class:`ItemMissing`."""
    try:
        validate_id(item_id, param="item_id")
    except ValueError:
        raise ItemMissing(item_id) from None
    for item in await all_items(storage, conversation_id):
        if item.get("id") == item_id:
            return item
    raise ItemMissing(item_id)


async def hide(storage: Storage, conversation_id: str, item_id: str) -> None:
    """Delete the item from the conversation (it stays in the response that holds it)."""
    await find(storage, conversation_id, item_id)
    await storage.conversations.hide_item(conversation_id, item_id)
