"""What a workflow's events say to the client: their text, and the token counts its agents' models reported.

Text comes from ``output`` and ``intermediate`` events (``data`` is the framework's older name for the
latter): strings, an agent executor's streamed ``AgentResponseUpdate`` s, whole ``AgentResponse`` s.

Usage: a streaming agent executor's updates carry ``usage`` contents; a non-streaming one yields an
``AgentResponse`` with ``usage_details``. Each is one model call's report, and the engine adds them up
into the response's ``usage`` (``null`` when no model reported any).
"""

from __future__ import annotations

from typing import Any

from resilient.agents.base import Usage

TEXT_EVENTS = ("output", "intermediate", "data")


def text_of(data: Any) -> str:
    """The text an event's data shows the client ("" for data that is not text)."""
    if data is None:
        return ""
    if isinstance(data, str):
        return data
    text = getattr(data, "text", None)
    if isinstance(text, str):
        return text
    if isinstance(data, list):
        return "".join(text_of(d) for d in data)
    return ""


def usage_of(data: Any) -> list[Usage]:
    """The model calls' token counts an event's data reports (an update's ``usage`` contents, or a whole
    response's ``usage_details``)."""
    if isinstance(data, list):
        return [u for d in data for u in usage_of(d)]
    contents = getattr(data, "contents", None)
    if contents is not None and hasattr(data, "role"):  # an AgentResponseUpdate
        found = [_usage(getattr(c, "usage_details", None)) for c in contents if getattr(c, "type", None) == "usage"]
        return [u for u in found if u is not None]
    if hasattr(data, "messages") and hasattr(data, "usage_details"):  # an AgentResponse
        whole = _usage(data.usage_details)
        return [whole] if whole is not None else []
    return []


def _usage(details: Any) -> Usage | None:
    if not isinstance(details, dict) or not details:
        return None
    usage = Usage(input_tokens=int(details.get("input_token_count") or 0),
                  output_tokens=int(details.get("output_token_count") or 0),
                  cached_tokens=int(details.get("cache_read_input_token_count") or 0),
                  reasoning_tokens=int(details.get("reasoning_output_token_count") or 0))
    return usage if usage.input_tokens or usage.output_tokens else None
