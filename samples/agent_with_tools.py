"""An Agent Framework agent with tools, hosted step by step: ``RESILIENT_AGENT=samples.agent_with_tools:build``.

The model: any OpenAI-compatible Chat Completions endpoint (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``,
``OPENAI_MODEL``), or Azure OpenAI with the app's managed identity (``AZURE_OPENAI_ENDPOINT`` and
``AZURE_OPENAI_DEPLOYMENT``). Offline, start the local stub model first (``python -m samples.stub_model``)
and point ``OPENAI_BASE_URL`` at it (its default, ``http://127.0.0.1:8089/v1``).

Every step (one model call and the tools it asked for) is checkpointed, and inside a step the model's
decision and each tool's result are kept as they come: after a crash, the model is not asked again and a
tool that returned is not run again. ``book_meeting`` shows how a tool makes its side effect safe in the
one window where it can repeat (it was running when the worker died): it passes ``idempotency_key()``
(the same on every attempt of that tool call) to the service it calls. ``cancel_meeting`` asks a person
first (``approval_mode="always_require"``): the turn ends with an ``mcp_approval_request``, and the next
turn's ``mcp_approval_response`` runs it or not.
"""

from __future__ import annotations

import os
from typing import Annotated

from agent_framework import Agent, tool
from agent_framework.openai import OpenAIChatCompletionClient

from resilient.agents.framework import idempotency_key

BOOKED: dict[str, str] = {}  # stands in for a calendar service that honours idempotency keys


@tool
def find_free_slot(day: Annotated[str, "The day, e.g. 'Tuesday'"]) -> str:
    """Find a free half hour on a day (read only: safe to repeat)."""
    return f"{day} 10:30"


@tool
def book_meeting(slot: Annotated[str, "The slot find_free_slot returned"],
                 title: Annotated[str, "What the meeting is about"]) -> str:
    """Book a meeting (a side effect: keyed so that a repeated step books it once)."""
    key = idempotency_key() or f"{slot}/{title}"
    booking = BOOKED.setdefault(key, f"booking-{len(BOOKED) + 1}")
    return f"{title} booked at {slot} ({booking})"


@tool(approval_mode="always_require")
def cancel_meeting(booking: Annotated[str, "The booking to cancel"]) -> str:
    """Cancel a booking (a person approves first)."""
    return f"{booking} cancelled"


def _client() -> OpenAIChatCompletionClient:
    endpoint = os.environ.get("AZURE_OPENAI_ENDPOINT")
    deployment = os.environ.get("AZURE_OPENAI_DEPLOYMENT")
    if endpoint and deployment:
        from azure.identity import DefaultAzureCredential

        return OpenAIChatCompletionClient(deployment, azure_endpoint=endpoint, credential=DefaultAzureCredential())
    return OpenAIChatCompletionClient(os.environ.get("OPENAI_MODEL", "stub"),
                                      api_key=os.environ.get("OPENAI_API_KEY", "no-key-needed-for-the-stub"),
                                      base_url=os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:8089/v1"))


def build() -> Agent:
    return Agent(client=_client(), name="scheduler",
                 instructions="You schedule meetings. Find a slot, then book it; cancel only when asked.",
                 tools=[find_free_slot, book_meeting, cancel_meeting])
