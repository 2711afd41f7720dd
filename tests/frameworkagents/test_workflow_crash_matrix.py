"""A hosted workflow killed at every event of its run (SIGKILL to the worker right after the client saw event
k): kills land inside a superstep (``draft`` sleeps before its side effect) and between supersteps. The run
completes, the reconnecting client's log is contiguous with one terminal event, the output is the fault-free
one, only the superstep in flight runs again, and every superstep's effect carries one key (the same on a
repeat: a service given that key does the effect once)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI

from tests.fakemodel.server import FakeModel
from tests.frameworkagents.conftest import effects_of, framework_env
from tests.hostdouble.api import HostDouble
from tests.reliability.conftest import follow, kill, read_events
from tests.scenario.conftest import ROOT

pytestmark = pytest.mark.slow(seconds=100)  # about that long in all; see tests/conftest.py

FAULT_FREE_EVENTS = 15  # events of the fault-free run (asserted below, so a change of the stream shows here)
EXPECTED = "Drafted from the outline of matrix. Published."


@pytest.fixture(scope="module")
def matrix_double(fake_model: FakeModel, effects_file: Path) -> Iterator[HostDouble]:
    env = {**framework_env("tests.frameworkagents.app_workflow:build", fake_model, effects_file),
           "WORKFLOW_DRAFT_DELAY": "0.4"}
    with HostDouble(ROOT, env=env, settings=None) as running:
        yield running


@pytest.fixture(scope="module")
def matrix_client(matrix_double: HostDouble) -> OpenAI:
    return OpenAI(base_url=matrix_double.base_url, api_key="local", max_retries=0,
                  _strict_response_validation=True, timeout=60.0)


def run(client: OpenAI) -> Any:
    return client.responses.create(model="wf", input="matrix", stream=True, background=True)


def test_the_fault_free_run_has_the_events_the_matrix_kills_at(matrix_client: OpenAI) -> None:
    with run(matrix_client) as stream:
        events, broken = read_events(stream)
    assert not broken and events[-1].type == "response.completed"
    assert len(events) == FAULT_FREE_EVENTS, [e.type for e in events]


@pytest.mark.parametrize("kill_after", range(1, FAULT_FREE_EVENTS - 1))
def test_killed_after_event(kill_after: int, matrix_client: OpenAI, matrix_double: HostDouble,
                            effects_file: Path) -> None:
    with run(matrix_client) as stream:
        seen, _ = read_events(stream, stop=lambda event, got: len(got) > kill_after)
        response_id = seen[0].response.id
        kill(matrix_double)
    more, notes = follow(matrix_client, response_id, seen[-1].sequence_number)
    events = seen + more
    assert events[-1].type == "response.completed", notes
    numbers = [e.sequence_number for e in events]
    assert numbers == list(range(len(numbers)))  # no gap, no repeat
    final = matrix_client.responses.retrieve(response_id)
    assert final.output_text == EXPECTED
    assert [(i.type, i.status) for i in final.output] == [("message", "completed")] * 2  # draft's, publish's
    effects = effects_of(effects_file, response_id)
    ran = [e["effect"] for e in effects]
    assert list(dict.fromkeys(ran)) == ["outline", "draft", "publish"]  # in order, each superstep once ...
    assert len(ran) - 3 <= 1, ran  # ... but the one in flight at the kill, which may run again
    keys = {e["effect"]: {k["key"] for k in effects if k["effect"] == e["effect"]} for e in effects}
    assert [len(k) for k in keys.values()] == [1, 1, 1]  # a repeat carries its superstep's key
    assert [next(iter(keys[name])).split("/")[1] for name in ("outline", "draft", "publish")] == \
        ["step-0", "step-1", "step-2"]
