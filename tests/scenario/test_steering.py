"""Steerable conversations end to end (S1, S2, S4, S5) with the openai client under the host double.

S3 (steering off → 409) and fork detection are covered at the service level in
tests/integration/test_chains.py, where the setting can be flipped without another host.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from openai import OpenAI

from tests.hostdouble.api import HostDouble
from tests.scenario.conftest import knobs, wait_until
from tests.scenario.test_crash import _crash

pytestmark = pytest.mark.azurite

TERMINAL = ("completed", "failed", "cancelled", "incomplete")


def _conv(client: OpenAI) -> str:
    """A conversation created as a client creates it (a turn's ``conversation`` must exist)."""
    return client.conversations.create().id


def _events(client: OpenAI, response_id: str) -> list[Any]:
    return list(client.responses.retrieve(response_id, stream=True, starting_after=-1))


def _in_progress_window(client: OpenAI, response_id: str) -> tuple[float, float]:
    """(first in_progress, terminal) as observed by polling the status."""
    start = wait_until(lambda: client.responses.retrieve(response_id).status != "queued" and time.monotonic(),
                       timeout=60, interval=0.02)
    end = wait_until(lambda: client.responses.retrieve(response_id).status in TERMINAL and time.monotonic(),
                     timeout=60, interval=0.02)
    return start, end


def test_new_turn_is_queued_and_steers_the_running_turn_to_finish_early(client: OpenAI) -> None:
    conv = _conv(client)
    first = client.responses.create(model="m", input="long question", background=True, conversation=conv,
                                    metadata=knobs(phases=3, words=300, delay_ms=10))
    wait_until(lambda: client.responses.retrieve(first.id).status == "in_progress")
    time.sleep(0.3)  # a few deltas into phase 0
    second = client.responses.create(model="m", input="follow-up", background=True, conversation=conv,
                                     metadata=knobs(phases=2, words=5))
    assert second.status == "queued"
    done_first = wait_until(lambda: (r := client.responses.retrieve(first.id)).status in TERMINAL and r, timeout=60)
    assert done_first.status == "completed"  # S2: steered turns complete (with partial output)
    assert len(done_first.output) < 3 or done_first.output[-1].status == "incomplete"
    done_second = wait_until(lambda: (r := client.responses.retrieve(second.id)).status in TERMINAL and r,
                             timeout=60)
    assert done_second.status == "completed" and len(done_second.output) == 2
    first_events, second_events = _events(client, first.id), _events(client, second.id)
    assert first_events[-1].type == "response.completed"
    assert [e.type for e in second_events][:3] == ["response.created", "response.queued", "response.in_progress"]
    # S1: the second turn started only after the first one finished.
    assert second_events[2].response.created_at >= first_events[0].response.created_at


def test_streaming_post_on_a_busy_chain_shows_queued_then_runs(client: OpenAI) -> None:
    conv = _conv(client)
    client.responses.create(model="m", input="busy", background=True, conversation=conv,
                            metadata=knobs(phases=2, words=100, delay_ms=10))
    stream = client.responses.create(model="m", input="next", background=True, stream=True, conversation=conv,
                                     metadata=knobs(phases=1, words=4))
    events = list(stream)
    kinds = [e.type for e in events]
    assert kinds[:3] == ["response.created", "response.queued", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_cancel_of_a_queued_turn_removes_it_and_the_next_turn_still_runs(client: OpenAI) -> None:
    conv = _conv(client)
    running = client.responses.create(model="m", input="a", background=True, conversation=conv,
                                      metadata=knobs(phases=2, words=200, delay_ms=10))
    wait_until(lambda: client.responses.retrieve(running.id).status == "in_progress")
    queued = client.responses.create(model="m", input="b", background=True, conversation=conv,
                                     metadata=knobs(phases=1, words=3))
    last = client.responses.create(model="m", input="c", background=True, conversation=conv,
                                   metadata=knobs(phases=1, words=3))
    assert client.responses.cancel(queued.id).status == "cancelled"
    for rid, status in ((running.id, "completed"), (queued.id, "cancelled"), (last.id, "completed")):
        final = wait_until(lambda rid=rid: (r := client.responses.retrieve(rid)).status in TERMINAL and r, timeout=60)
        assert final.status == status, rid
    queued_kinds = [e.type for e in _events(client, queued.id)]
    assert "response.in_progress" not in queued_kinds and queued_kinds[-1] == "response.failed"


def test_two_chains_run_concurrently(client: OpenAI) -> None:
    a = client.responses.create(model="m", input="x", background=True, conversation=_conv(client),
                                metadata=knobs(phases=2, words=40, delay_ms=15))
    b = client.responses.create(model="m", input="y", background=True, conversation=_conv(client),
                                metadata=knobs(phases=2, words=40, delay_ms=15))
    windows: dict[str, tuple[float, float]] = {}
    threads = [threading.Thread(target=lambda rid=rid: windows.__setitem__(rid, _in_progress_window(client, rid)))
               for rid in (a.id, b.id)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=90)
    (a_start, a_end), (b_start, b_end) = windows[a.id], windows[b.id]
    assert a_start < b_end and b_start < a_end, "S5: turns on different chains overlap in time"


def _steer_while_polling(client: OpenAI) -> None:
    conv = _conv(client)
    first = client.responses.create(model="m", input="one", background=True, conversation=conv,
                                    metadata=knobs(phases=2, words=60, delay_ms=5))
    stop = threading.Event()
    seen: dict[str, list[str]] = {}

    def poll(rid: str) -> None:
        while not stop.is_set():
            seen.setdefault(rid, []).append(client.responses.retrieve(rid).status)
            time.sleep(0.02)

    pollers = [threading.Thread(target=poll, args=(first.id,))]
    pollers[0].start()
    try:
        wait_until(lambda: client.responses.retrieve(first.id).status == "in_progress")
        second = client.responses.create(model="m", input="two", background=True, conversation=conv,
                                         metadata=knobs(phases=1, words=3))
        pollers.append(threading.Thread(target=poll, args=(second.id,)))
        pollers[1].start()
        for rid in (first.id, second.id):
            assert wait_until(lambda rid=rid: client.responses.retrieve(rid).status in TERMINAL, timeout=60)
    finally:
        stop.set()
        for thread in pollers:
            thread.join(timeout=10)
    assert client.responses.retrieve(first.id).status == "completed"
    assert client.responses.retrieve(second.id).status == "completed"
    # The pollers really hammered both turns through the steering window.
    assert "in_progress" in seen[first.id] and len(seen[first.id]) >= 5
    assert len(seen[second.id]) >= 1 and set(seen[second.id]) <= {"queued", "in_progress", "completed"}


def test_polling_every_20ms_during_steering_never_leaves_a_turn_stuck(client: OpenAI) -> None:
    """The reference SDK leaves turn 1 in_progress forever when polled in this window (5 of 5 tries)."""
    for _ in range(3):
        _steer_while_polling(client)


def test_worker_crash_during_a_steered_turn(client: OpenAI, double: HostDouble) -> None:
    conv = _conv(client)
    first = client.responses.create(model="m", input="one", background=True, conversation=conv,
                                    metadata=knobs(phases=2, words=200, delay_ms=10))
    wait_until(lambda: client.responses.retrieve(first.id).status == "in_progress")
    second = client.responses.create(model="m", input="two", background=True, conversation=conv,
                                     metadata=knobs(phases=2, words=40, delay_ms=15))
    wait_until(lambda: client.responses.retrieve(second.id).status == "in_progress", timeout=60)
    _crash(double)
    for rid in (first.id, second.id):
        final = wait_until(lambda rid=rid: (r := client.responses.retrieve(rid)).status in TERMINAL and r, timeout=90)
        assert final.status == "completed"
        events = _events(client, rid)
        assert [e.sequence_number for e in events] == list(range(len(events)))
