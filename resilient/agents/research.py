"""The sample agent: a research agent with a fixed plan of streamed phases.

Offline by default (deterministic text, no model, no key) so the template runs anywhere and crash tests
can compare a recovered run with a fault-free one byte for byte. With ``AZURE_OPENAI_ENDPOINT`` and
``AZURE_OPENAI_DEPLOYMENT`` set it calls the model (see ``model.py``: endpoint shapes, auth, errors).

Tools and approval, offline: offered a function tool (and ``tool_choice`` not ``none``) with no tool
output in the turn, the agent calls the first offered tool (or the one ``tool_choice`` names) with
``{"query": <the question>}`` and ends the turn; given the output, it runs its phases and quotes the output
verbatim at the start of its last phase. With ``metadata.require_approval == "true"`` it asks for
approval before its last phase. With a model, the model decides about tools.

Images and files: offline, the first phase names what the turn's input carried besides text ("Given 1
image, 1 file."); with a model, they go to it as content parts (``chat_input`` or ``responses_input``, as
``RESILIENT_MODEL_API`` chooses), with the request's model parameters (``chat_params``, ``responses_params``).

Request ``metadata`` knobs for the offline agent (handy for demos and tests; all optional):
``research_phases`` (1-20, default 4), ``words_per_phase`` (1-2000, default 48),
``delta_delay_ms`` (0-5000, default the app setting ``RESILIENT_AGENT_DELTA_DELAY_MS``),
``require_approval`` (``"true"``: ask before the last phase).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode

from resilient.agents import model
from resilient.agents.base import (
    AgentRequest,
    ApprovalRequest,
    FunctionCall,
    Phase,
    PhaseContext,
    PhaseOutput,
    Usage,
    item_text,
)
from resilient.agents.model_calls import ModelCall, model_call
from resilient.settings import Settings
from resilient.telemetry import spans

CALL_TOOL_PHASE = "call-tool"

BASE_PLAN = (
    Phase("scope", "Restate the question and decide what a good answer must cover."),
    Phase("sources", "List the kinds of sources worth consulting and why."),
    Phase("findings", "Report the key findings, one per sentence."),
    Phase("synthesis", "Write the final answer, building on the earlier phases."),
)

_VOCABULARY = (
    "evidence", "durable", "checkpoint", "replay", "phase", "signal", "careful", "measured", "source",
    "finding", "claim", "context", "answer", "stream", "storage", "orchestration", "recovery", "trace",
    "survey", "method", "result", "caveat", "summary", "question", "insight", "pattern", "detail",
)


def _bounded_int(raw: str | None, default: int, low: int, high: int) -> int:
    try:
        value = int(raw) if raw is not None else default
    except ValueError:
        return default
    return max(low, min(high, value))


def offline_words(question: str, phase: Phase, index: int, count: int, earlier: str = "",
                  given: str = "") -> list[str]:
    """Deterministic pseudo-prose for ``phase``: same inputs, same words (so recovered output is identical).
    ``earlier``: the chain's previous question, which the first phase of a follow-up turn mentions;
    ``given``: what the turn's input carried besides text (``"1 image, 1 file"``), which it mentions too."""
    seed = hashlib.sha256(f"{question}\x00{phase.name}\x00{index}".encode()).digest()
    words = [f"[{phase.name}]"]
    if given:
        words += f"Given {given}.".split()
    if earlier:
        words += f"Following up on \"{' '.join(earlier.split()[:6])}\":".split()
    topic = " ".join(question.split()[:6]) or "the question"
    words += f"On {topic}:".split()
    i = 0
    while len(words) < count:
        byte = seed[i % len(seed)] ^ (i * 31 % 251)
        words.append(_VOCABULARY[byte % len(_VOCABULARY)])
        i += 1
    words = words[:count]
    words[-1] = words[-1] + "."
    return words


class ResearchAgent:
    """Plan: scope → sources → findings → synthesis (optionally longer), each phase streamed."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._client: Any = None

    @property
    def uses_model(self) -> bool:
        return bool(self._settings.azure_openai_endpoint and self._settings.azure_openai_deployment)

    @property
    def estimates_usage(self) -> bool:
        """Offline there is no model to count tokens: the response's ``usage`` is an estimate (about four
        characters a token). With a model, only what the model reports is counted."""
        return not self.uses_model

    async def plan(self, request: AgentRequest) -> Sequence[Phase]:
        tool = request.offered_tool()
        if not self.uses_model and tool is not None and not request.tool_outputs():
            return [Phase(CALL_TOOL_PHASE, f"Ask {tool['name']} about the question.")]
        depth = _bounded_int(request.metadata.get("research_phases"), len(BASE_PLAN), 1, 20)
        phases = list(BASE_PLAN[: min(depth, len(BASE_PLAN))])
        for extra in range(len(BASE_PLAN), depth):
            phases.insert(len(phases) - 1, Phase(f"deep-dive-{extra - 2}", "Examine one more finding."))
        return phases

    def _delay_seconds(self, request: AgentRequest) -> float:
        default = self._settings.agent_delta_delay_ms
        return _bounded_int(request.metadata.get("delta_delay_ms"), default, 0, 5000) / 1000.0

    async def run_phase(self, context: PhaseContext) -> AsyncIterator[PhaseOutput]:
        request = context.request
        last_phase = context.phase_index == len(context.plan) - 1
        if last_phase and context.approval is None and request.metadata.get("require_approval") == "true":
            yield ApprovalRequest(name=context.phase.name, server_label="research-agent",
                                  arguments=json.dumps({"phase": context.phase.name, "goal": context.phase.goal}))
            return
        if self.uses_model:
            async for output in self._model_phase(context):
                yield output
            return
        if context.phase.name == CALL_TOOL_PHASE and (tool := request.offered_tool()) is not None:
            yield FunctionCall.of(str(tool["name"]), {"query": request.question()})
            return
        outputs = request.tool_outputs()
        if outputs and last_phase:
            for found in outputs:
                yield f"{found.name or 'The tool'} returned: {found.output}\n"
        count = _bounded_int(request.metadata.get("words_per_phase"), 48, 1, 2000)
        delay = self._delay_seconds(request)
        earlier = _previous_question(request) if context.phase_index == 0 else ""
        earlier = "" if earlier == request.question() else earlier  # a turn that only answers a tool call
        given = attachments(request.input_items) if context.phase_index == 0 else ""
        words = offline_words(request.question(), context.phase, context.phase_index, count, earlier, given)
        for position, word in enumerate(words):
            if context.should_stop:
                return
            yield word if position == 0 else " " + word
            if delay:
                await asyncio.sleep(delay)

    def _model(self) -> Any:
        """Create the model client once per process (see ``model.create_client``)."""
        if self._client is None:
            self._client = model.create_client(self._settings)
        return self._client

    async def _model_phase(self, context: PhaseContext) -> AsyncIterator[PhaseOutput]:
        """One streamed model call (``model_calls``: Chat Completions or Responses, as ``RESILIENT_MODEL_API``
        says): text deltas, tool-call chunks, reasoning items and the model's usage. Model errors become agent
        errors (permanent or transient); the stream is closed however the phase ends."""
        request = context.request
        system = ((request.instructions or "You are a careful research assistant.")
                  + f"\nYou are in phase {context.phase_index + 1} of {len(context.plan)}: "
                  f"{context.phase.name}. Goal: {context.phase.goal} Be concise.")
        call = model_call(self._settings.model_api, request, system, context.output_so_far)
        # One client span per model call, ended however the call ends (see telemetry.spans.model_span).
        endpoint = self._settings.azure_openai_endpoint or ""
        span = spans.model_span(self._settings.azure_openai_deployment,
                                "openai" if model.is_v1_base_url(endpoint) else "azure.ai.openai")
        try:
            async for output in self._model_stream(context, span, call):
                yield output
        except Exception as exc:  # not a cancel or an early close: those are how a phase stops
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR))
            raise
        finally:
            span.end()

    async def _model_stream(self, context: PhaseContext, span: Span, call: ModelCall) -> AsyncIterator[PhaseOutput]:
        try:
            with trace.use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
                stream = await call.open(self._model(), self._settings.azure_openai_deployment)
        except Exception as exc:
            raise model.agent_error(exc) from exc
        try:
            async for event in stream:
                for output in call.outputs(event):
                    if isinstance(output, Usage):
                        span.set_attribute("gen_ai.usage.input_tokens", output.input_tokens)
                        span.set_attribute("gen_ai.usage.output_tokens", output.output_tokens)
                    yield output
                if context.should_stop:
                    return
        except Exception as exc:
            raise model.agent_error(exc) from exc
        finally:
            await stream.close()  # a phase stopped early (steering, cancel) must not keep the model busy


def attachments(items: Sequence[dict[str, Any]]) -> str:
    """What ``items`` carry besides text, counted (``"2 images, 1 file"``; empty for text only): the image
    and file parts of messages and of tool outputs."""
    counts = {"input_image": 0, "input_file": 0}
    for item in items:
        parts = item.get("content") if item.get("type", "message") == "message" else item.get("output")
        for part in parts if isinstance(parts, list) else []:
            if isinstance(part, dict) and part.get("type") in counts:
                counts[part["type"]] += 1
    named = ((counts["input_image"], "image"), (counts["input_file"], "file"))
    return ", ".join(f"{n} {noun}{'s' if n > 1 else ''}" for n, noun in named if n)


def _previous_question(request: AgentRequest) -> str:
    """The last user message of the chain's earlier turns (a follow-up turn mentions it), if any."""
    for item in reversed(request.history):
        if item.get("type", "message") == "message" and item.get("role") == "user":
            return item_text(item)
    return ""
