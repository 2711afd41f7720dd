"""Responses items as Chat Completions messages: what the sample agent's model path sends.

Each item kind keeps its own form where Chat Completions has one:

* a user message's ``input_image`` part becomes an ``image_url`` part (its ``detail`` kept), an image named
  by ``file_id`` and an ``input_file`` with ``file_data`` or ``file_id`` become a ``file`` part. Chat
  Completions has no part for a file by URL: an ``input_file`` with only ``file_url`` becomes a text part
  naming the URL. System and developer messages take text only in Chat Completions: their text is the
  ``system`` message, and their image and file parts follow it as a user message, so the model still sees them.
* an assistant message's ``output_text`` parts become its ``content``, its ``refusal`` parts its ``refusal``.
* ``function_call`` items become the assistant message's ``tool_calls`` and ``function_call_output`` items
  ``tool`` messages. A tool output's image and file parts (a ``tool`` message takes text only) follow the
  run of ``tool`` messages as one user message. A call no output answers anywhere in the chain is left out:
  Chat Completions rejects a ``tool_calls`` message that no ``tool`` message follows.
* ``mcp_call`` items (tools an agent ran on the server) and approval requests and answers become short
  assistant and user notes (``model_history``, shared with the Responses path).
* ``reasoning`` items are not sent: a Chat Completions model cannot take another call's reasoning.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from resilient.agents.base import TEXT_PART_TYPES, item_text, output_text
from resilient.agents.model_history import answered_calls, note

type ChatMessage = dict[str, Any]


def chat_messages(system: str, history: Sequence[dict[str, Any]], turn: Sequence[dict[str, Any]],
                  earlier_phases: Sequence[str]) -> list[ChatMessage]:
    """Model messages: the system prompt, the chain's history and this turn's input, then the texts of this
    turn's earlier phases."""
    items = [*history, *turn]
    answered = answered_calls(items)
    messages: list[ChatMessage] = [{"role": "system", "content": system}]
    held: list[dict[str, Any]] = []  # non-text parts of tool outputs, sent after the run of tool messages
    for item in items:
        kind = item.get("type", "message")
        if held and kind != "function_call_output":
            messages.append(_attachments(held))
            held = []
        if kind == "message":
            messages += _messages(item)
        elif kind == "function_call" and str(item.get("call_id")) in answered:
            _add_tool_call(messages, item)
        elif kind == "function_call_output":
            output = item.get("output")
            messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": output_text(output)})
            if isinstance(output, list):
                held += [p for p in (_user_part(part) for part in output) if p and p["type"] != "text"]
        elif (noted := note(item)) is not None:
            messages.append(noted)
    if held:
        messages.append(_attachments(held))
    for text in earlier_phases:
        messages.append({"role": "assistant", "content": text})
    return messages


def _messages(item: dict[str, Any]) -> list[ChatMessage]:
    role = str(item.get("role", "user"))
    content = item.get("content")
    if role == "assistant":
        message: ChatMessage = {"role": "assistant", "content": item_text(item)}
        refusal = "".join(str(p.get("refusal") or "") for p in content or []
                          if isinstance(p, dict) and p.get("type") == "refusal") if isinstance(content, list) else ""
        if refusal:
            message["refusal"] = refusal
            message["content"] = message["content"] or None
        return [message]
    if role != "user":  # system, developer: a system message takes text only; its other parts follow it
        attached = [p for p in (_user_part(part) for part in content if isinstance(part, dict)
                                and part.get("type") not in TEXT_PART_TYPES) if p] if isinstance(content, list) else []
        system: ChatMessage = {"role": "system", "content": item_text(item)}
        return [system, _attachments(attached, f"the {role} message above")] if attached else [system]
    if not isinstance(content, list):
        return [{"role": "user", "content": item_text(item)}]
    parts = [p for p in (_user_part(part) for part in content) if p]
    if all(p["type"] == "text" for p in parts):
        return [{"role": "user", "content": item_text(item)}]  # text only: the plain form every endpoint takes
    return [{"role": "user", "content": parts}]


def _user_part(part: object) -> dict[str, Any] | None:
    """One Responses content part as a Chat Completions user content part (None: nothing to send)."""
    if not isinstance(part, dict):
        return None
    kind = part.get("type")
    if kind in TEXT_PART_TYPES:
        return {"type": "text", "text": str(part.get("text") or "")}
    if kind == "input_image":
        if part.get("image_url"):
            image: dict[str, Any] = {"url": part["image_url"]}
            if part.get("detail") in ("low", "high", "auto"):
                image["detail"] = part["detail"]
            return {"type": "image_url", "image_url": image}
        return {"type": "file", "file": {"file_id": part["file_id"]}} if part.get("file_id") else None
    if kind == "input_file":
        file = {key: part[key] for key in ("file_data", "file_id", "filename") if part.get(key)}
        if file.get("file_data") or file.get("file_id"):
            return {"type": "file", "file": file}
        if part.get("file_url"):
            name = f" {part['filename']}" if part.get("filename") else ""
            return {"type": "text", "text": f"[file{name}: {part['file_url']}]"}
    return None


def _attachments(parts: list[dict[str, Any]], of: str = "the tool output above") -> ChatMessage:
    """A user message carrying the image and file parts of a message that takes text only (a tool output, a
    system or developer message), sent right after it."""
    return {"role": "user", "content": [{"type": "text", "text": f"(attachments of {of})"}, *parts]}


def _add_tool_call(messages: list[ChatMessage], item: dict[str, Any]) -> None:
    """Add a call to the assistant message just before it (one turn's text and calls are one message)."""
    call = {"id": item["call_id"], "type": "function",
            "function": {"name": item["name"], "arguments": item.get("arguments") or "{}"}}
    last = messages[-1]
    if last["role"] == "assistant" and "tool_call_id" not in last:
        last.setdefault("tool_calls", []).append(call)
    else:
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
