"""The Agent Framework agents the framework tests plug into the app (``RESILIENT_AGENT=...``).

They talk to the fake model at ``FAKE_MODEL_URL`` (an OpenAI-compatible Chat Completions server) and
record every side effect of their tools in the file ``SIDE_EFFECTS_FILE`` (one JSON line per effect), so
a test can count how often a tool really ran across worker kills.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from typing import Annotated, Any

from agent_framework import Agent, AgentSession, ContextProvider, SessionContext, SupportsAgentRun, tool
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


@tool
def reserve(seat: Annotated[str, "The seat to reserve"]) -> str:
    """Reserve a seat (quick; a side effect)."""
    _record("reserve", seat=seat)
    return f"seat {seat} reserved"


CHARGE_SECONDS = 2.5  # long enough to kill the worker while it runs


@tool
async def charge(amount: Annotated[str, "How much to charge"]) -> str:
    """Charge a card (slow; a side effect: it records when it starts and when it is done)."""
    _record("charge_started", amount=amount)
    await asyncio.sleep(CHARGE_SECONDS)
    _record("charge", amount=amount)
    return f"{amount} charged"


class NameMemory(ContextProvider):
    """Remembers the user's name ("my name is ...") and counts the turns it has seen, in the session's state;
    tells the model both before every run once it knows the name."""

    def __init__(self) -> None:
        super().__init__("name_memory")

    async def before_run(self, *, agent: SupportsAgentRun, session: AgentSession, context: SessionContext,
                         state: dict[str, Any]) -> None:
        if state.get("name"):
            context.extend_instructions(self.source_id, f"The user's name is {state['name']}; "
                                                        f"turns remembered: {state.get('turns', 0)}.")

    async def after_run(self, *, agent: SupportsAgentRun, session: AgentSession, context: SessionContext,
                        state: dict[str, Any]) -> None:
        for message in context.input_messages:
            said = re.search(r"my name is (\w+)", message.text or "", re.IGNORECASE)
            if said:
                state["name"] = said.group(1)
        state["turns"] = int(state.get("turns", 0)) + 1


def _client() -> OpenAIChatCompletionClient:
    return OpenAIChatCompletionClient(model="fake", api_key="fake-key",
                                      base_url=os.environ["FAKE_MODEL_URL"].rstrip("/") + "/v1")


def build() -> Agent:
    """A tool-loop agent: the model decides to call ``send_email`` or ``refund``, then answers."""
    return Agent(client=_client(), name="mailer", instructions="You send e-mails and refunds.",
                 tools=[send_email, refund, reserve, charge], context_providers=[NameMemory()])


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

