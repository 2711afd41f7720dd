"""An Agent Framework tool loop killed at every event of its run (SIGKILL to the worker right after the
client saw event k): the run completes, the reconnecting client's log is contiguous with one terminal
event, the final output is the fault-free one, and the tool ran once, or at most twice when the kill came
before its step's checkpoint (the one window CONTRACT.md names)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI

from tests.frameworkagents.conftest import effects_of
from tests.frameworkagents.model import ToolLoop
from tests.hostdouble.api import HostDouble
from tests.reliability.conftest import follow, kill, read_events

pytestmark = pytest.mark.slow(seconds=85)  # about that long in all; see tests/conftest.py

FAULT_FREE_TYPES = 13  # events of the fault-free run (asserted below, so a change of the stream shows here)


def fault_free(client: OpenAI) -> list[Any]:
    with client.responses.create(model="fake", input="please e-mail bob", stream=True, background=True) as stream:
        events, broken = read_events(stream)
    assert not broken and events[-1].type == "response.completed"
    return events


def test_the_fault_free_run_has_the_events_the_matrix_kills_at(client: OpenAI, policy: ToolLoop) -> None:
    assert len(fault_free(client)) == FAULT_FREE_TYPES


@pytest.mark.parametrize("kill_after", range(1, FAULT_FREE_TYPES - 1))
def test_killed_after_event(kill_after: int, client: OpenAI, double: HostDouble, effects_file: Path,
                            policy: ToolLoop) -> None:
    policy.answer_delay = 0.05  # the answer streams over a few hundred ms: kills land inside it too
    stream = client.responses.create(model="fake", input="please e-mail bob", stream=True, background=True)
    with stream:
        seen, _ = read_events(stream, stop=lambda event, got: len(got) > kill_after)
        response_id = seen[0].response.id
        kill(double)
    more, notes = follow(client, response_id, seen[-1].sequence_number)
    events = seen + more
    assert events[-1].type == "response.completed", notes
    numbers = [e.sequence_number for e in events]
    assert numbers == list(range(len(numbers)))  # no gap, no repeat
    assert [e.type for e in events].count("response.completed") == 1
    final = client.responses.retrieve(response_id)
    assert [i.type for i in final.output] == ["mcp_call", "message"]
    assert final.output_text == "Done: e-mail sent to bob."
    ran = len(effects_of(effects_file, response_id))
    answer_started = any(e.type == "response.output_item.added" and e.item.type == "message" for e in seen)
    assert ran == 1 if answer_started else 1 <= ran <= 2, (kill_after, ran)
