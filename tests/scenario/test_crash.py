"""Crash recovery end to end: kill the worker process in the middle of a phase, under the host double.

The crash is the template's own ``POST /ops/crash`` (``os._exit`` in the worker, enabled by an app
setting), exactly what the demo does under ``func start`` or in Azure. The double restarts the worker and,
as the Functions host does, records the in-flight activity as failed with the worker-exit reason (it is not
re-delivered): the orchestrator retries that phase after its crash timer.
"""

from __future__ import annotations

import contextlib
from typing import Any

import httpx
import pytest
from openai import OpenAI

from tests.hostdouble.api import HostDouble
from tests.scenario.conftest import knobs, rebuild, wait_until

pytestmark = [pytest.mark.azurite, pytest.mark.slow(seconds=27)]


def _crash(double: HostDouble) -> None:
    before = double.stats()["worker_restarts"]
    with contextlib.suppress(httpx.HTTPError):  # the worker dies while answering: that is the point
        httpx.post(f"{double.base_url}/ops/crash", timeout=10)
    double.wait_for_worker_restarts(before + 1, timeout=60)


def _read_until(stream: Any, stop: Any) -> list[Any]:
    seen: list[Any] = []
    try:
        for event in stream:
            seen.append(event)
            if stop(event, seen):
                break
    except Exception:
        pass
    return seen


def test_worker_killed_inside_phase_two_recovers_with_one_repeated_phase(client: OpenAI, double: HostDouble) -> None:
    before = double.stats()
    stream = client.responses.create(model="m", input="Survive a crash", stream=True, background=True,
                                     metadata=knobs(phases=3, words=30, delay_ms=20))

    def in_phase_two(event: Any, seen: list[Any]) -> bool:
        deltas = [e for e in seen if e.type == "response.output_text.delta" and e.output_index == 1]
        return len(deltas) >= 5

    first = _read_until(stream, in_phase_two)
    response_id = first[0].response.id
    _crash(double)
    stream.close()

    rest = list(client.responses.retrieve(response_id, stream=True, starting_after=first[-1].sequence_number))
    events = first + rest
    sequence = [e.sequence_number for e in events]
    assert sequence == list(range(len(events))), "gap or duplicate across the crash"
    assert events[-1].type == "response.completed"
    kinds = [e.type for e in events]
    assert kinds.count("response.created") == 1
    resets = [e for e in events[len(first):] if e.type == "response.in_progress"]
    assert len(resets) == 1, "exactly one recovery reset"
    assert [o.content[0].text for o in resets[0].response.output] == [
        e.item.content[0].text for e in first if e.type == "response.output_item.done"
    ], "the reset carries the snapshot as of the last checkpoint"

    final = client.responses.retrieve(response_id)
    assert final.status == "completed" and len(final.output) == 3
    assert [(i["id"], i["text"]) for i in rebuild(events)] == [(o.id, o.content[0].text) for o in final.output]

    # The client's stream helper accepts the whole recovery stream; its final response equals GET.
    with client.responses.stream(response_id=response_id, starting_after=-1) as replay:
        helper = replay.get_final_response()
    assert [o.content[0].text for o in helper.output] == [o.content[0].text for o in final.output]
    assert [o.id for o in helper.output] == [o.id for o in final.output] and helper.status == final.status

    # Identical output to a fault-free run of the same (deterministic) agent.
    clean = client.responses.create(model="m", input="Survive a crash", metadata=knobs(phases=3, words=30))
    assert [o.content[0].text for o in clean.output] == [o.content[0].text for o in final.output]

    stats = double.stats()

    def delta(counter: str) -> int:
        return int(stats[counter].get("run_phase", 0)) - int(before[counter].get("run_phase", 0))

    # The host failed the killed run_phase (worker exit) and the orchestrator called it once more: one phase
    # repeated. 3 phases + that 1 retry for the crashed run, 3 for the clean run; nothing re-delivered.
    assert delta("activity_failures_worker_exit") == 1, "one phase repeated"
    assert delta("activity_deliveries") == 3 + 1 + 3
    assert delta("activity_redeliveries") == 0


def test_worker_killed_between_runs_and_polling_still_completes(client: OpenAI, double: HostDouble) -> None:
    created = client.responses.create(model="m", input="no client attached", background=True,
                                      metadata=knobs(phases=3, words=20, delay_ms=15))
    wait_until(lambda: len(client.responses.retrieve(created.id).output) >= 1)
    _crash(double)
    done = wait_until(lambda: (r := client.responses.retrieve(created.id)).status == "completed" and r, timeout=60)
    assert len(done.output) == 3
    events = list(client.responses.retrieve(created.id, stream=True, starting_after=-1))
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_non_background_stream_killed_is_failed_not_rerun(client: OpenAI, double: HostDouble) -> None:
    stream = client.responses.create(model="m", input="fragile", stream=True,
                                     metadata=knobs(phases=2, words=40, delay_ms=20))
    first = _read_until(stream, lambda e, seen: e.type == "response.output_text.delta")
    response_id = first[0].response.id
    _crash(double)
    final = wait_until(lambda: (r := client.responses.retrieve(response_id)).status != "in_progress" and r,
                       timeout=60)
    assert final.status == "failed"
    assert final.error is not None and final.error.code == "server_error"
