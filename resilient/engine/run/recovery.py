"""What a recovered phase must append before it runs again (rule R4 and the recovery rule).

A phase attempt that stopped without its checkpoint (a crash, a zombie that lost the log, a transient
model error) may have left an item open in the stream. The next attempt therefore:

1. closes that item: its ``output_item.done`` (after ``output_text.done``/``content_part.done``, or
   ``function_call_arguments.done``) carries the text streamed so far and ``status: "incomplete"``;
2. appends ``response.in_progress`` carrying the response as of the last checkpoint: a client drops
   every item that is not in that snapshot;
3. streams the phase again as *new* items at output indexes after every index the stream has used.

Why never reopen an index: stream consumers such as the ``openai`` client's ``responses.stream()``
helper treat ``output_item.added`` for an index they have seen as an error ("Duplicate response output
index"), and a consumer that tracks open items needs every item it saw opened to be closed. So the
stream's ``output_index`` values are increasing and unique, and after a recovery they run ahead of the
positions in ``response.output``; the final ``response.completed`` (and ``GET``) carry the output.
"""

from __future__ import annotations

from dataclasses import dataclass

from resilient.protocol import events as ev
from resilient.protocol.items import function_call_item, output_message
from resilient.storage.ports import EventLog, JsonDict, StoredEvent

_FIRST_WINDOW = 256


@dataclass(frozen=True)
class Tail:
    """The end of a log as the next attempt needs it."""

    last_index: int  # highest output_index the stream used (-1: none)
    closing: list[JsonDict]  # events closing the item left open (empty when none is open)


def boundary(last_event: JsonDict | None, previous: list[JsonDict]) -> bool:
    """True when the log ends exactly where the next phase starts: right after the plan's
    ``response.in_progress``, or right after the closing event of the last checkpointed item."""
    if last_event is None:
        return False
    kind = last_event.get("type")
    if kind == ev.RESPONSE_IN_PROGRESS:
        return not previous
    if kind != ev.OUTPUT_ITEM_DONE or not previous:
        return False
    return (last_event.get("item") or {}).get("id") == previous[-1].get("id")


def next_index_at_boundary(last_event: JsonDict | None) -> int:
    """The first stream index of a phase that starts at a boundary (indexes only grow in a log)."""
    index = (last_event or {}).get("output_index")
    return int(index) + 1 if isinstance(index, int) else 0


async def scan_tail(events: EventLog, response_id: str, next_sequence_number: int) -> Tail:
    """Read the end of the log (a growing window, so a long log is not read whole) and find the
    highest stream index and the item left open."""
    window = _FIRST_WINDOW
    while True:
        after = max(-1, next_sequence_number - 1 - window)
        found = _walk([stored.json() for stored in await _read_all(events, response_id, after)])
        if found is not None or after == -1:
            return found or Tail(-1, [])
        window *= 4


async def _read_all(events: EventLog, response_id: str, after: int) -> list[StoredEvent]:
    result = await events.read_after(response_id, after)
    stored = list(result.events)
    while True:
        more = await events.read_more(response_id, result.cursor)
        if not more.events:
            return stored
        stored += more.events
        result = more


def _walk(window: list[JsonDict]) -> Tail | None:
    """The tail as seen in ``window``, or None when the window starts too late to tell."""
    last_index = -1
    open_item: JsonDict | None = None
    pieces: list[str] = []
    last_kind = None
    for event in window:
        index = event.get("output_index")
        if not isinstance(index, int):
            continue
        last_index, last_kind = index, event.get("type")
        if last_kind == ev.OUTPUT_ITEM_ADDED:
            open_item, pieces = dict(event["item"]), []
            open_item["_index"] = index
        elif last_kind == ev.OUTPUT_ITEM_DONE:
            open_item = None
        elif open_item is not None and open_item["_index"] == index and last_kind in (
            ev.OUTPUT_TEXT_DELTA, ev.FUNCTION_CALL_ARGUMENTS_DELTA):
            pieces.append(str(event.get("delta", "")))
    if last_index == -1:
        return None
    if last_kind == ev.OUTPUT_ITEM_DONE:
        return Tail(last_index, [])
    if open_item is None or open_item["_index"] != last_index:
        return None  # the open item was opened before the window
    return Tail(last_index, ev.item_closing_events(last_index, _abandoned(open_item, "".join(pieces))))


def _abandoned(opened: JsonDict, streamed: str) -> JsonDict:
    """The final, ``incomplete`` form of an item left open, with what was streamed of it."""
    if opened.get("type") == "function_call":
        return function_call_item(str(opened["id"]), str(opened["call_id"]), str(opened["name"]), streamed,
                                  status="incomplete")
    return output_message(str(opened["id"]), streamed, status="incomplete")
