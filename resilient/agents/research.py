"""The sample agent: a research agent with a fixed plan of streamed phases.

Offline by default (deterministic text, no model, no key) so the template runs anywhere and crash tests
can compare a recovered run with a fault-free one byte for byte. With ``AZURE_OPENAI_ENDPOINT`` and
``AZURE_OPENAI_DEPLOYMENT`` set it calls the model through ``openai.AsyncAzureOpenAI`` with an
``azure-identity`` bearer token (an API key only if ``AZURE_OPENAI_API_KEY`` is given explicitly).

Request ``metadata`` knobs for the offline agent (handy for demos and tests; all optional):
``research_phases`` (1-20, default 4), ``words_per_phase`` (1-2000, default 48),
``delta_delay_ms`` (0-5000, default the app setting ``RESILIENT_AGENT_DELTA_DELAY_MS``).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

from resilient.agents.base import AgentRequest, Phase, PhaseContext
from resilient.settings import Settings

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


def offline_words(question: str, phase: Phase, index: int, count: int) -> list[str]:
    """Deterministic pseudo-prose for ``phase``: same inputs, same words (so recovered output is identical)."""
    seed = hashlib.sha256(f"{question}\x00{phase.name}\x00{index}".encode()).digest()
    words = [f"[{phase.name}]"]
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

    async def plan(self, request: AgentRequest) -> Sequence[Phase]:
        depth = _bounded_int(request.metadata.get("research_phases"), len(BASE_PLAN), 1, 20)
        phases = list(BASE_PLAN[: min(depth, len(BASE_PLAN))])
        for extra in range(len(BASE_PLAN), depth):
            phases.insert(len(phases) - 1, Phase(f"deep-dive-{extra - 2}", "Examine one more finding."))
        return phases

    def _delay_seconds(self, request: AgentRequest) -> float:
        default = self._settings.agent_delta_delay_ms
        return _bounded_int(request.metadata.get("delta_delay_ms"), default, 0, 5000) / 1000.0

    async def run_phase(self, context: PhaseContext) -> AsyncIterator[str]:
        if self.uses_model:
            async for delta in self._model_phase(context):
                yield delta
            return
        request = context.request
        count = _bounded_int(request.metadata.get("words_per_phase"), 48, 1, 2000)
        delay = self._delay_seconds(request)
        words = offline_words(request.question(), context.phase, context.phase_index, count)
        for position, word in enumerate(words):
            if context.should_stop:
                return
            yield word if position == 0 else " " + word
            if delay:
                await asyncio.sleep(delay)

    def _model(self) -> Any:
        """Create the Azure OpenAI client once (token-based unless an API key was configured)."""
        if self._client is None:
            from openai import AsyncAzureOpenAI

            s = self._settings
            if s.azure_openai_api_key:
                self._client = AsyncAzureOpenAI(
                    azure_endpoint=s.azure_openai_endpoint or "",
                    api_key=s.azure_openai_api_key,
                    api_version=s.azure_openai_api_version,
                )
            else:
                from azure.identity.aio import DefaultAzureCredential, get_bearer_token_provider

                credential = DefaultAzureCredential(managed_identity_client_id=s.managed_identity_client_id)
                self._client = AsyncAzureOpenAI(
                    azure_endpoint=s.azure_openai_endpoint or "",
                    azure_ad_token_provider=get_bearer_token_provider(
                        credential, "https://cognitiveservices.azure.com/.default"
                    ),
                    api_version=s.azure_openai_api_version,
                )
        return self._client

    async def _model_phase(self, context: PhaseContext) -> AsyncIterator[str]:
        request = context.request
        messages: list[dict[str, str]] = [
            {
                "role": "system",
                "content": (request.instructions or "You are a careful research assistant.")
                + f"\nYou are in phase {context.phase_index + 1} of {len(context.plan)}: "
                f"{context.phase.name}. Goal: {context.phase.goal} Be concise.",
            }
        ]
        for item in request.history:
            role = str(item.get("role", "user"))
            messages.append({"role": role if role in {"user", "assistant"} else "user", "content": _text(item)})
        for earlier in context.previous_texts():
            messages.append({"role": "assistant", "content": earlier})
        messages.append({"role": "user", "content": request.question()})
        stream = await self._model().chat.completions.create(
            model=self._settings.azure_openai_deployment, messages=messages, stream=True
        )
        async for chunk in stream:
            if context.should_stop:
                break
            for choice in chunk.choices:
                if choice.delta and choice.delta.content:
                    yield choice.delta.content


def _text(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    return "".join(str(p.get("text", "")) for p in content or [] if isinstance(p, dict))
