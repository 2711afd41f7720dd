"""Conversation items as plain, JSON-ready dicts.

Items are stored and replayed verbatim, so they are built once here in the exact shape the client's
types expect: an assistant output item is a ``ResponseOutputMessage`` and a stored user turn is a
``ResponseInputMessageItem``. Content is text; besides messages there are function calls and their
outputs (``ResponseFunctionToolCall``, ``ResponseFunctionToolCallOutputItem``) and approval requests and
answers (``McpApprovalRequest``, ``McpApprovalResponse``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from resilient.protocol._strict import strict_validate

ItemStatus = Literal["completed", "in_progress", "incomplete"]
InputRole = Literal["user", "system", "developer"]
MessageRole = Literal["user", "system", "developer", "assistant"]

_ITEM_STATUSES: frozenset[str] = frozenset({"completed", "in_progress", "incomplete"})
_TEXT_PART_TYPES: frozenset[str] = frozenset({"input_text", "output_text"})


def output_text_part(text: str) -> dict[str, Any]:
    """An ``output_text`` content part. ``annotations`` is required by the client type; ``logprobs``
    is what the OpenAI API sends, so clients that read it find a list, not a missing key."""
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def input_text_part(text: str) -> dict[str, Any]:
    """An ``input_text`` content part (user, system and developer messages)."""
    return {"type": "input_text", "text": text}


def output_message(item_id: str, text: str, *, status: ItemStatus = "completed") -> dict[str, Any]:
    """An assistant message with one ``output_text`` part: the output item of one phase."""
    if status not in _ITEM_STATUSES:
        raise ValueError(f"invalid item status {status!r}")
    return {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": [output_text_part(text)],
    }


def input_message(item_id: str, role: InputRole, text: str) -> dict[str, Any]:
    """A stored input message as the input-items listing returns it (``ResponseInputMessageItem``)."""
    return {
        "id": item_id,
        "type": "message",
        "role": role,
        "status": "completed",
        "content": [input_text_part(text)],
    }


def function_call_item(
    item_id: str, call_id: str, name: str, arguments: str, *, status: ItemStatus = "completed"
) -> dict[str, Any]:
    """A ``function_call`` output item (``ResponseFunctionToolCall``)."""
    if status not in _ITEM_STATUSES:
        raise ValueError(f"invalid item status {status!r}")
    return {
        "id": item_id,
        "type": "function_call",
        "status": status,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    }


def reasoning_item(item_id: str, summary: Sequence[str], encrypted_content: str | None) -> dict[str, Any]:
    """A ``reasoning`` output item (``ResponseReasoningItem``): a model's summary texts and its encrypted
    reasoning, which a client sends back so the model can go on from it."""
    item: dict[str, Any] = {"id": item_id, "type": "reasoning", "status": "completed",
                            "summary": [{"type": "summary_text", "text": text} for text in summary]}
    if encrypted_content is not None:
        item["encrypted_content"] = encrypted_content
    return item


def approval_request_item(item_id: str, name: str, arguments: str, server_label: str) -> dict[str, Any]:
    """An ``mcp_approval_request`` output item: the turn waits for a person's answer."""
    return {
        "id": item_id,
        "type": "mcp_approval_request",
        "server_label": server_label,
        "name": name,
        "arguments": arguments,
    }


def mcp_call_item(item_id: str, name: str, arguments: str, server_label: str, output: str | None,
                  error: str | None) -> dict[str, Any]:
    """An ``mcp_call`` output item (``McpCall``): a tool the agent ran on the server, with its result.
    OpenAI's shape for a hosted tool call; ``error`` is the text of a failed call."""
    item: dict[str, Any] = {
        "id": item_id,
        "type": "mcp_call",
        "server_label": server_label,
        "name": name,
        "arguments": arguments,
        "output": output,
        "error": error,
        "status": "failed" if error is not None else "completed",
    }
    return item


def function_call_output_item(item_id: str, call_id: str, output: str | list[dict[str, Any]]) -> dict[str, Any]:
    """A stored ``function_call_output`` input item (``ResponseFunctionToolCallOutputItem``)."""
    return {
        "id": item_id,
        "type": "function_call_output",
        "call_id": call_id,
        "output": output if isinstance(output, str) else [dict(part) for part in output],
        "status": "completed",
    }


def approval_response_item(item_id: str, approval_request_id: str, approve: bool, reason: str | None) -> dict[str, Any]:
    """A stored ``mcp_approval_response`` input item (``McpApprovalResponse``)."""
    return {
        "id": item_id,
        "type": "mcp_approval_response",
        "approval_request_id": approval_request_id,
        "approve": approve,
        "reason": reason,
    }


def text_of(item: dict[str, Any]) -> str:
    """All text of a message item, parts concatenated; non-text parts contribute nothing.

    Accepts both stored items (content is a list of parts) and easy messages (content is a string).
    """
    content = item.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(
        part["text"]
        for part in content
        if isinstance(part, dict)
        and part.get("type") in _TEXT_PART_TYPES
        and isinstance(part.get("text"), str)
    )


def item_for_history(item: dict[str, Any]) -> dict[str, Any]:
    """Turn a stored input or output message into an input item for the model's history.

    The easy-message form (``{"type":"message","role","content": str}``) is used on purpose: it carries
    no item id, so a real model endpoint never tries to resolve our ``msg_`` ids, and it maps 1:1 to
    a chat-completions message as well. Partial (``incomplete``) assistant output is kept: a steered
    turn's partial answer is part of the chain's history.
    """
    if item.get("type", "message") != "message":
        raise ValueError(f"only message items can be history, got {item.get('type')!r}")
    role = item.get("role")
    if role not in ("user", "system", "developer", "assistant"):
        raise ValueError(f"invalid role {role!r}")
    return {"type": "message", "role": role, "content": text_of(item)}


def validate_output_item(item: dict[str, Any]) -> None:
    """Raise ValueError unless ``item`` is a strict ``ResponseOutputItem`` (response ``output``)."""
    from openai.types.responses import ResponseOutputItem

    strict_validate(ResponseOutputItem, item, what="output item")


def validate_stored_item(item: dict[str, Any]) -> None:
    """Raise ValueError unless ``item`` is a strict ``ResponseItem`` (the input-items listing)."""
    from openai.types.responses import ResponseItem

    strict_validate(ResponseItem, item, what="item")


def validate_history_item(item: dict[str, Any]) -> None:
    """Raise ValueError unless ``item`` is a valid ``EasyInputMessageParam`` for a model call."""
    from openai.types.responses import EasyInputMessageParam

    strict_validate(EasyInputMessageParam, item, what="history item")
