"""The model's decision and each tool's result, kept durably in the middle of a step.

A step is one model call and the tools it asked for. Without more, a crash while a tool runs repeats the
whole step: the model is asked again (it may choose other tools, other arguments) and every tool of the
step runs again. So the step keeps its progress (:class:`~resilient.agents.base.SaveProgress`, written by
the engine before the step goes on):

* when the model's answer asks for tools, the answer itself (its streamed updates, Agent Framework's own
  serialisation) is kept *before any tool runs*;
* each tool's result is kept as it returns, under the model's ``call_id``.

The step's next attempt after a crash gets that progress back (``PhaseContext.progress``): the chat
middleware hands the agent the recorded answer instead of calling the model, and the function middleware
hands it each finished tool's result instead of running the tool. Only a tool that had not returned runs
again, with the same idempotency key (``<response id>/step-<k>/<call id>``: the call id comes from the
recorded answer, so it is the same on every attempt).
"""

from __future__ import annotations

import contextvars
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent_framework import (
    ChatContext,
    ChatMiddleware,
    ChatResponse,
    ChatResponseUpdate,
    FunctionInvocationContext,
    FunctionMiddleware,
    Message,
    ResponseStream,
)

from resilient.agents.base import PhaseContext, PhaseOutput, SaveProgress, ToolRun
from resilient.agents.framework.messages import tool_result_text

type Emit = Callable[[PhaseOutput], Awaitable[None]]

IDEMPOTENCY_KEY: contextvars.ContextVar[str | None] = contextvars.ContextVar("resilient_idempotency_key", default=None)


def idempotency_key() -> str | None:
    """Inside a tool: a key for its side effect, the same on every attempt of the tool call (None outside a
    run hosted by this service). Pass it to the service the tool calls (an ``Idempotency-Key`` header, a row
    key) so a call that runs again after a crash does not repeat the effect."""
    return IDEMPOTENCY_KEY.get()


@dataclass
class StepProgress:
    """What this step did that must not be done again: the model's answer (its updates, as dicts) and the
    results of the tools that returned, by call id (``{"output": text | None, "error": text | None}``)."""

    decision: list[dict[str, Any]] | None = None
    tools: dict[str, dict[str, str | None]] = field(default_factory=dict)

    @classmethod
    def from_json(cls, value: Any) -> StepProgress:
        if not isinstance(value, dict):
            return cls()
        decision = value.get("decision")
        return cls(decision=list(decision) if isinstance(decision, list) else None,
                   tools={str(k): dict(v) for k, v in (value.get("tools") or {}).items()})

    def to_json(self) -> dict[str, Any]:
        return {"decision": self.decision, "tools": dict(self.tools)}


class Keeper:
    """Hands outputs to the engine, and keeps the step's progress durably (it waits for the write)."""

    def __init__(self, context: PhaseContext, emit: Emit) -> None:
        self.progress = StepProgress.from_json(context.progress)
        self.emit = emit

    async def keep(self) -> None:
        kept = SaveProgress(self.progress.to_json())
        await self.emit(kept)
        await kept.saved.wait()


class StepOver(Exception):
    """Raised by the chat middleware at the step's second model call: the step is complete."""

    def __init__(self, messages: Sequence[Message]) -> None:
        super().__init__("step complete")
        self.messages = list(messages)


class ModelGate(ChatMiddleware):
    """The step's one model call: replayed from the kept decision when there is one, else made and, when
    it asks for tools, kept before they run. The next model call ends the step (:class:`StepOver`)."""

    def __init__(self, keeper: Keeper) -> None:
        self._keeper = keeper
        self.calls = 0
        self.replayed = False

    async def process(self, context: ChatContext, call_next: Callable[[], Awaitable[None]]) -> None:
        self.calls += 1
        if self.calls > 1:
            raise StepOver(context.messages)
        recorded = self._keeper.progress.decision
        if recorded is not None:
            self.replayed = True
            context.result = _replay(recorded)
            return
        updates: list[dict[str, Any]] = []

        def record(update: ChatResponseUpdate) -> ChatResponseUpdate:
            updates.append(json.loads(json.dumps(update.to_dict(), default=str)))
            return update

        async def keep_if_it_calls_tools(response: ChatResponse[Any]) -> None:
            if any(c.type == "function_call" for m in response.messages for c in m.contents):
                self._keeper.progress.decision = coalesced(updates)
                await self._keeper.keep()

        context.stream_transform_hooks.append(record)
        context.stream_result_hooks.append(keep_if_it_calls_tools)
        await call_next()


def coalesced(updates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The updates with each run of text-only updates of one message joined into one: the same answer in
    far fewer updates (a model streams text a token at a time; the kept decision stays small)."""
    joined: list[dict[str, Any]] = []
    for update in updates:
        previous = joined[-1] if joined else None
        if previous is not None and _text_only(previous) and _text_only(update) \
                and previous.get("message_id") == update.get("message_id"):
            previous["contents"][-1]["text"] += "".join(c["text"] for c in update["contents"])
            continue
        joined.append({**update, "contents": [dict(c) for c in update.get("contents") or []]})
    return joined


def _text_only(update: dict[str, Any]) -> bool:
    contents = update.get("contents") or []
    return bool(contents) and all(c.get("type") == "text" and isinstance(c.get("text"), str) for c in contents)


def _replay(recorded: list[dict[str, Any]]) -> ResponseStream[ChatResponseUpdate, ChatResponse[Any]]:
    updates = [ChatResponseUpdate.from_dict(u) for u in recorded]

    async def stream() -> AsyncIterator[ChatResponseUpdate]:
        for update in updates:
            yield update

    return ResponseStream(stream(), finalizer=ChatResponse.from_updates)


class ToolFailedBefore(Exception):
    """A kept tool result that was an error: the model is told again what it was told the first time."""


class ToolGate(FunctionMiddleware):
    """Each tool call: its kept result when it returned on an earlier attempt; else it runs with its
    idempotency key, and its result is kept as soon as it returns. Either way it is reported as a
    :class:`ToolRun` (an ``mcp_call`` item of this step)."""

    def __init__(self, context: PhaseContext, keeper: Keeper) -> None:
        self._prefix = f"{context.request.response_id}/step-{context.phase_index}/"
        self._keeper = keeper
        self.runs = 0  # tools this attempt really ran (not replayed)

    async def process(self, context: FunctionInvocationContext, call_next: Callable[[], Awaitable[None]]) -> None:
        call_id = str(context.metadata.get("call_id") or "")
        name = context.function.name
        arguments = json.dumps(dict(context.arguments or {}), ensure_ascii=False, default=str)
        kept = self._keeper.progress.tools.get(call_id)
        if kept is not None:
            await self._keeper.emit(ToolRun(name, arguments, kept.get("output"), kept.get("error")))
            if kept.get("error"):
                raise ToolFailedBefore(str(kept["error"]))
            context.result = kept.get("output") or ""
            return
        key = self._prefix + call_id
        context.metadata["idempotency_key"] = key
        token = IDEMPOTENCY_KEY.set(key)
        self.runs += 1
        try:
            await call_next()
        except Exception as exc:  # the loop turns it into an error result; we keep it as the item's error
            await self._finish(call_id, ToolRun(name, arguments, None, f"{type(exc).__name__}: {exc}"))
            raise
        finally:
            IDEMPOTENCY_KEY.reset(token)
        await self._finish(call_id, ToolRun(name, arguments, tool_result_text(context.result)))

    async def _finish(self, call_id: str, run: ToolRun) -> None:
        self._keeper.progress.tools[call_id] = {"output": run.output, "error": run.error}
        await self._keeper.keep()
        await self._keeper.emit(run)
