"""A local stand-in for an OpenAI-compatible model, for running ``samples.agent_with_tools`` offline.

    python -m samples.stub_model [--port 8089]

It answers Chat Completions (streamed, with tool calls and usage) with a fixed policy: asked by a user, it
calls the first tool it is offered whose name fits the request (``find_free_slot``, then ``book_meeting``,
or ``cancel_meeting`` when the user says "cancel"); after the last tool result it answers with text quoting
it. Deterministic, so a step that runs again after a crash gets the same answer.
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

app = FastAPI()


def _decide(messages: list[dict[str, Any]]) -> tuple[str, dict[str, Any]] | str:
    last = messages[-1]
    if last.get("role") == "tool":
        done = [m for m in messages if m.get("role") == "tool"]
        if len(done) == 1 and "book" not in str(done[0].get("content")) and "cancelled" not in str(last["content"]):
            return ("book_meeting", {"slot": str(last["content"]), "title": "sync"})
        return f"Done: {last['content']}."
    text = json.dumps(last.get("content"))
    if "cancel" in text.lower():
        return ("cancel_meeting", {"booking": "booking-1"})
    return ("find_free_slot", {"day": "Tuesday"})


def _chunk(delta: dict[str, Any], finish: str | None = None) -> str:
    body = {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": int(time.time()),
            "model": "stub", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return f"data: {json.dumps(body)}\n\n"


def _stream(decision: tuple[str, dict[str, Any]] | str) -> Iterator[str]:
    if isinstance(decision, str):
        yield _chunk({"role": "assistant", "content": ""})
        for word in decision.split(" "):
            yield _chunk({"content": word + " "})
        yield _chunk({}, "stop")
    else:
        name, arguments = decision
        call = {"index": 0, "id": f"call_{uuid.uuid4().hex[:8]}", "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)}}
        yield _chunk({"role": "assistant", "tool_calls": [call]})
        yield _chunk({}, "tool_calls")
    usage = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
    yield f"data: {json.dumps({'id': 'chatcmpl-stub', 'object': 'chat.completion.chunk', 'created': 0,
                               'model': 'stub', 'choices': [], 'usage': usage})}\n\n"
    yield "data: [DONE]\n\n"


@app.post("/v1/chat/completions")
async def chat(request: Request) -> StreamingResponse:
    body = await request.json()
    return StreamingResponse(_stream(_decide(body["messages"])), media_type="text/event-stream")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8089)
    args = parser.parse_args()
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
