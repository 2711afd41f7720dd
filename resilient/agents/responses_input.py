"""Responses items as the ``input`` of a Responses API model call: what the sample agent's model path sends
with ``RESILIENT_MODEL_API=responses``.

The Responses API takes the very items a turn carries, so each keeps its own form:

* user, system and developer messages keep their ``input_text``, ``input_image`` and ``input_file`` parts
  (a system or developer message's image goes as it is, unlike on the Chat Completions path);
* an assistant message goes as its text; one with a refusal as an output message with its ``refusal`` part;
* ``function_call`` and ``function_call_output`` items go as they are (an output given as parts keeps
  its image and file parts);
* ``reasoning`` items go with their ``summary`` and ``encrypted_content``: the model goes on from its own
  earlier reasoning. The model is called with ``store: false``, so a reasoning item without
  ``encrypted_content`` names reasoning the model cannot look up and is left out; so is one that nothing
  it led to follows (an assistant message, a call that is sent, more reasoning), which the API rejects;
* what both paths do alike (a call nothing answers is left out, tool runs and approvals become notes) is in
  ``model_history``.

Items carry no ids (except reasoning, whose type requires one, and an output message with a refusal): the
model stores nothing of these calls, and an id would make it look one up.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from resilient.agents.base import TEXT_PART_TYPES, item_text
from resilient.agents.model_history import answered_calls, note

if TYPE_CHECKING:
    from openai.types.responses import ResponseInputContentParam, ResponseInputItemParam


def responses_input(items: Sequence[dict[str, Any]]) -> list[ResponseInputItemParam]:
    """The model's ``input`` for ``items`` (the chain's history, this turn's input, then this turn's
    earlier phases' output), in order."""
    answered = answered_calls(items)
    found: list[ResponseInputItemParam] = []
    for position, item in enumerate(items):
        kind = item.get("type", "message")
        converted: ResponseInputItemParam | None
        if kind == "message":
            converted = _message(item)
        elif kind == "function_call":
            converted = _call(item) if str(item.get("call_id")) in answered else None
        elif kind == "function_call_output":
            converted = _call_output(item)
        elif kind == "reasoning":
            converted = _reasoning(item) if _led_somewhere(items, position, answered) else None
        else:
            converted = cast("ResponseInputItemParam | None", note(item))
        if converted is not None:
            found.append(converted)
    return found


def _message(item: dict[str, Any]) -> ResponseInputItemParam:
    role = str(item.get("role", "user"))
    content = item.get("content")
    if role == "assistant":
        return _assistant(item)
    if not isinstance(content, list):
        return {"type": "message", "role": cast(Any, role), "content": item_text(item)}
    parts = [p for p in (input_part(part) for part in content) if p is not None]
    return {"type": "message", "role": cast(Any, role), "content": parts}


def _assistant(item: dict[str, Any]) -> ResponseInputItemParam:
    content = item.get("content")
    refusals = [str(p.get("refusal") or "") for p in content or []
                if isinstance(p, dict) and p.get("type") == "refusal"] if isinstance(content, list) else []
    if not refusals or not item.get("id"):
        return {"type": "message", "role": "assistant", "content": item_text(item)}
    parts: list[Any] = [{"type": "refusal", "refusal": text} for text in refusals]
    if text := item_text(item):
        parts.insert(0, {"type": "output_text", "text": text, "annotations": []})
    return {"type": "message", "role": "assistant", "id": str(item["id"]), "status": "completed",
            "content": parts}


def input_part(part: object) -> ResponseInputContentParam | None:
    """One content part as the Responses API takes it (None: not a part a model reads)."""
    if not isinstance(part, dict):
        return None
    kind = part.get("type")
    if kind in TEXT_PART_TYPES:
        return {"type": "input_text", "text": str(part.get("text") or "")}
    if kind == "input_image":
        image = {key: part[key] for key in ("image_url", "file_id") if part.get(key)}
        return cast("ResponseInputContentParam", {"type": "input_image", "detail": part.get("detail") or "auto",
                                                  **image})
    if kind == "input_file":
        file = {key: part[key] for key in ("file_data", "file_id", "file_url", "filename") if part.get(key)}
        return cast("ResponseInputContentParam", {"type": "input_file", **file})
    return None


def _call(item: dict[str, Any]) -> ResponseInputItemParam:
    return {"type": "function_call", "call_id": str(item["call_id"]), "name": str(item["name"]),
            "arguments": str(item.get("arguments") or "{}")}


def _call_output(item: dict[str, Any]) -> ResponseInputItemParam:
    output = item.get("output")
    if isinstance(output, list):
        parts = [p for p in (input_part(part) for part in output) if p is not None]
        return {"type": "function_call_output", "call_id": str(item["call_id"]), "output": cast(Any, parts)}
    return {"type": "function_call_output", "call_id": str(item["call_id"]),
            "output": "" if output is None else str(output)}


def _led_somewhere(items: Sequence[dict[str, Any]], position: int, answered: set[str]) -> bool:
    """Whether the reasoning item at ``position`` is followed by what it led to (the model's answer or call,
    or more of its reasoning): the Responses API rejects a reasoning item sent without its following item,
    as when a phase was stopped (a cancel, a steer) while the model still reasoned."""
    following = items[position + 1] if position + 1 < len(items) else None
    if following is None:
        return False
    kind = following.get("type", "message")
    if kind == "function_call":
        return str(following.get("call_id")) in answered
    return kind == "reasoning" or (kind == "message" and following.get("role") == "assistant")


def _reasoning(item: dict[str, Any]) -> ResponseInputItemParam | None:
    if not item.get("encrypted_content"):
        return None
    summary = [{"type": "summary_text", "text": str(s.get("text") or "")}
               for s in item.get("summary") or [] if isinstance(s, dict)]
    found: dict[str, Any] = {"type": "reasoning", "id": str(item.get("id") or "rs_"), "summary": summary,
                             "encrypted_content": str(item["encrypted_content"])}
    content = [{"type": "reasoning_text", "text": str(c.get("text") or "")}
               for c in item.get("content") or [] if isinstance(c, dict)]
    if content:
        found["content"] = content
    return cast("ResponseInputItemParam", found)
