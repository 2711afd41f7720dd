"""``item_reference`` input items: which stored items a reference may name, and finding them.

The ids of the items this service stores carry their response's id (``resilient.ids.item_id``), so a
reference names the response that holds its item: :func:`find_referenced` reads that response's row and
the wanted items (one partition query, ``ItemStore.find_items``), once per response however many of its
items the input references, up to ``MAX_READS_AT_ONCE`` responses at once. No index of item ids is
written, so a checkpoint costs nothing more. What a reference may reach:

- on a turn that continues a chain (``previous_response_id`` or ``conversation``), an item of that chain:
  the named response's row must carry the turn's ``chain_id`` (a reference never reaches another chain);
- on a turn without one (a stateless turn, as the Vercel AI SDK sends with ``store: true``: the history
  resent as references to earlier output, without ``previous_response_id``), any item of a response that
  was stored and is not deleted;
- never an item of a ``store: false`` response (its items are deleted after it ends).

An id of another shape (a client's own, an item stored before item ids carried their response) is looked
for along the chain as before: the walk back from the newest earlier turn, at most ``MAX_TURNS_SEARCHED``
turns, stopping as soon as every id is found. A stateless turn has no chain, so such an id is not found.

The create stores the referenced item in the reference's place (``http/service.py``): the agent and the
input-items listing see the item, and a later read resolves nothing. Only inputs stored before that still
hold references: :func:`resolve_references` resolves those along the chain.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import TYPE_CHECKING

from resilient.engine.chain.lifecycle import is_stored
from resilient.ids import response_of_item
from resilient.storage.errors import NotFound
from resilient.storage.ports import JsonDict

if TYPE_CHECKING:
    from resilient.storage.factory import Storage

MAX_TURNS_SEARCHED = 50
MAX_READS_AT_ONCE = 16  # responses read at once: an input may name up to 2048 of them
REFERENCE = "item_reference"


def is_reference(item: JsonDict) -> bool:
    return item.get("type") == REFERENCE


async def find_referenced(storage: Storage, wanted: Iterable[str], *, chain_id: str | None,
                          previous_turn: str | None) -> dict[str, JsonDict]:
    """The items the ``wanted`` ids name that a turn on ``chain_id`` (None: a stateless turn) may reach,
    by id; ids not found (or not reachable) are absent from the answer."""
    missing = set(wanted)
    by_response: dict[str, set[str]] = {}
    for item_id in missing:
        holder = response_of_item(item_id)
        if holder is not None:
            by_response.setdefault(holder, set()).add(item_id)
    found: dict[str, JsonDict] = {}
    limit = asyncio.Semaphore(MAX_READS_AT_ONCE)

    async def read(holder: str, ids: set[str]) -> dict[str, JsonDict]:
        async with limit:
            return await _from_response(storage, holder, ids, chain_id)

    answers = await asyncio.gather(*(read(holder, ids) for holder, ids in by_response.items()))
    for answer in answers:
        found.update(answer)
    missing -= found.keys()
    if missing and previous_turn is not None:  # ids of another shape, or a client's copy on the chain
        found.update(await find_chain_items(storage, previous_turn, missing))
    return found


def in_place(items: list[JsonDict], referenced: dict[str, JsonDict]) -> list[JsonDict]:
    """The input to store: each ``item_reference`` replaced by the item it names (``referenced``, by id)."""
    if not referenced:
        return items
    return [referenced.get(str(item.get("id")), item) if is_reference(item) else item for item in items]


async def _from_response(storage: Storage, response_id: str, wanted: set[str],
                         chain_id: str | None) -> dict[str, JsonDict]:
    """The ``wanted`` items of one response, when the turn may reach that response's items at all."""
    try:
        record, items = await asyncio.gather(storage.responses.get(response_id),
                                             storage.items.find_items(response_id, wanted))
    except NotFound:
        return {}
    doc = record.doc
    if not is_stored(doc):
        return {}
    if chain_id is not None and doc.get("chain_id") != chain_id:
        return {}
    found: dict[str, JsonDict] = {}
    for item in items:
        item_id = item.get("id")
        if isinstance(item_id, str) and item_id in wanted and not is_reference(item):
            found.setdefault(item_id, item)
    return found


async def stored_input_items(storage: Storage, response_id: str) -> list[JsonDict]:
    """Every input item of a response as stored, in input order."""
    out: list[JsonDict] = []
    after: str | None = None
    while True:
        page = await storage.items.list_input_items(response_id, after=after, limit=100, order="asc")
        out += page.data
        if not page.has_more or not page.data:
            return out
        after = str(page.data[-1]["id"])


async def find_chain_items(storage: Storage, previous_turn: str | None, wanted: Iterable[str]) -> dict[str, JsonDict]:
    """The items with the ``wanted`` ids among the chain's turns from ``previous_turn`` back (the newest
    copy of each); ids not found are absent from the answer. A stored ``item_reference`` is never a match
    itself: its target lives further back, where the walk goes on."""
    missing = set(wanted)
    found: dict[str, JsonDict] = {}
    turn = previous_turn
    for _ in range(MAX_TURNS_SEARCHED):
        if turn is None or not missing:
            break
        try:
            record = await storage.responses.get(turn)
            items = await stored_input_items(storage, turn) + await storage.items.list_output_items(turn)
        except NotFound:
            break
        for item in items:
            item_id = item.get("id")
            if isinstance(item_id, str) and item_id in missing and not is_reference(item):
                found[item_id] = item
                missing.discard(item_id)
        earlier = record.doc.get("previous_turn") or record.doc.get("previous_response_id")
        turn = str(earlier) if earlier else None
    return found


async def resolve_references(storage: Storage, items: list[JsonDict], previous_turn: str | None) -> list[JsonDict]:
    """``items`` with each stored ``item_reference`` (an input stored before the create kept the item
    itself) replaced by the chain's item it names; one that cannot be found any more stays as it is."""
    wanted = [str(item["id"]) for item in items if is_reference(item)]
    if not wanted:
        return items
    found = await find_chain_items(storage, previous_turn, wanted)
    return [found.get(str(item["id"]), item) if is_reference(item) else item for item in items]
