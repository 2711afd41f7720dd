"""One streamed model call of the sample agent, through either API the setting ``RESILIENT_MODEL_API``
chooses: how the call starts and what each streamed event means for the phase.

Both calls have the same two methods, so the rest of a model phase (its span, error classification,
stopping early, closing the stream) is one piece of code for both (``research.ResearchAgent``):

* :class:`ChatCall`: ``chat.completions.create``; chunks carry text, tool-call fragments and usage;
* :class:`ResponsesCall`: ``responses.create``; events carry text deltas, function calls, the model's
  ``reasoning`` items (kept as output items, so a client can send them back) and, at the end, usage.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from resilient.agents import model
from resilient.agents.base import (
    AgentRequest,
    FunctionCallDelta,
    PermanentAgentError,
    PhaseOutput,
    Reasoning,
    TransientAgentError,
    Usage,
    item_text,
)
from resilient.agents.chat_input import chat_messages
from resilient.agents.chat_params import chat_params
from resilient.agents.responses_input import responses_input
from resilient.agents.responses_params import responses_params

# ``response.failed`` error codes worth another attempt of the phase; any other code is the request's fault.
TRANSIENT_FAILURES = frozenset({"server_error", "rate_limit_exceeded"})


class ModelCall(Protocol):
    async def open(self, client: Any, deployment: str | None) -> Any:
        """Start the streamed call; returns the client's stream (async iterable, with ``close``)."""
        ...

    def outputs(self, event: Any) -> Iterator[PhaseOutput]:
        """What one streamed event means for the phase (raises an agent error for an error event)."""
        ...


def model_call(api: str, request: AgentRequest, system: str, earlier: Sequence[dict[str, Any]]) -> ModelCall:
    """The call for one phase: ``system`` is the phase's instructions, ``earlier`` this turn's earlier
    phases' output items."""
    if api == "responses":
        return ResponsesCall(request, system, earlier)
    return ChatCall(request, system, earlier)


@dataclass
class ChatCall:
    request: AgentRequest
    system: str
    earlier: Sequence[dict[str, Any]]

    async def open(self, client: Any, deployment: str | None) -> Any:
        request = self.request
        messages = chat_messages(self.system, request.history, request.input_items,
                                 [item_text(item) for item in self.earlier])
        extra = chat_params(request.params, has_tools=bool(request.tools))
        if request.tools:
            extra["tools"] = model.chat_tools(request.tools)
            extra["tool_choice"] = model.chat_tool_choice(request.tool_choice)
        return await client.chat.completions.create(model=deployment, messages=messages, stream=True,
                                                    stream_options={"include_usage": True}, **extra)

    def outputs(self, event: Any) -> Iterator[PhaseOutput]:
        if event.usage is not None:
            yield chat_usage(event.usage)
        for choice in event.choices:
            delta = choice.delta
            if delta is None:
                continue
            if delta.content:
                yield delta.content
            for call in delta.tool_calls or []:
                function = call.function
                yield FunctionCallDelta(key=call.index, name=function.name if function else None,
                                        arguments=(function.arguments or "") if function else "")


@dataclass
class ResponsesCall:
    request: AgentRequest
    system: str
    earlier: Sequence[dict[str, Any]]

    async def open(self, client: Any, deployment: str | None) -> Any:
        request = self.request
        extra = responses_params(request.params)
        if request.tools:
            extra["tools"] = model.responses_tools(request.tools)
            extra["tool_choice"] = request.tool_choice
        items = responses_input([*request.history, *request.input_items, *self.earlier])
        return await client.responses.create(model=deployment, instructions=self.system, input=items,
                                             stream=True, **extra)

    def outputs(self, event: Any) -> Iterator[PhaseOutput]:
        kind = event.type
        if kind == "response.output_text.delta":
            yield event.delta
        elif kind == "response.output_item.added" and event.item.type == "function_call":
            yield FunctionCallDelta(key=event.output_index, name=event.item.name, arguments=event.item.arguments)
        elif kind == "response.function_call_arguments.delta":
            yield FunctionCallDelta(key=event.output_index, arguments=event.delta)
        elif kind == "response.output_item.done" and event.item.type == "reasoning":
            yield Reasoning(summary=tuple(part.text for part in event.item.summary),
                            encrypted_content=event.item.encrypted_content)
        elif kind in ("response.completed", "response.incomplete") and event.response.usage is not None:
            yield responses_usage(event.response.usage)
        elif kind == "response.failed":
            error = event.response.error
            code, message = (error.code, error.message) if error is not None else ("server_error", "no error given")
            failure = TransientAgentError if code in TRANSIENT_FAILURES else PermanentAgentError
            raise failure(f"The model's response failed ({code}): {message}")
        elif kind == "error":
            raise TransientAgentError(f"The model stream failed: {event.message}")


def chat_usage(usage: Any) -> Usage:
    prompt_details = getattr(usage, "prompt_tokens_details", None)
    completion_details = getattr(usage, "completion_tokens_details", None)
    return Usage(
        input_tokens=int(usage.prompt_tokens or 0),
        output_tokens=int(usage.completion_tokens or 0),
        cached_tokens=int(getattr(prompt_details, "cached_tokens", 0) or 0),
        reasoning_tokens=int(getattr(completion_details, "reasoning_tokens", 0) or 0),
    )


def responses_usage(usage: Any) -> Usage:
    return Usage(
        input_tokens=int(usage.input_tokens or 0),
        output_tokens=int(usage.output_tokens or 0),
        cached_tokens=int(getattr(usage.input_tokens_details, "cached_tokens", 0) or 0),
        reasoning_tokens=int(getattr(usage.output_tokens_details, "reasoning_tokens", 0) or 0),
    )
