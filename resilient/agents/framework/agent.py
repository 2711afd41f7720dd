"""An Agent Framework agent (``agent_framework.Agent`` or any ``SupportsAgentRun``) run step by step.

A *step* is one model call together with the tool calls it asked for and their results. The agent runs
with this service's middleware around its chat client:

* the first model call of an activity streams live (its text becomes ``output_text`` deltas);
* each tool the agent runs is reported as a :class:`~resilient.agents.base.ToolRun` (an ``mcp_call`` item
  with its output) as soon as it returns;
* when the agent asks for its *next* model call, the step is over: the conversation so far (the messages
  that call would send: the input, the model's tool calls, the tool results) is saved as the step's state
  and the run stops there. The engine checkpoints the step and the next activity continues the same run
  from that conversation, so a finished step's tools never run again after a crash.

The conversation is the agent's state across turns too: the chain's next turn starts from the messages the
previous turn ended with, plus its own input. An agent that does not accept per-run middleware (a
``SupportsAgentRun`` that is not an ``agent_framework.Agent``) runs its whole turn as one step.

Tools get a stable key for their side effects from :func:`idempotency_key` (the same on every attempt of a
step): a tool whose step crashed before its checkpoint runs again with the same key.
"""

from __future__ import annotations

import contextvars
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from agent_framework import (
    ChatContext,
    ChatMiddleware,
    Content,
    FunctionInvocationContext,
    FunctionMiddleware,
    Message,
)

from resilient.agents.base import (
    AgentRequest,
    ApprovalRequest,
    FunctionCall,
    NextStep,
    Phase,
    PhaseContext,
    PhaseOutput,
    SaveState,
    ToolRun,
    Usage,
)
from resilient.agents.framework.driving import in_own_task
from resilient.agents.framework.messages import request_messages, tool_result_text

log = logging.getLogger("resilient.agents.framework")

STEP_PHASE = Phase("step", "One model call and the tool calls it asked for.")
IDEMPOTENCY_KEY: contextvars.ContextVar[str | None] = contextvars.ContextVar("resilient_idempotency_key", default=None)


def idempotency_key() -> str | None:
    """Inside a tool: a key for its side effect, the same on every attempt of the step (None outside a run
    hosted by this service). Pass it to the service the tool calls (an ``Idempotency-Key`` header, a row
    key) so a repeated step does not repeat the effect."""
    return IDEMPOTENCY_KEY.get()


class _StepOver(Exception):
    """Raised by the chat middleware at the step's second model call: the step is complete."""

    def __init__(self, messages: Sequence[Message]) -> None:
        super().__init__("step complete")
        self.messages = list(messages)


class _StepBoundary(ChatMiddleware):
    """Lets the first model call of an activity through and ends the step at the second."""

    def __init__(self) -> None:
        self.calls = 0

    async def process(self, context: ChatContext, call_next: Callable[[], Awaitable[None]]) -> None:
        self.calls += 1
        if self.calls > 1:
            raise _StepOver(context.messages)
        await call_next()


class _ToolRecorder(FunctionMiddleware):
    """Hands each tool its idempotency key and reports its result as a ToolRun."""

    def __init__(self, context: PhaseContext) -> None:
        self._context = context
        self.started = 0
        self.finished: list[ToolRun] = []

    async def process(self, context: FunctionInvocationContext, call_next: Callable[[], Awaitable[None]]) -> None:
        key = self._context.idempotency_key(self.started)
        self.started += 1
        context.metadata["idempotency_key"] = key
        token = IDEMPOTENCY_KEY.set(key)
        error: str | None = None
        try:
            await call_next()
        except Exception as exc:  # the loop turns it into an error result; we record it as the item's error
            error = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            IDEMPOTENCY_KEY.reset(token)
            arguments = json.dumps(dict(context.arguments or {}), ensure_ascii=False, default=str)
            self.finished.append(ToolRun(context.function.name, arguments,
                                         None if error else tool_result_text(context.result), error))


class FrameworkAgent:
    """This service's agent API over an Agent Framework agent (see the module docstring)."""

    open_plan = True

    def __init__(self, agent: Any, *, resumable: bool = True) -> None:
        self.agent = agent
        self.resumable = bool(getattr(agent, "resumable", resumable))
        # Stepping needs the middleware hook; an agent without it runs its turn as one step.
        self.steps = _accepts_middleware(agent)
        client = getattr(agent, "client", None)
        config = getattr(client, "function_invocation_configuration", None)
        if isinstance(config, dict):
            # An approval is answered in a later turn, from the conversation this service keeps (no
            # AgentSession holds the pending request): let the answer bind to the call it names.
            config["disable_approval_response_binding"] = True

    async def plan(self, request: AgentRequest) -> Sequence[Phase]:
        return [STEP_PHASE]

    def run_phase(self, context: PhaseContext) -> AsyncIterator[PhaseOutput]:
        return in_own_task(self._step(context))

    async def _step(self, context: PhaseContext) -> AsyncIterator[PhaseOutput]:
        messages = request_messages(context)
        boundary = _StepBoundary()
        tools = _ToolRecorder(context)
        kwargs: dict[str, Any] = {"stream": True}
        if self.steps:
            kwargs["middleware"] = [boundary, tools]
        client_tools = _client_tools(context)
        if client_tools:
            kwargs["tools"] = client_tools
        stream = self.agent.run(messages, **kwargs)
        approvals: list[Content] = []
        try:
            async for update in stream:
                for content in getattr(update, "contents", None) or ():
                    kind = getattr(content, "type", None)
                    if kind == "text" and getattr(update, "role", "assistant") == "assistant" and content.text:
                        yield content.text
                    elif kind == "usage":
                        usage = _usage(content)
                        if usage is not None:
                            yield usage
                    elif kind == "function_approval_request":
                        approvals.append(content)
                while tools.finished:
                    yield tools.finished.pop(0)
        except _StepOver as over:
            for run in tools.finished:
                yield run
            yield SaveState(_state(context, over.messages))
            yield NextStep()
            return
        for run in tools.finished:
            yield run
        final = await stream.get_final_response()
        final_messages = [*messages, *final.messages]
        state = _state(context, final_messages)
        calls = _client_calls(context, final.messages)
        if calls:  # the client runs these; its function_call_output items answer them next turn
            yield SaveState(state)
            for client_call in calls:
                yield client_call
            return
        if approvals:
            request = approvals[0]
            call = request.function_call
            state["pending_approval"] = request.to_dict()
            yield SaveState(state)
            yield ApprovalRequest(str(getattr(call, "name", "") or "tool"), _arguments(call), server_label="agent")
            return
        yield SaveState(state)


def _client_tools(context: PhaseContext) -> list[Any]:
    """The request's function tools, declared to the agent without an implementation: the agent may call
    them, Agent Framework does not run them, and the turn ends with ``function_call`` items."""
    if not context.request.tools or context.request.tool_choice == "none":
        return []
    from agent_framework import FunctionTool

    declared = []
    for spec in context.request.tools:
        schema = spec.get("parameters") or {"type": "object", "properties": {}}
        declared.append(FunctionTool(name=str(spec["name"]), description=str(spec.get("description") or ""),
                                     func=None, input_model=schema))
    return declared


def _client_calls(context: PhaseContext, messages: Sequence[Message]) -> list[FunctionCall]:
    """Calls of the request's function tools that the final messages hold without a result."""
    names = {str(t.get("name")) for t in context.request.tools}
    answered = {c.call_id for m in messages for c in m.contents if c.type == "function_result"}
    found = []
    for message in messages:
        for content in message.contents:
            if content.type == "function_call" and content.name in names and content.call_id not in answered:
                found.append(FunctionCall(str(content.name), _arguments(content), call_id=content.call_id))
    return found


def _accepts_middleware(agent: Any) -> bool:
    import inspect

    try:
        return "middleware" in inspect.signature(agent.run).parameters
    except (TypeError, ValueError):
        return False


def _state(context: PhaseContext, messages: Sequence[Message]) -> dict[str, Any]:
    """The state a step keeps: the conversation, marked with the turn it belongs to (the next turn of the
    chain appends its own input to it)."""
    return {"kind": "agent-framework/messages", "turn": context.request.response_id,
            "messages": [m.to_dict() for m in messages]}


def _arguments(call: Any) -> str:
    raw = getattr(call, "arguments", None)
    if isinstance(raw, str):
        return raw or "{}"
    return json.dumps(raw or {}, ensure_ascii=False, default=str)


def _usage(content: Any) -> Usage | None:
    details = getattr(content, "usage_details", None) or {}
    if not isinstance(details, dict) or not details:
        return None
    return Usage(input_tokens=int(details.get("input_token_count") or 0),
                 output_tokens=int(details.get("output_token_count") or 0),
                 cached_tokens=int(details.get("cache_read_input_token_count") or 0),
                 reasoning_tokens=int(details.get("reasoning_output_token_count") or 0))

