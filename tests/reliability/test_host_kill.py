"""Acceptance: the whole host dies with runs in flight and the same command starts it again.

``python -m tests.hostdouble`` at its defaults (real crash semantics) runs ``function_app.py`` with the
repository's host.json (queue visibility timeout 1 min, polling at most every 5 s) on Azurite. Three
background runs stream to their clients; the whole process group (platform, host, worker) is SIGKILLed, as
a container crash would, and started again with the same command. Nothing of the dead host survives but
storage: the queue messages it held reappear when their visibility timeout expires.

Right after the restart a follow-up turn is created on the first run with ``previous_response_id``: that
run is not over, so the turn is ``queued`` and waits for it. Its arrival steers the first run to finish at
its next phase boundary (S2), so that run completes with a prefix of the fault-free output; the other two
complete with exactly the fault-free text.

Every client reconnects with ``starting_after`` (retrying 5xx and connection errors) and sees its log
0..N with no gap or duplicate and one terminal event, within two minutes of the kill; the follow-up then
runs and completes, and the chain lock is free.
"""

from __future__ import annotations

import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.hostdouble.api import HostDouble
from tests.reliability.conftest import (
    FREE_LOCK,
    TERMINAL,
    chain_lock_once_free,
    default_storage,
    follow,
    make_client,
    read_events,
    texts,
)
from tests.scenario.conftest import ROOT, knobs, rebuild

pytestmark = [pytest.mark.azurite, pytest.mark.slow(seconds=75)]

RUNS = 3
COMPLETE_WITHIN_S = 120.0
QUESTION = "Survive a host crash"
KNOBS = knobs(3, 20, 60)  # about 4 s of events per run: all three are mid-run when the host dies


def _contiguous_with_one_terminal(events: list[Any]) -> None:
    assert [e.sequence_number for e in events] == list(range(len(events))), [e.sequence_number for e in events]
    kinds = [e.type for e in events]
    assert kinds.count("response.created") == 1
    assert sum(k in TERMINAL for k in kinds) == 1 and kinds[-1] == "response.completed", kinds[-3:]


def test_three_runs_in_flight_survive_a_host_kill_and_a_queued_follow_up_runs_after() -> None:
    env = {"AzureWebJobsStorage": default_storage(), "RESILIENT_STORAGE_PREFIX": "k" + secrets.token_hex(4)}
    with HostDouble(ROOT, env=env, settings=None) as double:
        client = make_client(double.base_url)
        clean = texts(client.responses.create(model="m", input=QUESTION, metadata=KNOBS).output)
        assert len(clean) == 3

        seen: dict[str, list[Any]] = {}
        streams = []
        for _ in range(RUNS):
            stream = client.responses.create(model="m", input=QUESTION, stream=True, background=True,
                                             metadata=KNOBS)
            events, broken = read_events(stream, lambda e, s: e.type == "response.output_text.delta")
            assert not broken and events[-1].type == "response.output_text.delta"
            seen[events[0].response.id] = events
            streams.append(stream)
        first = next(iter(seen))
        assert all(client.responses.retrieve(rid).status == "in_progress" for rid in seen)

        killed = time.monotonic()
        double.kill_host()
        for stream in streams:
            stream.close()
        double.restart()  # the same command, port, settings and task hub

        follow_up = client.responses.create(model="m", input="and then?", background=True,
                                            previous_response_id=first, metadata=knobs(1, 4, 0))
        assert follow_up.status == "queued", "the first run is not over: the follow-up waits for it"

        def reconnect(response_id: str) -> tuple[list[Any], list[str], float]:
            more, notes = follow(client, response_id, seen[response_id][-1].sequence_number,
                                 deadline_s=COMPLETE_WITHIN_S + 30.0, attempts=500)
            return seen[response_id] + more, notes, time.monotonic() - killed

        with ThreadPoolExecutor(RUNS) as pool:
            outcomes = dict(zip(seen, pool.map(reconnect, seen), strict=True))

        for response_id, (events, notes, took) in outcomes.items():
            _contiguous_with_one_terminal(events)
            assert took < COMPLETE_WITHIN_S, f"{response_id} ended {took:.1f} s after the kill ({notes})"
            final = client.responses.retrieve(response_id)
            assert final.status == "completed"
            assert [(i["id"], i["text"]) for i in rebuild(events)] == [(o.id, texts([o])[0]) for o in final.output]
            assert texts(events[-1].response.output) == texts(final.output)
            if response_id == first:  # steered by the follow-up: a prefix of the fault-free output
                got = texts(final.output)
                assert len(got) < len(clean) and got[:-1] == clean[:max(0, len(got) - 1)], got
                assert not got or clean[len(got) - 1].startswith(got[-1]), got
            else:
                assert texts(final.output) == clean, f"{response_id}: output differs from the fault-free run"

        done = client.responses.retrieve(follow_up.id)
        deadline = time.monotonic() + 60.0
        while done.status not in ("completed", "failed", "cancelled", "incomplete") and time.monotonic() < deadline:
            time.sleep(0.2)
            done = client.responses.retrieve(follow_up.id)
        assert done.status == "completed" and len(done.output) == 1
        events = list(client.responses.retrieve(follow_up.id, stream=True, starting_after=-1))
        _contiguous_with_one_terminal(events)
        assert [e.type for e in events][:3] == ["response.created", "response.queued", "response.in_progress"]
        assert chain_lock_once_free(double, first) == FREE_LOCK
