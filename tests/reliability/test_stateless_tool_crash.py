"""A stateless tool loop's tool-output turn survives a worker crash (CONTRACT R2-R4).

The turn carries the whole history itself (the user's question, the model's ``function_call`` and the
client's ``function_call_output``, no ``previous_response_id``), as the OpenAI Agents SDK and the Vercel AI
SDK send it. The worker is killed mid-run of that turn, inside its second phase; the client reconnects
with ``starting_after`` and reads to the end: the run completes, no event is lost or repeated, at most one
phase runs again, and the output equals a fault-free run of the same turn (the tool output quoted).
"""

from __future__ import annotations

from typing import Any

import pytest
from openai import OpenAI

from tests.hostdouble.api import HostDouble
from tests.reliability.conftest import (
    DELAY_MS,
    PHASES,
    QUESTION,
    WORDS,
    check_run,
    finish_run,
    kill,
    read_events,
    texts,
)
from tests.scenario.conftest import knobs
from tests.scenario.test_tools_and_approval import LOOKUP

pytestmark = [pytest.mark.azurite, pytest.mark.slow(seconds=8)]

CALL = {"type": "function_call", "id": "fc_stateless", "call_id": "call_stateless", "name": "lookup",
        "arguments": "{\"query\": \"Survive the crash matrix\"}", "status": "completed"}
HISTORY = [{"role": "user", "content": QUESTION}, CALL,
           {"type": "function_call_output", "call_id": "call_stateless", "output": "Crashes cost one phase."}]


def _stream(client: OpenAI) -> Any:
    return client.responses.create(model="m", input=HISTORY, tools=[LOOKUP], stream=True,  # type: ignore[arg-type, list-item]
                                   background=True, metadata=knobs(PHASES, WORDS, DELAY_MS))


def test_a_stateless_tool_output_turn_completes_across_a_worker_kill(client: OpenAI, double: HostDouble) -> None:
    with _stream(client) as stream:
        clean, broken = read_events(stream)
    assert not broken and clean[-1].type == "response.completed"
    assert "returned: Crashes cost one phase.\n" in texts(clean[-1].response.output)[-1], "the output is answered"

    def mid_second_phase(event: Any, seen: list[Any]) -> bool:
        return event.type == "response.output_text.delta" and event.output_index == 1 and sum(
            e.type == "response.output_text.delta" and e.output_index == 1 for e in seen) == 3

    before = double.stats()
    with _stream(client) as stream:
        events, broken = read_events(stream, mid_second_phase)
    response_id = events[0].response.id
    assert events[-1].type == "response.output_text.delta", "the kill lands inside the second phase"
    kill_after = events[-1].sequence_number
    kill(double)
    run = finish_run(client, double, response_id, events, before, [kill_after],
                     ["live stream broke"] if broken else [])
    assert (problems := check_run(client, run, clean)) == [], "\n".join(problems)
    resets = [e for e in run.events[kill_after + 1:] if e.type == "response.in_progress"]
    assert len(resets) == 1, "the crash inside the phase shows as one recovery reset"
    listed = client.responses.input_items.list(response_id, order="asc").data
    assert [i.type for i in listed] == ["message", "function_call", "function_call_output"]
