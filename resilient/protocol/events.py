"""Stream event builders.

Builders return dicts WITHOUT ``sequence_number``: only the event-log writer knows the next number
(it is assigned at append time, under the log's write fence), so no builder can get it wrong.

Nested objects (the response snapshot, the item, the part) are deep-copied into the event: an event
is an immutable record of one moment, and the caller keeps mutating its own response and items.

One phase is one assistant message at ``output_index``. Its events follow the OpenAI order
(``phase_opening_events``, any number of ``output_text_delta``, ``phase_closing_events``). The item in
``output_item.added`` has ``content: []`` on purpose: the client's stream accumulator appends the part
from ``content_part.added``, so a pre-filled part would be counted twice.
"""

from __future__ import annotations

import copy
import functools
import typing
from typing import TYPE_CHECKING, Any

from resilient.protocol._strict import strict_validate
from resilient.protocol.items import ItemStatus, output_message, output_text_part, text_of

RESPONSE_CREATED = "response.created"
RESPONSE_QUEUED = "response.queued"
RESPONSE_IN_PROGRESS = "response.in_progress"
RESPONSE_COMPLETED = "response.completed"
RESPONSE_FAILED = "response.failed"
RESPONSE_INCOMPLETE = "response.incomplete"
OUTPUT_ITEM_ADDED = "response.output_item.added"
OUTPUT_ITEM_DONE = "response.output_item.done"
CONTENT_PART_ADDED = "response.content_part.added"
CONTENT_PART_DONE = "response.content_part.done"
OUTPUT_TEXT_DELTA = "response.output_text.delta"
OUTPUT_TEXT_DONE = "response.output_text.done"
FUNCTION_CALL_ARGUMENTS_DELTA = "response.function_call_arguments.delta"
FUNCTION_CALL_ARGUMENTS_DONE = "response.function_call_arguments.done"

# Exactly one of these ends every run. There is no ``response.cancelled`` in the client library: a
# cancelled run ends with ``response.failed`` whose ``response.status`` is ``cancelled``.
TERMINAL_EVENT_TYPES: frozenset[str] = frozenset({RESPONSE_COMPLETED, RESPONSE_FAILED, RESPONSE_INCOMPLETE})

# Which response statuses each terminal event may carry; a mismatch is an engine bug, caught here.
_TERMINAL_STATUS: dict[str, frozenset[str]] = {
    RESPONSE_COMPLETED: frozenset({"completed"}),
    RESPONSE_FAILED: frozenset({"failed", "cancelled"}),
    RESPONSE_INCOMPLETE: frozenset({"incomplete"}),
}


def _lifecycle(event_type: str, response: dict[str, Any]) -> dict[str, Any]:
    allowed = _TERMINAL_STATUS.get(event_type)
    if allowed is not None and response.get("status") not in allowed:
        raise ValueError(f"{event_type} cannot carry a response with status {response.get('status')!r}")
    return {"type": event_type, "response": copy.deepcopy(response)}


def response_created(response: dict[str, Any]) -> dict[str, Any]:
    """First event of every run (status ``queued`` or ``in_progress``)."""
    return _lifecycle(RESPONSE_CREATED, response)


def response_queued(response: dict[str, Any]) -> dict[str, Any]:
    """The run waits for its chain's lock."""
    return _lifecycle(RESPONSE_QUEUED, response)


def response_in_progress(response: dict[str, Any]) -> dict[str, Any]:
    """The run started, or (R4) restarted from its last checkpoint after a crash."""
    return _lifecycle(RESPONSE_IN_PROGRESS, response)


def response_completed(response: dict[str, Any]) -> dict[str, Any]:
    """Terminal: status ``completed`` (also a steered turn that stopped early)."""
    return _lifecycle(RESPONSE_COMPLETED, response)


def response_failed(response: dict[str, Any]) -> dict[str, Any]:
    """Terminal: status ``failed``, or ``cancelled`` (the client has no ``response.cancelled`` event)."""
    return _lifecycle(RESPONSE_FAILED, response)


def response_incomplete(response: dict[str, Any]) -> dict[str, Any]:
    """Terminal: status ``incomplete`` with ``incomplete_details``."""
    return _lifecycle(RESPONSE_INCOMPLETE, response)


def output_item_added(output_index: int, item: dict[str, Any]) -> dict[str, Any]:
    return {"type": OUTPUT_ITEM_ADDED, "output_index": output_index, "item": copy.deepcopy(item)}


def output_item_done(output_index: int, item: dict[str, Any]) -> dict[str, Any]:
    return {"type": OUTPUT_ITEM_DONE, "output_index": output_index, "item": copy.deepcopy(item)}


def content_part_added(
    item_id: str, output_index: int, content_index: int, part: dict[str, Any]
) -> dict[str, Any]:
    return {
        "type": CONTENT_PART_ADDED,
        "item_id": item_id,
        "output_index": output_index,
        "content_index": content_index,
        "part": copy.deepcopy(part),
    }


def content_part_done(
    item_id: str, output_index: int, content_index: int, part: dict[str, Any]
) -> dict[str, Any]:
    return {
        "type": CONTENT_PART_DONE,
        "item_id": item_id,
        "output_index": output_index,
        "content_index": content_index,
        "part": copy.deepcopy(part),
    }


def output_text_delta(item_id: str, output_index: int, content_index: int, delta: str) -> dict[str, Any]:
    """A text chunk. ``logprobs`` is required by the client type. ``obfuscation`` is not sent: the
    installed client type does not declare it and ``include_obfuscation`` is accepted and ignored."""
    return {
        "type": OUTPUT_TEXT_DELTA,
        "item_id": item_id,
        "output_index": output_index,
        "content_index": content_index,
        "delta": delta,
        "logprobs": [],
    }


def output_text_done(item_id: str, output_index: int, content_index: int, text: str) -> dict[str, Any]:
    return {
        "type": OUTPUT_TEXT_DONE,
        "item_id": item_id,
        "output_index": output_index,
        "content_index": content_index,
        "text": text,
        "logprobs": [],
    }


def function_call_arguments_delta(item_id: str, output_index: int, delta: str) -> dict[str, Any]:
    return {"type": FUNCTION_CALL_ARGUMENTS_DELTA, "item_id": item_id, "output_index": output_index, "delta": delta}


def function_call_arguments_done(item_id: str, output_index: int, arguments: str) -> dict[str, Any]:
    return {
        "type": FUNCTION_CALL_ARGUMENTS_DONE,
        "item_id": item_id,
        "output_index": output_index,
        "arguments": arguments,
    }


def item_opening_events(output_index: int, item: dict[str, Any]) -> list[dict[str, Any]]:
    """The events that open ``item`` (its final form, or its in-progress form) at ``output_index``.

    A message opens empty (``content: []``, then an empty ``output_text`` part); a function call opens
    with empty ``arguments`` (they follow as deltas); an approval request and a reasoning item open complete.
    """
    kind = item.get("type")
    if kind == "message":
        return phase_opening_events(output_index, str(item["id"]))
    if kind == "function_call":
        opened = {**item, "arguments": "", "status": "in_progress"}
        return [output_item_added(output_index, opened)]
    if kind in ("mcp_approval_request", "reasoning"):
        return [output_item_added(output_index, item)]
    if kind == "mcp_call":
        return [output_item_added(output_index, {**item, "output": None, "error": None, "status": "in_progress"})]
    raise ValueError(f"cannot stream an item of type {kind!r}")


def item_closing_events(output_index: int, item: dict[str, Any]) -> list[dict[str, Any]]:
    """The events that close ``item`` (in its final form) at ``output_index``."""
    kind = item.get("type")
    if kind == "message":
        return phase_closing_events(output_index, str(item["id"]), text_of(item), item.get("status", "completed"))
    if kind == "function_call":
        return [
            function_call_arguments_done(str(item["id"]), output_index, str(item["arguments"])),
            output_item_done(output_index, item),
        ]
    if kind in ("mcp_approval_request", "mcp_call", "reasoning"):
        return [output_item_done(output_index, item)]
    raise ValueError(f"cannot stream an item of type {kind!r}")


def phase_opening_events(output_index: int, item_id: str) -> list[dict[str, Any]]:
    """``output_item.added`` (in_progress, no content yet) then ``content_part.added`` (empty text)."""
    item = output_message(item_id, "", status="in_progress")
    item["content"] = []
    return [
        output_item_added(output_index, item),
        content_part_added(item_id, output_index, 0, output_text_part("")),
    ]


def phase_closing_events(
    output_index: int, item_id: str, text: str, status: ItemStatus
) -> list[dict[str, Any]]:
    """``output_text.done``, ``content_part.done``, ``output_item.done`` carrying the final item.

    ``status`` is ``completed`` normally and ``incomplete`` for a phase cut short (steering, cancel).
    """
    return [
        output_text_done(item_id, output_index, 0, text),
        content_part_done(item_id, output_index, 0, output_text_part(text)),
        output_item_done(output_index, output_message(item_id, text, status=status)),
    ]


if TYPE_CHECKING:
    from pydantic import BaseModel


@functools.cache
def event_classes() -> dict[str, type[BaseModel]]:
    """``type`` literal → client event class, read from the ``ResponseStreamEvent`` union itself."""
    from openai.types.responses import ResponseStreamEvent

    union = typing.get_args(ResponseStreamEvent)[0]
    classes: dict[str, type[BaseModel]] = {}
    for cls in typing.get_args(union):
        annotation = cls.model_fields["type"].annotation
        for literal in typing.get_args(annotation):
            classes[literal] = cls
    return classes


def validate_event(event: dict[str, Any]) -> None:
    """Raise ValueError unless ``event`` (with its ``sequence_number``) is a strict client event.

    Strict: the union resolves to exactly the class named by ``type``, every required field is present
    with the right type, and no key would be silently dropped as an unknown extra.
    """
    event_type = event.get("type")
    expected = event_classes().get(event_type) if isinstance(event_type, str) else None
    if expected is None:
        raise ValueError(f"unknown event type {event_type!r}")
    from openai.types.responses import ResponseStreamEvent

    strict_validate(expected, event, what=f"event {event_type}")
    resolved = strict_validate(ResponseStreamEvent, event, what=f"event {event_type}")
    if type(resolved) is not expected:
        raise ValueError(f"event {event_type} resolved to {type(resolved).__name__}, not {expected.__name__}")
