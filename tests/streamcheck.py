"""Two independent readers of a stored event stream, used to check recovery streams.

* :func:`helper_final` feeds the events to the ``openai`` client's own stream accumulator (the state
  behind ``client.responses.stream()``) and returns its final response: it raises on anything the helper
  refuses (a re-opened output index, an item left open at ``response.completed``).
* :func:`rebuild_items` is what a raw SSE consumer following the documented recovery rule does.
"""

from __future__ import annotations

from typing import Any

from openai import omit
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

_ADAPTER: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)


def helper_final(events: list[dict[str, Any]]) -> Any:
    """The final response as ``client.responses.stream().get_final_response()`` would return it."""
    state: ResponseStreamState[Any] = ResponseStreamState(input_tools=omit, text_format=omit)
    final = None
    for event in events:
        for produced in state.handle_event(_ADAPTER.validate_python(event)):
            if produced.type == "response.completed":
                final = produced.response
    if final is None:
        raise AssertionError("the stream has no response.completed")
    return final


def rebuild_items(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The recovery rule for raw consumers: build items from the events; on a ``response.in_progress``
    after output started, replace everything by the snapshot it carries; order items by output_index.
    Every ``output_item.done`` must match what its deltas built."""
    items: dict[int, dict[str, Any]] = {}
    for event in events:
        kind = event["type"]
        if kind == "response.in_progress":
            items = {i: {"id": o["id"], "type": o["type"], "text": _text(o)}
                     for i, o in enumerate(event["response"]["output"])}
        elif kind == "response.output_item.added":
            items[event["output_index"]] = {"id": event["item"]["id"], "type": event["item"]["type"],
                                            "text": _text(event["item"])}
        elif kind in ("response.output_text.delta", "response.function_call_arguments.delta"):
            items[event["output_index"]]["text"] += event["delta"]
        elif kind == "response.output_item.done":
            built = items[event["output_index"]]
            assert built["id"] == event["item"]["id"]
            assert built["text"] == _text(event["item"]), "done does not match the deltas"
    return [items[i] for i in sorted(items)]


def _text(item: dict[str, Any]) -> str:
    if item.get("type") == "function_call":
        return str(item.get("arguments", ""))
    if item.get("type") != "message":
        return ""
    return "".join(p.get("text", "") for p in item.get("content") or [])
