"""The OpenAI Agents SDK (``openai-agents``), unmodified, against the service with the default offline agent.

The SDK's default ``Runner`` loop: the model (here the offline research agent, which calls a function tool
when it is offered one and has no tool output yet: resilient/agents/research.py) asks for ``lookup``; the
SDK runs it, sends its output back, and the second response quotes it in the final answer. By default the
SDK resends the whole history on each call (``function_call`` + ``function_call_output`` items in
``input``); ``ModelSettings(store=False)`` does the same with nothing stored; ``auto_previous_response_id``
and ``conversation_id`` keep the history on the server instead.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from agents import (
    Agent,
    ModelSettings,
    OpenAIResponsesModel,
    Runner,
    RunResult,
    RunResultStreaming,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

pytestmark = pytest.mark.azurite

set_tracing_disabled(True)  # no trace export to api.openai.com

QUESTION = "What do durable timers do?"
MARKER = "FACT-7: durable timers survive restarts"
KNOBS = {"research_phases": "2", "words_per_phase": "6"}  # the offline agent's knobs: short answers


@pytest.fixture
async def client(api_base: str) -> AsyncIterator[AsyncOpenAI]:
    async with AsyncOpenAI(base_url=api_base, api_key="local") as opened:
        yield opened


def research_agent(client: AsyncOpenAI, calls: list[str], *, store: bool | None = None) -> Agent[Any]:
    @function_tool
    def lookup(query: str) -> str:
        """Look up facts about a topic."""
        calls.append(query)
        return MARKER

    settings = ModelSettings(metadata=KNOBS, store=store)
    return Agent(name="researcher", instructions="Answer briefly.", tools=[lookup],
                 model=OpenAIResponsesModel(model="research-agent", openai_client=client),
                 model_settings=settings)


MODES: dict[str, tuple[bool | None, dict[str, Any]]] = {
    "stateless": (None, {}),  # the SDK's default: the whole history in every request
    "store-false": (False, {}),
    "auto-previous-response-id": (None, {"auto_previous_response_id": True}),
}


def assert_tool_loop(result: RunResult | RunResultStreaming, calls: list[str]) -> None:
    """The tool ran once with the question, and the second model call's answer quotes its output."""
    assert calls == [QUESTION]
    kinds = [item.type for item in result.new_items]
    assert kinds[:2] == ["tool_call_item", "tool_call_output_item"], kinds
    assert kinds[-1] == "message_output_item", kinds
    assert len(result.raw_responses) == 2
    assert isinstance(result.final_output, str)
    assert MARKER in result.final_output, result.final_output


@pytest.mark.parametrize("mode", list(MODES))
async def test_runner_run_tool_loop(client: AsyncOpenAI, mode: str) -> None:
    store, kwargs = MODES[mode]
    calls: list[str] = []
    result = await Runner.run(research_agent(client, calls, store=store), QUESTION, **kwargs)
    assert_tool_loop(result, calls)
    first, second = (response.response_id for response in result.raw_responses)
    assert first and second and first != second
    if mode == "auto-previous-response-id":
        stored = await client.responses.retrieve(second)
        assert stored.previous_response_id == first


@pytest.mark.parametrize("mode", list(MODES))
async def test_runner_run_streamed_tool_loop(client: AsyncOpenAI, mode: str) -> None:
    store, kwargs = MODES[mode]
    calls: list[str] = []
    result = Runner.run_streamed(research_agent(client, calls, store=store), QUESTION, **kwargs)
    named: list[str] = []
    deltas: list[str] = []
    async for event in result.stream_events():
        if event.type == "run_item_stream_event":
            named.append(event.name)
        elif event.type == "raw_response_event" and event.data.type == "response.output_text.delta":
            deltas.append(event.data.delta)
    assert named[:2] == ["tool_called", "tool_output"], named
    assert "message_output_created" in named
    assert_tool_loop(result, calls)
    assert MARKER in "".join(deltas)


async def test_runner_conversation_id_tool_loop(client: AsyncOpenAI) -> None:
    """Server-side state in a conversation (the Conversations API): the SDK sends only the new items."""
    conversation = await client.conversations.create()
    calls: list[str] = []
    result = await Runner.run(research_agent(client, calls), QUESTION, conversation_id=conversation.id)
    assert_tool_loop(result, calls)
    items = await client.conversations.items.list(conversation.id, order="asc")
    kinds = [item.type for item in items.data]
    assert kinds[:3] == ["message", "function_call", "function_call_output"], kinds


async def test_runner_plain_and_streamed_without_tools(client: AsyncOpenAI) -> None:
    agent = Agent(name="plain", instructions="Answer briefly.",
                  model=OpenAIResponsesModel(model="research-agent", openai_client=client),
                  model_settings=ModelSettings(metadata=KNOBS))
    result = await Runner.run(agent, "Say hello")
    assert isinstance(result.final_output, str) and "On Say hello" in result.final_output
    streamed = Runner.run_streamed(agent, "Say hello")
    deltas = [event.data.delta async for event in streamed.stream_events()
              if event.type == "raw_response_event" and event.data.type == "response.output_text.delta"]
    assert streamed.final_output == result.final_output
    assert result.final_output in "".join(deltas)
