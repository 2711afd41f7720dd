"""The double's crash semantics, each as the real Functions host behaves (see README "Crash semantics").

Fixture app, real subprocesses, real Azurite. Every test starts its own double (they kill things).
"""

from __future__ import annotations

import faulthandler
import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.hostdouble.testkit import WAIT, done, history, markers, start, start_double, uid, wait, wait_until

pytestmark = pytest.mark.slow(seconds=85)  # about that long in all; see tests/conftest.py

TEST_TIMEOUT = 150
WORKER_EXIT = "python exited with code 137 (0x89)"


@pytest.fixture(autouse=True)
def _bounded() -> Iterator[None]:
    faulthandler.dump_traceback_later(TEST_TIMEOUT, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


def test_activity_in_flight_when_the_worker_dies_is_task_failed_not_redelivered(tmp_path: Path) -> None:
    with start_double() as double, httpx.Client(base_url=double.base_url, timeout=WAIT) as http:
        armed = double.kill_worker(target="activity", name="step", delay=0.3)
        assert armed == {"target": "activity", "name": "step", "delay": 0.3}
        instance = uid("guard")
        start(http, "guarded", instance, {"marker_dir": str(tmp_path), "sleep": 1.0, "tries": 3})
        status = done(http, instance)
        assert status["runtimeStatus"] == "Completed", status
        errors = status["output"]["errors"]
        assert len(errors) == 1, errors  # the orchestrator saw one failure and called the activity again
        # the SDK raises Exception("<Reason> \n <Details>"): the host's texts
        assert errors[0].startswith(f"Activity function 'step' failed: {WORKER_EXIT} \n ")
        assert "Microsoft.Azure.WebJobs.Script.Workers.WorkerProcessExitException" in errors[0]
        # the killed attempt started (its marker) and never ran again; the orchestrator's new call ran once
        assert (markers(tmp_path, "step-g-0"), markers(tmp_path, "step-g-1")) == (1, 1)
        failed = [e for e in history(double, instance) if e["EventType"] == 6]
        assert [e["Reason"] for e in failed] == [f"Activity function 'step' failed: {WORKER_EXIT}"]
        details = json.loads(failed[0]["Details"])
        assert details["$type"] == ("Microsoft.Azure.WebJobs.Script.Workers.WorkerProcessExitException, "
                                    "Microsoft.Azure.WebJobs.Script")
        assert details["Message"] == WORKER_EXIT
        stats = double.stats()
        assert stats["activity_failures_worker_exit"] == {"step": 1}
        assert stats["activity_redeliveries"] == {}
        assert stats["activity_deliveries"] == {"step": 2}
        assert [(k["target"], k["name"]) for k in stats["kills"]] == [("activity", "step")]
        assert stats["worker_exit_codes"] == [137] and stats["worker_restarts"] == 1


def test_orchestrator_episode_in_flight_fails_the_orchestration_for_good(tmp_path: Path) -> None:
    with start_double() as double, httpx.Client(base_url=double.base_url, timeout=WAIT) as http:
        double.kill_worker(target="orchestrator", name="sequence")
        instance = uid("seq")
        start(http, "sequence", instance, {"steps": 2, "marker_dir": str(tmp_path), "sleep": 0})
        status = done(http, instance)
        expected = f"Orchestrator function 'sequence' failed: One or more errors occurred. ({WORKER_EXIT})"
        assert (status["runtimeStatus"], status["output"]) == ("Failed", expected)
        assert markers(tmp_path, "step-0") == 0  # the episode that would have scheduled it never answered
        # The management API answers as the real one: 200 for Failed, 500 only when asked to.
        raw = httpx.get(f"{double.durable_url}/instances/{instance}")
        assert raw.status_code == 200 and raw.json()["runtimeStatus"] == "Failed"
        asked = httpx.get(f"{double.durable_url}/instances/{instance}",
                          params={"returnInternalServerErrorOnFailure": "true"})
        assert asked.status_code == 500 and asked.json()["output"] == expected
        double.wait_for_worker_restarts(1)
        time.sleep(2.0)  # nothing retries it
        assert httpx.get(f"{double.durable_url}/instances/{instance}").json()["runtimeStatus"] == "Failed"
        assert double.stats()["episodes_failed_worker_exit"] == 1
        # terminate / raise event on it: 410 Gone, as the extension answers for a finished instance
        assert httpx.post(f"{double.durable_url}/instances/{instance}/terminate").status_code == 410
        # start_new over a Failed instance id starts a new execution (OverridableStates.NonRunningStates)
        start(http, "sequence", instance, {"steps": 1, "marker_dir": str(tmp_path), "sleep": 0})
        again = done(http, instance)
        assert again["runtimeStatus"] == "Completed" and [r["index"] for r in again["output"]] == [0]


def _entity_state(http: httpx.Client, key: str) -> object:
    """The Counter's state via the app (None while that request itself hits the dying worker: a 500)."""
    response = http.get(f"/entities/Counter/{key}")
    return response.json()["state"] if response.status_code == 200 else None


def test_entity_batch_in_flight_is_aborted_retried_and_committed_once() -> None:
    with start_double() as double, httpx.Client(base_url=double.base_url, timeout=WAIT) as http:
        double.kill_worker(target="entity", name="counter")
        key = uid("k")
        assert http.post(f"/entities/Counter/{key}/add", json=5).status_code == 202
        wait_until(lambda: _entity_state(http, key) == 5)
        stats = double.stats()
        assert stats["entity_batches_aborted"] == 1 and stats["kills"][0]["target"] == "entity"
        assert stats["worker_restarts"] == 1
        # the aborted batch committed nothing: after its retry the state holds one "add 5", not two
        instance = uid("count")
        start(http, "counting", instance, {"key": key, "calls": 2})
        assert done(http, instance)["output"] == [6, 7]
        assert _entity_state(http, key) == 7


def test_third_worker_crash_within_30_minutes_recycles_the_host(tmp_path: Path) -> None:
    with start_double() as double, httpx.Client(base_url=double.base_url, timeout=WAIT) as http:
        waiter = uid("waiter")
        start(http, "waiter", waiter, None)
        wait(http, waiter, lambda s: s["runtimeStatus"] == "Running")
        for crash in (1, 2):
            double.kill_worker()
            stats = double.wait_for_worker_restarts(crash, timeout=40)
        assert (stats["host_generation"], stats["worker_errors_in_window"]) == (1, 2)
        assert "restarting the worker in" in double.log()  # the 2nd restart waited out the restart interval
        double.kill_worker()
        wait_until(lambda: "starting a fresh host on port" in double.log(), timeout=40)
        stats = double.wait_for(lambda s: s["host_generation"] == 2 and s["worker_ready"], timeout=40)
        log = double.log()
        assert "Exceeded language worker restart retry count for runtime:python. Shutting down and " \
               "proactively recycling the Functions Host to recover" in log
        assert "[platform] the Functions host stopped itself (worker restart limit)" in log
        assert stats["worker_restarts"] == 3 and stats["host_recycles"] == 1 and stats["worker_exit_codes"] == [
            137, 137, 137]
        # Durable state lives in storage: the orchestration that ran in the old host goes on in the new one
        assert http.post(f"/orchestrations/{waiter}/events/go", json="after").status_code == 202
        assert done(http, waiter)["output"] == {"got": '"after"'}


def test_function_timeout_fails_the_activity_and_restarts_the_worker_without_counting(tmp_path: Path) -> None:
    with start_double(env={"AzureFunctionsJobHost__functionTimeout": "00:00:03"}) as double, \
            httpx.Client(base_url=double.base_url, timeout=WAIT) as http:
        assert double.stats()["function_timeout_s"] == 3.0
        instance = uid("slow")
        start(http, "guarded", instance, {"marker_dir": str(tmp_path), "sleep": 8, "tries": 1})
        status = done(http, instance)
        assert status["runtimeStatus"] == "Completed", status
        [error] = status["output"]["errors"]
        assert error.startswith("Activity function 'step' failed: Timeout value of 00:00:03 was exceeded by "
                                "function: Functions.step_activity \n ")
        assert "Microsoft.Azure.WebJobs.Host.FunctionTimeoutException" in error
        stats = double.wait_for_worker_restarts(1)
        assert stats["timeouts"] == {"activity": 1} and stats["activity_timeouts"] == {"step": 1}
        assert stats["worker_errors_in_window"] == 0  # a timeout restart does not count towards the limit
        assert "A function timeout has occurred. Restarting worker process executing invocationId" in double.log()


def test_function_timeout_counts_a_streamed_response_and_cuts_every_stream_of_that_worker() -> None:
    with start_double(env={"AzureFunctionsJobHost__functionTimeout": "00:00:03"}) as double, \
            httpx.Client(base_url=double.base_url, timeout=WAIT) as http:
        received: dict[str, int] = {}
        broke: dict[str, bool] = {}

        def read(name: str) -> None:
            count = 0
            try:
                with http.stream("GET", "/stream", params={"chunks": 40, "delay": 0.25}) as response:
                    for chunk in response.iter_raw():
                        count += chunk.count(b"data: ")
                broke[name] = False
            except httpx.HTTPError:
                broke[name] = True
            received[name] = count

        first = threading.Thread(target=read, args=("first",))
        first.start()
        time.sleep(1.0)
        second = threading.Thread(target=read, args=("second",))  # same worker, its own deadline 1 s later
        second.start()
        first.join(WAIT)
        second.join(WAIT)
        assert broke == {"first": True, "second": True}, (broke, received)
        # cut when the worker was restarted (3 s timeout + 2 s grace), long before its 40 chunks
        assert 0 < received["first"] < 40 and 0 < received["second"] < 40, received
        stats = double.wait_for_worker_restarts(1)
        assert stats["timeouts"].get("http", 0) >= 1
        assert stats["worker_restarts"] == 1 and stats["worker_errors_in_window"] == 0


def test_requests_are_held_while_the_worker_restarts() -> None:
    with start_double() as double, httpx.Client(base_url=double.base_url, timeout=WAIT) as http:
        for crash in (1, 2):  # the 2nd restart waits out the 10 s restart interval: a long hold
            double.kill_worker()
            double.wait_for(lambda s: not s["worker_ready"], timeout=10)  # the host noticed (no race)
            with ThreadPoolExecutor(max_workers=8) as pool:
                answers = list(pool.map(lambda _: http.get("/plain").status_code, range(8)))
            assert answers == [200] * 8
            assert double.stats()["worker_restarts"] == crash
        stats = double.stats()
        assert stats["held_requests"] >= 16, stats["held_requests"]
