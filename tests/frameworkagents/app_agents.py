"""The Agent Framework agents the framework tests plug into the app (``RESILIENT_AGENT=...``).

They talk to the fake model at ``FAKE_MODEL_URL`` (an OpenAI-compatible Chat Completions server) and
record every side effect of their tools in the file ``SIDE_EFFECTS_FILE`` (one JSON line per effect), so
a test can count how often a tool really ran across worker kills.
"""

from __future__ import annotations

import json
import os
from typing import Annotated, Any

from agent_framework import Agent, tool
from agent_framework.openai import OpenAIChatCompletionClient

from resilient.agents.framework import idempotency_key


def _record(effect: str, **details: Any) -> None:
    path = os.environ.get("SIDE_EFFECTS_FILE")
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps({"effect": effect, "key": idempotency_key(), **details}) + "\n")


@tool
def send_email(to: Annotated[str, "Who gets the e-mail"]) -> str:
    """Send an e-mail (a side effect: it must not run twice)."""
    _record("send_email", to=to)
    return f"e-mail sent to {to}"


@tool(approval_mode="always_require")
def refund(order: Annotated[str, "The order to refund"]) -> str:
    """Refund an order (needs a person's approval first)."""
    _record("refund", order=order)
    return f"order {order} refunded"


def _client() -> OpenAIChatCompletionClient:
    return OpenAIChatCompletionClient(model="fake", api_key="fake-key",
                                      base_url=os.environ["FAKE_MODEL_URL"].rstrip("/") + "/v1")


def build() -> Agent:
    """A tool-loop agent: the model decides to call ``send_email`` or ``refund``, then answers."""
    return Agent(client=_client(), name="mailer", instructions="You send e-mails and refunds.",
                 tools=[send_email, refund])


class NotResumable:
    """A phase-API agent that must not run twice (``resumable = False``): one slow phase."""

    resumable = False

    async def plan(self, request: Any) -> list[Any]:
        from resilient.agents.base import Phase

        return [Phase("once")]

    async def run_phase(self, context: Any) -> Any:
        import asyncio

        for word in ("careful", "words", "streamed", "slowly", "once"):
            yield word + " "
            await asyncio.sleep(0.3)


def build_not_resumable() -> NotResumable:
    return NotResumable()

