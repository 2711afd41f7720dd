"""The conversation an Agent Framework agent is run with, built from a step's context.

Three sources, in this order of preference: the state the previous step of this turn saved (the run goes on
from there); the state the chain's previous turn ended with, plus this turn's input; or, with no saved
state (the chain's earlier turns ran another agent), the chain's history, plus this turn's input.

Items become messages with Agent Framework contents of their own kind (images, files, function calls and
results, reasoning: see ``contents``). The items the model produced in a row (an assistant message, its
reasoning, its function calls) are one assistant message, as Agent Framework's own clients return them. In
the history, a function call that nothing answers (the client went on without running it) is left out: a
model API rejects a call without its result.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agent_framework import Content, Message

from resilient.agents.base import PhaseContext
from resilient.agents.framework.contents import assistant_contents, function_result, part_content

STATE_KIND = "agent-framework/messages"


def request_messages(context: PhaseContext) -> list[Message]:
    state = context.state if isinstance(context.state, dict) and context.state.get("kind") == STATE_KIND else None
    request = context.request
    if state is not None and state.get("turn") == request.response_id:
        messages = [Message.from_dict(m) for m in state.get("messages") or []]
        if context.approval is not None and state.get("pending_approval"):
            messages.append(_approval_answer(state["pending_approval"], context.approval.approved))
        return messages
    if state is not None:
        messages = [Message.from_dict(m) for m in state.get("messages") or []]
    else:
        answered = {str(i.get("call_id")) for i in (*request.history, *request.input_items)
                    if i.get("type") == "function_call_output"}
        messages = item_messages([i for i in request.history
                                  if i.get("type") != "function_call" or str(i.get("call_id")) in answered])
    if request.instructions:
        messages.insert(0, Message("system", [request.instructions]))
    pending = (state or {}).get("pending_approval")
    known = {c.call_id for m in messages for c in m.contents if c.type == "function_call"}
    messages += item_messages([i for i in request.input_items  # a call the saved conversation has, sent again
                               if i.get("type") != "function_call" or i.get("call_id") not in known])
    if context.approval is not None and pending:
        messages.append(_approval_answer(pending, context.approval.approved))
    return messages


def _approval_answer(pending: dict[str, Any], approved: bool) -> Message:
    request = Content.from_dict(pending)
    return Message("user", [request.to_function_approval_response(approved)])


def item_messages(items: Sequence[dict[str, Any]]) -> list[Message]:
    """Responses items as Agent Framework messages (items with nothing for a model are left out: approval
    steps, which the saved state carries, and item kinds Agent Framework has no content for)."""
    messages: list[Message] = []
    for item in items:
        kind = item.get("type", "message")
        if kind == "message":
            role = str(item.get("role") or "user")
            role = "system" if role == "developer" else role
            contents = _message_contents(item, role)
            if contents:
                _add(messages, role, contents)
        elif kind == "function_call_output":
            messages.append(Message("tool", [function_result(item)]))
        elif found := assistant_contents(item):
            _add(messages, "assistant", found)
    return messages


def _message_contents(item: dict[str, Any], role: str) -> list[Content]:
    content = item.get("content")
    if isinstance(content, str):
        return [Content.from_text(content)] if content else []
    parts = content if isinstance(content, list) else []
    return [c for c in (part_content(p, role) for p in parts) if c is not None and (c.type != "text" or c.text)]


def _add(messages: list[Message], role: str, contents: list[Content]) -> None:
    """Append ``contents`` as a message; an assistant's consecutive items join its last message."""
    if role == "assistant" and messages and messages[-1].role == "assistant":
        messages[-1].contents.extend(contents)
    else:
        messages.append(Message(role, contents))


def tool_result_text(result: Any) -> str:
    """A tool's result as the text of an ``mcp_call`` item's ``output``."""
    if result is None:
        return ""
    if isinstance(result, str):
        return result
    if isinstance(result, list):
        texts = [str(getattr(c, "text", "") or "") for c in result if getattr(c, "type", None) == "text"]
        if texts:
            return "".join(texts)
        return json.dumps([c.to_dict() if hasattr(c, "to_dict") else str(c) for c in result], default=str)
    if hasattr(result, "to_dict"):
        return json.dumps(result.to_dict(), default=str)
    return str(result)
