"""The fake model's policy for the framework tests: a tool loop that decides from the messages alone, so a
step that runs again gets the same answer (see ``tests/fakemodel``)."""

from __future__ import annotations

import json
from typing import Any

from tests.fakemodel.server import Behaviour


class ToolLoop:
    """Asked for a user message: call a tool (``refund`` when the message says so, ``reserve`` and ``charge``
    in one answer for "book and pay", else ``send_email``); "what is my name?" is answered with what the
    system messages say about it.
    Asked after a tool result: answer with text quoting it. ``answer_delay`` slows the answer's chunks
    (room to kill a worker while it streams)."""

    def __init__(self) -> None:
        self.answer_delay = 0.0
        self.call_delay = 0.0

    def __call__(self, body: dict[str, Any]) -> Behaviour:
        messages = body["messages"]
        last = messages[-1]
        if last["role"] == "tool":
            result = last["content"] if isinstance(last["content"], str) else json.dumps(last["content"])
            return Behaviour(kind="slow" if self.answer_delay else "text", delay=self.answer_delay,
                             chunks=["Done: ", str(result), "."])
        text = _text(last)
        if "thank" in text.lower():
            tools_seen = sum(1 for m in messages if m["role"] == "tool")
            return Behaviour(kind="text", chunks=["You are welcome; ", f"tools used so far: {tools_seen}."])
        if "what is my name" in text.lower():  # answered from what a context provider told the model
            told = [_text(m) for m in messages if m["role"] == "system" and "name is" in _text(m)]
            return Behaviour(kind="text", chunks=["You told me: ", " | ".join(told) or "nothing", "."])
        if "book and pay" in text.lower():  # two tools in one answer: a quick one, then a slow one
            n = len(messages)
            return Behaviour(kind="tool_call", tool="reserve", chunks=['{"seat": "12A"}'], call_id=f"call_{n}_a",
                             more_calls=[("charge", '{"amount": "10"}', f"call_{n}_b")])
        tool = "refund" if "refund" in text.lower() else "send_email"
        arguments = ['{"order": ', '"42"}'] if tool == "refund" else ['{"to": ', '"bob"}']
        if "weather" in text.lower():  # a function tool of the request: the client runs it
            tool, arguments = "get_weather", ['{"city": ', '"Paris"}']
        return Behaviour(kind="tool_call", tool=tool, chunks=arguments, call_id=f"call_{len(messages)}",
                         delay=self.call_delay)


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""
