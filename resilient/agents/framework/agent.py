"""An Agent Framework agent (``agent_framework.Agent``, ``RawAgent``, or another ``SupportsAgentRun`` that
takes chat and function middleware) run step by step.

A *step* is one model call together with the tool calls it asked for and their results. The agent runs
with this service's middleware around its chat client (``decisions.py``):

* the step's model call streams live (its text becomes ``output_text`` deltas); when it asks for tools, the
  model's answer is kept durably before any tool runs;
* each tool the agent runs is kept durably as it returns, and reported as a
  :class:`~resilient.agents.base.ToolRun` (an ``mcp_call`` item with its output);
* when the agent asks for its *next* model call, the step is over: the conversation so far (the messages
  that call would send: the input, the model's tool calls, the tool results) is saved as the step's state
  with the agent's ``AgentSession`` (``sessions.py``), and the run stops there. The engine checkpoints the
  step and the next activity continues from that conversation and session.

After a crash inside a step, its next attempt replays the kept answer instead of asking the model again
and hands finished tools their kept results: only a tool that had not returned runs again, with the same
key (:func:`idempotency_key`). The conversation and the session are the agent's state across turns too.

An agent whose ``run`` takes no middleware (neither ``middleware`` nor, for a ``RawAgent``, a chat client
that takes ``middleware`` through ``client_kwargs``) cannot be stepped and is refused with a message
saying so, as is an agent with a history provider of its own (the service keeps the conversation).
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from agent_framework import Content, Message

from resilient.agents.base import (
    AgentRequest,
    ApprovalRequest,
    FunctionCall,
    NextStep,
    PermanentAgentError,
    Phase,
    PhaseContext,
    PhaseOutput,
    SaveState,
    Usage,
)
from resilient.agents.framework import sessions
from resilient.agents.framework.decisions import (
    IDEMPOTENCY_KEY,
    Emit,
    Keeper,
    ModelGate,
    StepOver,
    ToolGate,
    idempotency_key,
)
from resilient.agents.framework.driving import emitting
from resilient.agents.framework.messages import request_messages

log = logging.getLogger("resilient.agents.framework")

__all__ = ["IDEMPOTENCY_KEY", "FrameworkAgent", "idempotency_key", "not_steppable"]

STEP_PHASE = Phase("step", "One model call and the tool calls it asked for.")


def not_steppable(agent: Any) -> str | None:
    """Why ``agent`` cannot be hosted step by step (one sentence for the app setting's error), else None."""
    if _middleware_route(agent) is None:
        return (f"{type(agent).__name__} cannot be run step by step: its run() takes no chat and function "
                f"middleware (no 'middleware' argument, and no chat client that takes it through "
                f"'client_kwargs'), so a crash would run all of its tools again. Build an "
                f"agent_framework.Agent (or RawAgent) around it, or write it to this service's phase API.")
    own = sessions.own_history_provider(agent)
    if own is not None:
        return (f"{type(agent).__name__} has a history provider of its own ({own!r}) that loads the "
                f"conversation; this service keeps the conversation itself, so the model would see it twice. "
                f"Remove it, or set its load_messages=False.")
    return None


class FrameworkAgent:
    """This service's agent API over an Agent Framework agent (see the module docstring). ``agent`` is the
    agent, or a function without arguments that builds one (called for every step)."""

    open_plan = True

    def __init__(self, agent: Any, *, resumable: bool = True) -> None:
        from resilient.agents.kinds import AgentLoadError

        self._factory: Callable[[], Any] | None = None
        if isinstance(agent, type) or (callable(agent) and not callable(getattr(agent, "run", None))):
            self._factory = agent
            self.agent: Any = None
        else:
            reason = not_steppable(agent)
            if reason is not None:
                raise AgentLoadError(f"RESILIENT_AGENT: {reason}")
            self.agent = _prepared(agent)
        self.resumable = bool(getattr(agent, "resumable", resumable))

    async def plan(self, request: AgentRequest) -> Sequence[Phase]:
        return [STEP_PHASE]

    def run_phase(self, context: PhaseContext) -> AsyncIterator[PhaseOutput]:
        return emitting(lambda emit: self._step(context, emit))

    def _agent_for_step(self) -> Any:
        if self._factory is None:
            return self.agent
        built = self._factory()
        reason = not_steppable(built)
        if reason is not None:
            raise PermanentAgentError(reason)
        return _prepared(built)

    async def _step(self, context: PhaseContext, emit: Emit) -> None:
        agent = self._agent_for_step()
        messages = request_messages(context)
        keeper = Keeper(context, emit)
        middleware = [ModelGate(keeper), ToolGate(context, keeper)]
        session = sessions.restore(agent, context.state,
                                   context.conversation_chain_id or context.request.response_id)
        kwargs: dict[str, Any] = {"stream": True, "session": session}
        if _middleware_route(agent) == "middleware":
            kwargs["middleware"] = middleware
        else:
            kwargs["client_kwargs"] = {"middleware": middleware}
        client_tools = _client_tools(context)
        if client_tools:
            kwargs["tools"] = client_tools
        stream = agent.run(messages, **kwargs)
        approvals: list[Content] = []
        try:
            async for update in stream:
                for output in _outputs(update, approvals):
                    await emit(output)
        except StepOver as over:
            conversation = sessions.without_provider_context(over.messages)
            await emit(SaveState(_state(context, conversation, session)))
            await emit(NextStep())
            return
        final = await stream.get_final_response()
        state = _state(context, [*messages, *final.messages], session)
        calls = _client_calls(context, final.messages)
        if calls:  # the client runs these; its function_call_output items answer them next turn
            await emit(SaveState(state))
            for client_call in calls:
                await emit(client_call)
            return
        if approvals:
            request = approvals[0]
            call = request.function_call
            state["pending_approval"] = request.to_dict()
            await emit(SaveState(state))
            await emit(ApprovalRequest(str(getattr(call, "name", "") or "tool"), _arguments(call),
                                       server_label="agent"))
            return
        await emit(SaveState(state))


def _outputs(update: Any, approvals: list[Content]) -> list[PhaseOutput]:
    """What one streamed update says to the client: text and usage (approval requests are collected)."""
    found: list[PhaseOutput] = []
    for content in getattr(update, "contents", None) or ():
        kind = getattr(content, "type", None)
        if kind == "text" and getattr(update, "role", "assistant") == "assistant" and content.text:
            found.append(content.text)
        elif kind == "usage":
            usage = _usage(content)
            if usage is not None:
                found.append(usage)
        elif kind == "function_approval_request":
            approvals.append(content)
    return found


def _prepared(agent: Any) -> Any:
    sessions.prepare(agent)
    client = getattr(agent, "client", None)
    config = getattr(client, "function_invocation_configuration", None)
    if isinstance(config, dict):
        # An approval is answered in a later turn, from the conversation this service keeps (no
        # AgentSession holds the pending request): let the answer bind to the call it names.
        config["disable_approval_response_binding"] = True
    return agent


def _middleware_route(agent: Any) -> str | None:
    """How the agent takes per-run chat and function middleware: ``middleware`` (``Agent``), through
    ``client_kwargs`` to a chat client that takes it (``RawAgent``), or not at all (None)."""
    run_parameters = _parameters(getattr(agent, "run", None))
    if "middleware" in run_parameters:
        return "middleware"
    client = getattr(agent, "client", None)
    if "client_kwargs" in run_parameters and "middleware" in _parameters(getattr(client, "get_response", None)):
        return "client_kwargs"
    return None


def _parameters(function: Any) -> set[str]:
    try:
        return set(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return set()


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


def _state(context: PhaseContext, messages: Sequence[Message], session: Any) -> dict[str, Any]:
    """The state a step keeps: the conversation, marked with the turn it belongs to (the next turn of the
    chain appends its own input to it), and the agent's session."""
    return {"kind": "agent-framework/messages", "turn": context.request.response_id,
            "messages": [m.to_dict() for m in messages], sessions.SESSION_KEY: sessions.saved(session)}


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

