"""What both of the sample agent's model paths (Chat Completions, ``chat_input``; Responses,
``responses_input``) decide the same way about a turn's items.

* A ``function_call`` that no ``function_call_output`` answers anywhere in the chain is left out: both APIs
  reject a call sent without its result.
* Tools the agent ran on the server (``mcp_call``) and approval requests and answers become short assistant
  and user notes: the model did not call those tools itself, so it cannot take them as its own calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def answered_calls(items: Sequence[dict[str, Any]]) -> set[str]:
    """The ``call_id`` of every call that some ``function_call_output`` of ``items`` answers."""
    return {str(i.get("call_id")) for i in items if i.get("type") == "function_call_output"}


def note(item: dict[str, Any]) -> dict[str, Any] | None:
    """A short ``{"role", "content"}`` note for a tool run or an approval step (a message both APIs take);
    None for an item no note stands for."""
    kind = item.get("type")
    if kind == "mcp_call":
        result = f"error {item['error']}" if item.get("error") else f"returned {item.get('output') or ''}"
        return {"role": "assistant", "content": f"(ran {item.get('server_label')}/{item.get('name')} with "
                                                f"{item.get('arguments')}: {result})"}
    if kind == "mcp_approval_request":
        return {"role": "assistant", "content": f"(asked for approval to run {item.get('name')} "
                                                f"with {item.get('arguments')})"}
    if kind == "mcp_approval_response":
        verdict = "approved" if item.get("approve") else "denied"
        reason = f": {item['reason']}" if item.get("reason") else ""
        return {"role": "user", "content": f"({verdict}{reason})"}
    return None
