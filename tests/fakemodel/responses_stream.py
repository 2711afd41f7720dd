"""The fake model's streamed Responses API answer (``POST .../responses`` with ``stream: true``): the event
sequence the OpenAI API sends, each event checked strictly against the ``openai`` client's event type
(``resilient.protocol.events.validate_event``) before it is sent, so the fake cannot drift from what a real
model streams.

A :class:`~tests.fakemodel.server.Behaviour` with ``reasoning`` set starts the answer with a ``reasoning``
output item (that text as its summary, ``encrypted_content`` = :func:`encrypted`), as a reasoning model
does when asked to ``include`` ``reasoning.encrypted_content``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from resilient.protocol.events import validate_event

if TYPE_CHECKING:
    from tests.fakemodel.server import Behaviour

REASONING_TOKENS = 7


def encrypted(summary: str) -> str:
    """The opaque ``encrypted_content`` the fake gives a reasoning item (derived from its summary, so a
    test can tell which reasoning came back)."""
    return f"enc:{summary}"


class _Events:
    """Numbers events and checks each against the ``openai`` type."""

    def __init__(self) -> None:
        self._numbers = itertools.count()

    def __call__(self, kind: str, **fields: Any) -> bytes:
        data = {"type": kind, "sequence_number": next(self._numbers), **fields}
        validate_event(data)  # strictly the client's type for ``kind`` (raises on a wrong or unknown field)
        return f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode()


def _response(body: dict[str, Any], status: str, output: list[dict[str, Any]], usage: bool) -> dict[str, Any]:
    found: dict[str, Any] = {
        "id": "resp_fake", "object": "response", "created_at": int(time.time()), "model": str(body.get("model")),
        "status": status, "output": output, "parallel_tool_calls": True, "tool_choice": "auto", "tools": []}
    if usage:
        from tests.fakemodel.server import CACHED_TOKENS, COMPLETION_TOKENS, PROMPT_TOKENS

        found["usage"] = {"input_tokens": PROMPT_TOKENS, "output_tokens": COMPLETION_TOKENS,
                          "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS,
                          "input_tokens_details": {"cached_tokens": CACHED_TOKENS, "cache_write_tokens": 0},
                          "output_tokens_details": {"reasoning_tokens": REASONING_TOKENS}}
    return found


async def responses_stream(body: dict[str, Any], behaviour: Behaviour,
                           on_cancel: Callable[[int], None]) -> AsyncIterator[bytes]:
    """The events of one answer (``on_cancel(sent)``: the client hung up after ``sent`` text deltas)."""
    event = _Events()
    output: list[dict[str, Any]] = []
    sent = 0
    try:
        yield event("response.created", response=_response(body, "in_progress", [], usage=False))
        if behaviour.reasoning:
            item = {"id": f"rs_fake{len(output)}", "type": "reasoning", "status": "completed",
                    "summary": [{"type": "summary_text", "text": behaviour.reasoning}],
                    "encrypted_content": encrypted(behaviour.reasoning)}
            yield event("response.output_item.added", output_index=0, item={**item, "summary": []})
            yield event("response.output_item.done", output_index=0, item=item)
            output.append(item)
        if behaviour.kind == "tool_call":
            calls = [(behaviour.tool, behaviour.chunks, behaviour.call_id),
                     *((tool, [arguments], call_id) for tool, arguments, call_id in behaviour.more_calls)]
            for tool, fragments, call_id in calls:
                async for chunk in _call(event, len(output), tool, fragments, call_id, behaviour.delay, output):
                    yield chunk
        else:
            index, item_id = len(output), f"msg_fake{len(output)}"
            opened = {"id": item_id, "type": "message", "role": "assistant", "status": "in_progress", "content": []}
            yield event("response.output_item.added", output_index=index, item=opened)
            part = {"type": "output_text", "text": "", "annotations": []}
            yield event("response.content_part.added", item_id=item_id, output_index=index, content_index=0,
                        part=part)
            for text in behaviour.chunks:
                if behaviour.delay:
                    await asyncio.sleep(behaviour.delay)
                yield event("response.output_text.delta", item_id=item_id, output_index=index, content_index=0,
                            delta=text, logprobs=[])
                sent += 1
            if behaviour.kind == "drop":
                raise ConnectionAbortedError("fake model drops the connection")
            text = "".join(behaviour.chunks)
            yield event("response.output_text.done", item_id=item_id, output_index=index, content_index=0,
                        text=text, logprobs=[])
            yield event("response.content_part.done", item_id=item_id, output_index=index, content_index=0,
                        part={**part, "text": text})
            done = {**opened, "status": "completed", "content": [{**part, "text": text}]}
            yield event("response.output_item.done", output_index=index, item=done)
            output.append(done)
        yield event("response.completed", response=_response(body, "completed", output, usage=True))
    except (asyncio.CancelledError, GeneratorExit):
        on_cancel(sent)
        raise


async def _call(event: _Events, index: int, tool: str, fragments: list[str], call_id: str, delay: float,
                output: list[dict[str, Any]]) -> AsyncIterator[bytes]:
    item_id = f"fc_fake{index}"
    item = {"id": item_id, "type": "function_call", "status": "in_progress", "call_id": call_id, "name": tool,
            "arguments": ""}
    yield event("response.output_item.added", output_index=index, item=item)
    for fragment in fragments:
        if delay:
            await asyncio.sleep(delay)
        yield event("response.function_call_arguments.delta", item_id=item_id, output_index=index, delta=fragment)
    arguments = "".join(fragments)
    yield event("response.function_call_arguments.done", item_id=item_id, output_index=index, arguments=arguments)
    done = {**item, "status": "completed", "arguments": arguments}
    yield event("response.output_item.done", output_index=index, item=done)
    output.append(done)
