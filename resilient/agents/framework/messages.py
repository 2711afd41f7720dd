"""The conversation an Agent Framework agent is run with, built from a step's context.

Three sources, in this order of preference: the state the previous step of this turn saved (the run goes on
from there); the state the chain's previous turn ended with, plus this turn's input; or, with no saved
state (the chain's earlier turns ran another agent), the chain's history as plain messages, plus this
turn's input.
"""

from __future__ import annotations

import json
from typing import Any

from agent_framework import Content, Message

from resilient.agents.base import PhaseContext, item_text, output_text

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
        messages = [m for m in (_history_message(item) for item in request.history) if m is not None]
    if request.instructions:
        messages.insert(0, Message("system", [request.instructions]))
    pending = (state or {}).get("pending_approval")
    for item in request.input_items:
        kind = item.get("type", "message")
        if kind == "message":
            found = _history_message(item)
            if found is not None:
                messages.append(found)
        elif kind == "function_call_output":
            result = output_text(item.get("output"))
            messages.append(Message("tool", [Content.from_function_result(str(item.get("call_id")), result=result)]))
    if context.approval is not None and pending:
        messages.append(_approval_answer(pending, context.approval.approved))
    return messages


def _approval_answer(pending: dict[str, Any], approved: bool) -> Message:
    request = Content.from_dict(pending)
    return Message("user", [request.to_function_approval_response(approved)])


def _history_message(item: dict[str, Any]) -> Message | None:
    """A stored message item as an Agent Framework message (text only); None for other items."""
    if item.get("type", "message") != "message":
        return None
    role = str(item.get("role") or "user")
    if role == "developer":
        role = "system"
    text = item_text(item)
    return Message(role, [text]) if text else None


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
