"""A worker that starts while runs are unfinished says so once, with when they resume (docs/OPERATIONS.md)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import httpx
import pytest

from tests.hostdouble.api import HostDouble
from tests.scenario.conftest import knobs, wait_until

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow(seconds=35)]  # a worker restart and a resumed run: about 30 s


def test_a_restart_with_unfinished_runs_logs_one_line_saying_when_they_resume() -> None:
    env = {
        "AzureWebJobsStorage": os.environ.get("AzureWebJobsStorage", "UseDevelopmentStorage=true"),
        "RESILIENT_STORAGE_PREFIX": "n" + secrets.token_hex(4),
        "RESILIENT_AGENT_DELTA_DELAY_MS": "0",
    }
    with HostDouble(ROOT, env=env, settings=None) as double, httpx.Client(base_url=double.base_url,
                                                                          timeout=30) as http:
        fresh = double.log()
        assert "unfinished run" not in fresh  # nothing to resume: no line
        created = http.post("/responses", json={
            "model": "m", "input": "long", "background": True, "metadata": knobs(phases=3, words=400, delay_ms=20)})
        rid = created.json()["id"]
        wait_until(lambda: http.get(f"/responses/{rid}").json()["status"] == "in_progress")
        double.kill_worker()  # the run is unfinished when the next worker starts
        double.wait_for_worker_restarts(1)
        wait_until(lambda: "unfinished run" in double.log(), timeout=30)
        lines = [line for line in double.log().splitlines() if "unfinished run" in line]
        assert len(lines) == 1, lines
        assert "1 unfinished run (oldest created" in lines[0] and "by about" in lines[0], lines[0]
        wait_until(lambda: http.get(f"/responses/{rid}").json()["status"] == "completed", timeout=60)
