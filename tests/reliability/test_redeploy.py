"""A new version of the orchestrator deployed while a run is in flight (docs/OPERATIONS.md, "Deploying a new
version while runs are in flight").

The app runs from a copy of the repository's code; mid-run the copy's orchestrator gains a step (an
``inspect_response`` call before every phase after the first) and the worker is killed, so the platform
restarts it on the new code. The next episode replays the old history with the new code: the activity at a
sequence number has another name, and the host fails the orchestration for good (DurableTask.Core's
non-determinism check, modelled by the double). The run's row is still active, so the repair path (woken
by the reconnecting client) starts a new execution on the new code, which resumes from the checkpoints:
the run completes with the fault-free text, contiguous events, one terminal event, and no finished phase
streamed again.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.hostdouble.api import HostDouble
from tests.reliability.conftest import (
    DELAY_MS,
    PHASES,
    QUESTION,
    TERMINAL,
    WORDS,
    clean_run,
    default_storage,
    double_env,
    follow,
    make_client,
    read_events,
    settle,
    texts,
)
from tests.scenario.conftest import ROOT, knobs

pytestmark = [pytest.mark.azurite, pytest.mark.slow(seconds=14)]

STEP_BEFORE = ("                result = yield from self.run_phase(index, last=is_open or index == phases - 1, "
               "position=position)\n")
NEW_STEP = "                yield from self.try_call(INSPECT, {\"response_id\": rid})  # the new version's step\n"


def _copy_app(target: Path) -> Path:
    for name in ("function_app.py", "host.json"):
        shutil.copy(ROOT / name, target / name)
    shutil.copytree(ROOT / "resilient", target / "resilient", ignore=shutil.ignore_patterns("__pycache__"))
    return target


def _deploy_new_orchestrator(app: Path) -> None:
    source = app / "resilient" / "engine" / "orchestration" / "orchestrator.py"
    code = source.read_text()
    assert code.count(STEP_BEFORE) == 1, "the orchestrator changed: update this test's edit"
    source.write_text(code.replace(STEP_BEFORE, NEW_STEP + STEP_BEFORE))


def test_a_changed_orchestrator_fails_the_replay_and_the_run_resumes_from_its_checkpoints(tmp_path: Path) -> None:
    app = _copy_app(tmp_path)
    with HostDouble(app, env=double_env(default_storage()), settings=None) as double:
        client = make_client(double.base_url)
        clean = clean_run(client)
        stream = client.responses.create(model="m", input=QUESTION, stream=True, background=True,
                                         metadata=knobs(PHASES, WORDS, DELAY_MS))
        with stream:
            events, _ = read_events(stream, lambda e, s: e.type == "response.output_text.delta"
                                    and e.output_index == 1)
            response_id = events[0].response.id
            _deploy_new_orchestrator(app)
            restarts = double.stats()["worker_restarts"]
            double.kill_worker()  # phase 1's activity fails; the worker comes back on the new code
        double.wait_for_worker_restarts(restarts + 1, timeout=60)
        rest, notes = follow(client, response_id, events[-1].sequence_number)
        events += rest
        log = double.log()
        failed = rf"instance {response_id} \(responses_orchestrator\) Failed: [^\n]*Non-Deterministic workflow detected"
        assert re.search(failed, log), notes
        assert re.search(rf"repaired \| response_id={response_id} [^\n]*found=Failed", log), notes
        seqs = [e.sequence_number for e in events]
        assert seqs == list(range(len(events))), notes
        kinds = [e.type for e in events]
        assert sum(k in TERMINAL for k in kinds) == 1 and kinds[-1] == "response.completed"
        final = client.responses.retrieve(response_id)
        assert final.status == "completed" and texts(final.output) == texts(clean[-1].response.output)
        # phase 0 was checkpointed before the kill: the new execution did not stream it again; phase 1,
        # killed mid-stream, ran once more after one recovery reset (R4: at an unused output index)
        assert kinds.count("response.output_item.added") == PHASES + 1, kinds
        assert kinds.count("response.in_progress") == 2  # the opening one and the recovery reset
        assert settle(double, response_id) == "Completed"
