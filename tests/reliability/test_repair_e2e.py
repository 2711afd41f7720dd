"""The repair path end to end: the app under the host double, the official ``openai`` client, real Azurite.

An orchestration is taken away mid-run through the Durable HTTP API, as an operator (terminate) or a lost
history (purge: the instance is missing) would; on the real host a worker dying during an orchestrator
episode leaves it Failed, which the repair path treats the same way. Its activity in flight goes on (a
zombie, as on the real host), and nothing in the double restarts the orchestration: only the app's repair
path can. A client that reconnects with ``starting_after`` and sees no progress triggers it.

For each: the run completes with the fault-free text, the reconnecting client's events are 0..N without
gap or duplicate with exactly one terminal event, and the orchestration ends ``Completed`` (a new
execution under the same instance id).

On a chain: the holder's orchestration is terminated while a second turn waits for the lock, and only the
second turn's client is reading. The waiting turn's lock recheck inspects the holder, which asks the repair
path to look at it: the holder resumes, finishes, and hands the lock on.

Last: with a short ``RESILIENT_STREAM_MAX_SECONDS`` a stream ends cleanly without a terminal event (the
``openai`` client's loop just ends) and ``retrieve(..., starting_after=last)`` continues it.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest
from openai import OpenAI

from resilient.engine.orchestration import orchestrator as orch
from tests.hostdouble.api import HostDouble
from tests.reliability.conftest import (
    FREE_LOCK,
    PHASES,
    QUESTION,
    TERMINAL,
    WORDS,
    chain_lock_once,
    chain_lock_once_free,
    default_storage,
    double_env,
    follow,
    make_client,
    read_events,
    settle,
    texts,
)
from tests.scenario.conftest import ROOT, knobs

pytestmark = [pytest.mark.azurite, pytest.mark.slow(seconds=50)]

SLOW_DELAY_MS = 120  # slow enough that the run is still in phase 0 or 1 when its orchestration is taken away


def _durable(double: HostDouble, method: str, path: str) -> httpx.Response:
    return httpx.request(method, f"{double.base_url}/runtime/webhooks/durabletask/{path}", timeout=10)


def _check(events: list[Any], clean: list[Any]) -> None:
    assert [e.sequence_number for e in events] == list(range(len(events))), [e.sequence_number for e in events]
    kinds = [e.type for e in events]
    assert kinds.count("response.created") == 1
    assert sum(k in TERMINAL for k in kinds) == 1 and kinds[-1] == "response.completed", kinds[-3:]
    assert texts(events[-1].response.output) == texts(clean[-1].response.output)


def _start_and_read(client: OpenAI, upto: int, **body: Any) -> tuple[str, list[Any]]:
    stream = client.responses.create(model="m", input=QUESTION, stream=True, background=True,
                                     metadata=knobs(PHASES, WORDS, SLOW_DELAY_MS), **body)
    with stream:
        events, _ = read_events(stream, lambda event, seen: event.sequence_number >= upto)
    return events[0].response.id, events


@pytest.mark.parametrize(("how", "method", "path"), [
    ("terminated", "POST", "instances/{id}/terminate?reason=operator"),
    ("missing", "DELETE", "instances/{id}"),
])
def test_a_run_whose_orchestration_was_taken_away_resumes_for_a_reconnecting_client(
        client: OpenAI, double: HostDouble, clean: list[Any], how: str, method: str, path: str) -> None:
    response_id, events = _start_and_read(client, 6)
    assert _durable(double, method, path.format(id=response_id)).status_code in (200, 202)
    # terminate is a message the orchestration processes (202 Accepted), so its status changes a moment later
    gone = double.status(response_id) if how == "missing" else double.wait_for_status(
        response_id, ("Terminated",), timeout=30.0)
    assert (gone is None) if how == "missing" else (gone is not None and gone["runtimeStatus"] == "Terminated")
    started = time.monotonic()
    more, notes = follow(client, response_id, events[-1].sequence_number, deadline_s=90.0)
    events += more
    _check(events, clean)
    assert settle(double, response_id, timeout=30.0) == "Completed", notes
    assert time.monotonic() - started < 90.0
    final = client.responses.retrieve(response_id)
    assert final.status == "completed" and texts(final.output) == texts(clean[-1].response.output)


def test_a_waiting_turn_gets_its_dead_holder_resumed_and_then_runs(client: OpenAI, double: HostDouble) -> None:
    conversation = client.conversations.create().id
    holder, _ = _start_and_read(client, 6, conversation=conversation)
    assert _durable(double, "POST", f"instances/{holder}/terminate?reason=operator").status_code == 202
    follow_up = client.responses.create(model="m", input="and then?", stream=True, background=True,
                                        conversation=conversation, metadata=knobs(1, 4, 0))
    with follow_up:
        events, broken = read_events(follow_up)
    assert not broken and events[-1].type == "response.completed", [e.type for e in events][-3:]
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.queued"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    first = client.responses.retrieve(holder)
    assert first.status == "completed"  # resumed, then steered to finish by the waiting turn (S2)
    assert settle(double, holder) == "Completed"
    # The follow-up's client saw its terminal event, written by finalize; its orchestration releases the lock
    # in a later episode, and the entity handles that signal in a batch of its own after that.
    assert settle(double, events[0].response.id) == "Completed"
    assert chain_lock_once_free(double, conversation) == FREE_LOCK



def test_a_turn_behind_a_finished_holder_that_never_released_runs_at_once(
        client: OpenAI, double: HostDouble) -> None:
    """On the real host an orchestration whose episode dies with the worker is Failed for good, also the
    episode right after the run's finalize: the turn is complete, but the chain lock still names it, and the
    repair path leaves a finished run alone. The next turn's create sees nothing unfinished ahead of it, so
    its orchestration frees that lock at once: it is never shown ``queued`` and does not wait for its first
    lock recheck (15 s)."""
    conversation = client.conversations.create().id
    first = client.responses.create(model="m", input=QUESTION, conversation=conversation, metadata=knobs(1, 4, 0))
    assert first.status == "completed"
    assert settle(double, first.id) == "Completed"
    assert chain_lock_once_free(double, conversation) == FREE_LOCK
    # The lock as that Failed orchestration leaves it: still held by the finished turn. (The input goes as
    # JSON text, as the SDK's own signal_entity encodes it; the Python SDK decodes an entity's input twice.)
    signal = httpx.post(f"{double.durable_url}/entities/chain_lock/{conversation}?op=acquire",
                        json=json.dumps({"response_id": first.id}), timeout=10)
    assert signal.status_code == 202
    held = chain_lock_once(double, conversation, lambda lock: lock.get("active") == first.id, poll_s=0.1)
    assert held.get("active") == first.id, f"the signalled acquire never landed: {held}"
    started = time.monotonic()
    follow_up = client.responses.create(model="m", input="and then?", stream=True, background=True,
                                        conversation=conversation, metadata=knobs(1, 4, 0))
    with follow_up:
        events, broken = read_events(follow_up)
    took = time.monotonic() - started
    kinds = [e.type for e in events]
    assert not broken and kinds[-1] == "response.completed", kinds[-3:]
    assert "response.queued" not in kinds
    assert took < orch.LOCK_RECHECK_SECONDS[0], f"{took:.1f} s: the turn waited for a lock recheck"
    assert settle(double, events[0].response.id) == "Completed"
    assert chain_lock_once_free(double, conversation) == FREE_LOCK


def test_a_stream_past_its_time_limit_ends_cleanly_and_reconnecting_continues_it() -> None:
    env = {**double_env(default_storage()), "RESILIENT_STREAM_MAX_SECONDS": "1"}
    with HostDouble(ROOT, env=env, settings=None) as limited:
        client = make_client(limited.base_url)
        stream = client.responses.create(model="m", input=QUESTION, stream=True, background=True,
                                         metadata=knobs(2, 30, 100))  # ~6 s of events
        with stream:
            events, broken = read_events(stream)
        assert not broken and events and events[-1].type not in TERMINAL  # ended by the limit, quietly
        rid = events[0].response.id
        reconnects = 0
        while events[-1].type not in TERMINAL:
            with client.responses.retrieve(rid, stream=True, starting_after=events[-1].sequence_number) as more:
                got, broken = read_events(more)
            assert not broken and got
            events += got
            reconnects += 1
        assert reconnects >= 2
        assert [e.sequence_number for e in events] == list(range(len(events)))
        assert events[-1].type == "response.completed"
