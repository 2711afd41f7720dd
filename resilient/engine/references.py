"""``item_reference`` input items: finding the items they name on a response's chain.

An ``item_reference`` names an item of an earlier turn of the chain (an input or output item of a
response the chain reaches through ``previous_turn``). The create checks that each one names such an item
(``resilient/http/continuation.py``: a reference to nothing is a 400, and a reference cannot reach another
chain's items), and the agent's request carries the referenced item in the reference's place
(``agent_request.all_input_items``), while the input-items listing shows the reference as sent.

The search walks the chain back from the newest earlier turn, at most ``MAX_TURNS_SEARCHED`` turns, and
stops as soon as every id is found. A stored ``item_reference`` is never a match itself: its target lives
further back, where the walk goes on.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from resilient.storage.errors import NotFound
from resilient.storage.ports import JsonDict

if TYPE_CHECKING:
    from resilient.storage.factory import Storage

MAX_TURNS_SEARCHED = 50
REFERENCE = "item_reference"


def is_reference(item: JsonDict) -> bool:
    return item.get("type") == REFERENCE


async def stored_input_items(storage: Storage, response_id: str) -> list[JsonDict]:
    """Every input item of a response as stored (references unresolved), in input order."""
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
    copy of each); ids not found are absent from the answer."""
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
    """``items`` with each ``item_reference`` replaced by the item it names (one that cannot be found any
    more, its turn deleted since, stays as it is)."""
    wanted = [str(item["id"]) for item in items if is_reference(item)]
    if not wanted:
        return items
    found = await find_chain_items(storage, previous_turn, wanted)
    return [found.get(str(item["id"]), item) if is_reference(item) else item for item in items]
