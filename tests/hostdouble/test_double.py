"""End-to-end tests of the host double with the fixture app (real subprocesses, real HTTP, loopback only)."""

from __future__ import annotations

import faulthandler
import itertools
import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.hostdouble import HostDouble
from tests.hostdouble.api import HostDoubleError
from tests.hostdouble.testkit import FIXTURE_APP, WAIT
from tests.hostdouble.testkit import done as _done
from tests.hostdouble.testkit import markers as _markers
from tests.hostdouble.testkit import start as _start
from tests.hostdouble.testkit import start_double as _start_double
from tests.hostdouble.testkit import uid as _uid
from tests.hostdouble.testkit import wait as _wait

pytestmark = pytest.mark.slow(seconds=80)  # about that long in all; see tests/conftest.py

TEST_TIMEOUT = 90  # hard bound per test (the process is killed with a traceback dump beyond this)


@pytest.fixture(autouse=True)
def _bounded() -> Iterator[None]:
    faulthandler.dump_traceback_later(TEST_TIMEOUT, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="module")
def double() -> Iterator[HostDouble]:
    with _start_double() as running:
        yield running


@pytest.fixture
def http(double: HostDouble) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=double.base_url, timeout=WAIT) as client:
        yield client


# ------------------------------------------------------------------------------------------------ HTTP
def test_http_routing_settings_and_headers(double: HostDouble, http: httpx.Client) -> None:
    assert http.get("/env/FIXTURE_SETTING").json()["value"] == "from-settings"
    assert http.get("/env/FIXTURE_OVERRIDDEN").json()["value"] == "from-env"  # existing env vars win
    assert http.get("/env/FIXTURE_SETTING").json()["cwd"] == str(FIXTURE_APP.resolve())

    echoed = http.post("/echo/abc/x/y%20z?q=1", headers={"x-test": "t"}, content=b"hello").json()
    assert echoed["path_params"] == {"kind": "abc", "rest": "x/y z"}
    assert echoed["query"] == {"q": "1"}
    assert (echoed["method"], echoed["body"], echoed["x_test"]) == ("POST", "hello", "t")
    assert echoed["invocation"]
    assert not [h for h in echoed["header_names"] if h.startswith("x-hostdouble")]
    assert http.get("/echo/123/x").status_code == 404  # {kind:alpha}
    assert http.delete("/echo/abc/x").status_code == 404  # methods
    assert http.get("/nowhere").status_code == 404

    assert http.get("/plain?a=b").json() == {"sync": True, "query": {"a": "b"}}
    # A route under admin/ is refused like the real host does: the function is in error, never reachable.
    assert http.get("/admin/secret").status_code == 404
    assert "reserved" in double.stats()["function_errors"]


@pytest.mark.parametrize("value", [b"plain", "\u00e9\uff15".encode(), b"\xe9", b"\xff\xfe"])
def test_header_values_reach_the_worker_byte_for_byte(http: httpx.Client, value: bytes) -> None:
    """UTF-8 values go through the proxy's aiohttp path, other bytes through its httpx path: either way the
    app gets the bytes the client sent (Starlette shows header bytes as latin-1 text)."""
    echoed = http.post("/echo/abc/x", headers=[(b"x-test", value)], content=b"").json()
    assert echoed["x_test"] == value.decode("latin-1")


def test_streaming_route_delivers_chunks_incrementally(http: httpx.Client) -> None:
    arrivals: list[tuple[float, bytes]] = []
    started = time.monotonic()
    with http.stream("GET", "/stream", params={"chunks": 4, "delay": 0.4}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for chunk in response.iter_raw():
            arrivals.append((time.monotonic() - started, chunk))
    body = b"".join(c for _, c in arrivals)
    assert body.count(b"data: ") == 5 and body.endswith(b"data: [DONE]\n\n")
    assert len(arrivals) >= 5, arrivals
    assert arrivals[0][0] < arrivals[-1][0] - 1.0, arrivals  # the first event long before the stream ends
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(arrivals)]
    assert sum(g >= 0.3 for g in gaps) >= 4, gaps  # each later event ~0.4 s after the previous one


# ----------------------------------------------------------------------------------------- orchestrations
def test_orchestration_runs_to_completion(http: httpx.Client, double: HostDouble, tmp_path: Path) -> None:
    instance = _uid("seq")
    payload = {"steps": 3, "marker_dir": str(tmp_path), "sleep": 0.1}
    management = _start(http, "sequence", instance, payload)
    assert management["statusQueryGetUri"].startswith(f"{double.durable_url}/instances/{instance}")
    status = _done(http, instance)
    assert status["runtimeStatus"] == "Completed"
    assert [r["index"] for r in status["output"]] == [0, 1, 2]
    assert status["customStatus"] == {"phase": "done"}
    # As on the real host, the status input is the JSON text the client sent (start_new encodes it).
    assert json.loads(status["input"]) == payload
    assert [_markers(tmp_path, f"step-{i}") for i in range(3)] == [1, 1, 1]
    raw = httpx.get(management["statusQueryGetUri"])
    assert raw.status_code == 200 and raw.json()["runtimeStatus"] == "Completed"
    assert http.get(f"/orchestrations/{_uid('missing')}").status_code == 404


def test_custom_status_is_visible_while_running(http: httpx.Client, tmp_path: Path) -> None:
    instance = _uid("seq")
    _start(http, "sequence", instance, {"steps": 2, "marker_dir": str(tmp_path), "sleep": 0.8})
    running = _wait(http, instance, lambda s: s["customStatus"] == {"phase": 1})
    assert running["runtimeStatus"] == "Running"
    assert _done(http, instance)["runtimeStatus"] == "Completed"


def test_external_event_after_the_wait(http: httpx.Client, tmp_path: Path) -> None:
    instance, key = _uid("wf"), _uid("k")
    _start(http, "workflow", instance, {"marker_dir": str(tmp_path), "timeout": 30, "key": key})
    _wait(http, instance, lambda s: s["customStatus"] == "waiting")
    assert http.post(f"/orchestrations/{instance}/events/go", json={"x": 1}).status_code == 202
    status = _done(http, instance)
    output = status["output"]
    assert (status["runtimeStatus"], output["how"]) == ("Completed", "event")
    # Real-host quirk reproduced: raise_event's data reaches the orchestrator as JSON *text*.
    assert output["payload_type"] == "str" and json.loads(output["payload"]) == {"x": 1}
    assert output["total"] == 1  # call_entity result
    assert output["fanned"] == [{"echo": 1}, {"echo": 2}, {"echo": 3}]
    assert output["replaying_now"] is False
    # the signal (+10) after the call (+1) lands too
    deadline = time.monotonic() + WAIT
    while http.get(f"/entities/Counter/{key}").json()["state"] != 11:
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_external_event_raised_before_the_wait_is_buffered(http: httpx.Client, tmp_path: Path) -> None:
    instance = _uid("wf")
    _start(http, "workflow", instance, {"marker_dir": str(tmp_path), "timeout": 30, "key": _uid("k"),
                                        "pre_sleep": 1.5})
    assert http.post(f"/orchestrations/{instance}/events/go", json="early").status_code == 202
    assert _wait(http, instance, lambda s: True)["customStatus"] in (None, "working")  # not waiting yet
    status = _done(http, instance)
    assert status["output"]["how"] == "event"
    assert json.loads(status["output"]["payload"]) == "early"


def test_timer_wins_when_no_event_comes(http: httpx.Client, tmp_path: Path) -> None:
    instance = _uid("wf")
    started = time.monotonic()
    _start(http, "workflow", instance, {"marker_dir": str(tmp_path), "timeout": 1.0, "key": _uid("k")})
    status = _done(http, instance)
    assert status["output"]["how"] == "timer" and status["output"]["payload"] is None
    assert time.monotonic() - started >= 1.0


def test_entities_signal_call_and_state(http: httpx.Client) -> None:
    key = _uid("k")
    assert http.get(f"/entities/Counter/{key}").json() == {"exists": False, "state": None}
    for amount in (5, 7):
        assert http.post(f"/entities/Counter/{key}/add", json=amount).status_code == 202
    deadline = time.monotonic() + WAIT
    while (read := http.get(f"/entities/Counter/{key}").json())["state"] != 12:
        assert time.monotonic() < deadline, read
        time.sleep(0.05)
    assert read["exists"] is True


def test_retries_activity_failures_entity_errors(http: httpx.Client, tmp_path: Path) -> None:
    instance = _uid("retry")
    _start(http, "retrying", instance, {"marker_dir": str(tmp_path), "key": _uid("k")})
    status = _done(http, instance)
    assert status["runtimeStatus"] == "Completed", status
    output = status["output"]
    assert output["recovered"] == "ok after 3"
    assert "flaky attempt 2 failed" in output["exhausted"]
    assert "counter refuses" in output["entity_error"]
    assert output["after"] == {"echo": "after"}
    assert _markers(tmp_path, "flaky") == 3 and _markers(tmp_path / "b", "flaky") == 2


def test_sub_orchestration_and_activity_with_client_binding(http: httpx.Client) -> None:
    waiter, parent = _uid("waiter"), _uid("parent")
    _start(http, "waiter", waiter, None)
    _start(http, "parent", parent, {"n": 2, "waiter": waiter})
    status = _done(http, parent)
    assert status["runtimeStatus"] == "Completed", status
    assert status["output"] == {"child": {"doubled": {"echo": 4}, "parent": parent}, "woke": waiter}
    woken = _done(http, waiter)
    assert json.loads(woken["output"]["got"]) == {"from": parent}


def test_continue_as_new(http: httpx.Client) -> None:
    instance = _uid("loop")
    _start(http, "looping", instance, {"round": 1, "rounds": 3})
    status = _done(http, instance)
    assert (status["runtimeStatus"], status["output"]) == ("Completed", {"rounds_done": 3})


def test_orchestrator_failure(http: httpx.Client) -> None:
    instance = _uid("boom")
    _start(http, "boom", instance, None)
    status = _done(http, instance)
    assert status["runtimeStatus"] == "Failed"
    assert "boom in orchestrator" in status["output"]
    assert status["customStatus"] == "about to fail"


def test_terminate_conflict_and_restart(http: httpx.Client) -> None:
    instance = _uid("waiter")
    _start(http, "waiter", instance, None)
    _wait(http, instance, lambda s: s["runtimeStatus"] == "Running")
    again = http.post(f"/orchestrations/waiter/{instance}", json=None)
    assert again.status_code == 409 and "already exists" in again.json()["error"]
    assert http.post(f"/orchestrations/{instance}/terminate").status_code == 202
    status = _done(http, instance)
    assert (status["runtimeStatus"], status["output"]) == ("Terminated", "stopped by test")
    with httpx.Client(base_url=http.base_url, timeout=WAIT) as client:
        assert client.post(f"/orchestrations/{instance}/events/go", json=1).status_code == 500  # 410 → raises
    _start(http, "waiter", instance, None)  # a finished instance id can be reused
    http.post(f"/orchestrations/{instance}/events/go", json=2)
    assert _done(http, instance)["output"] == {"got": "2"}


def test_unknown_orchestrator_and_durable_api_errors(http: httpx.Client, double: HostDouble) -> None:
    response = http.post(f"/orchestrations/nope/{_uid('x')}", json=None)
    assert response.status_code == 409 and "doesn't exist" in response.json()["error"]
    assert httpx.get(f"{double.durable_url}/instances/{_uid('x')}").status_code == 404
    instance = _uid("waiter")
    _start(http, "waiter", instance, None)
    bad = httpx.post(f"{double.durable_url}/instances/{instance}/raiseEvent/go", content=b"1",
                     headers={"content-type": "text/plain"})
    assert bad.status_code == 400
    httpx.post(f"{double.durable_url}/instances/{instance}/terminate?reason=cleanup")


# ---------------------------------------------------------------------------------------- crash recovery
def test_kind_redelivery_option_re_delivers_in_flight_activities(tmp_path: Path) -> None:
    """``--kind-redelivery``: the double's old semantics, kept behind an option (the real host fails them)."""
    with _start_double(kind_redelivery=True) as double, httpx.Client(base_url=double.base_url, timeout=WAIT) as http:
        assert double.stats()["semantics"] == "kind"
        first_pid = double.stats()["worker_pid"]
        instance = _uid("seq")
        _start(http, "sequence", instance, {"steps": 3, "marker_dir": str(tmp_path), "sleep": 1.5})
        deadline = time.monotonic() + WAIT
        while _markers(tmp_path, "step-1") == 0:  # the second activity is running now
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert double.kill_worker() == first_pid
        status = _done(http, instance)
        assert status["runtimeStatus"] == "Completed", status
        # the in-flight activity ran twice, the others once: at most one phase repeated
        assert [_markers(tmp_path, f"step-{i}") for i in range(3)] == [1, 2, 1]
        pids = [r["pid"] for r in status["output"]]
        assert pids[0] == first_pid and pids[1] != first_pid and pids[2] == pids[1]
        stats = double.stats()
        assert stats["worker_restarts"] == 1
        assert stats["activity_redeliveries"] == {"step": 1}
        assert stats["activity_deliveries"]["step"] == 4
        assert stats["activity_failures_worker_exit"] == {}
        assert stats["in_flight_activities"] == []

        # several activities in flight at once: every one of them is re-delivered
        fan_dir = tmp_path / "fan"
        instance = _uid("fan")
        _start(http, "fanout", instance, {"steps": 3, "marker_dir": str(fan_dir), "sleep": 1.5})
        deadline = time.monotonic() + WAIT
        while sum(_markers(fan_dir, f"step-fan{i}") for i in range(3)) < 3:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        double.kill_worker()
        status = _done(http, instance)
        assert status["runtimeStatus"] == "Completed", status
        assert [_markers(fan_dir, f"step-fan{i}") for i in range(3)] == [2, 2, 2]
        stats = double.stats()
        # no restart limit in this mode either: two crashes, no recycle
        assert stats["worker_restarts"] == 2 and stats["activity_redeliveries"] == {"step": 4}
        assert stats["host_generation"] == 1


def test_request_in_flight_when_the_worker_dies_gets_500_and_the_worker_restarts() -> None:
    with _start_double() as double, httpx.Client(base_url=double.base_url, timeout=WAIT) as http:
        first_pid = http.get("/env/FIXTURE_SETTING").json()["pid"]
        # The worker dies before answering: the invocation fails (WorkerProcessExitException) → 500, empty body.
        crashed = http.post("/crash")
        assert (crashed.status_code, crashed.content) == (500, b"")
        stats = double.wait_for_worker_restarts(1, timeout=WAIT)
        assert stats["worker_exit_codes"] == [1]
        assert "python exited with code 1 (0x1)" in double.log()
        after = http.get("/env/FIXTURE_SETTING")
        assert after.status_code == 200 and after.json()["pid"] not in (first_pid, None)

        # The worker dies while streaming: the client connection breaks after the chunks already sent.
        received = b""
        with pytest.raises(httpx.RemoteProtocolError), \
                http.stream("GET", "/stream", params={"chunks": 5, "delay": 0.1, "crash_after": 2}) as response:
            assert response.status_code == 200
            for chunk in response.iter_raw():
                received += chunk
        assert received.count(b"data: ") == 2
        double.wait_for_worker_restarts(2, timeout=WAIT)
        assert http.get("/plain").status_code == 200


def test_broken_app_fails_startup_with_the_log(tmp_path: Path) -> None:
    (tmp_path / "function_app.py").write_text("raise ImportError('broken on purpose')\n")
    double = HostDouble(tmp_path, settings=None, startup_timeout=WAIT)
    with pytest.raises(HostDoubleError, match="broken on purpose"):
        double.start()
    double.stop()


def test_route_prefix_from_host_json(tmp_path: Path) -> None:
    app_dir = tmp_path / "app"
    shutil.copytree(FIXTURE_APP, app_dir, ignore=shutil.ignore_patterns("__pycache__"))
    host_json = json.loads((app_dir / "host.json").read_text())
    del host_json["extensions"]["http"]
    (app_dir / "host.json").write_text(json.dumps(host_json))  # default prefix: api
    with HostDouble(app_dir, settings=None, startup_timeout=WAIT) as double, \
            httpx.Client(base_url=double.base_url, timeout=WAIT) as http:
        assert http.get("/api/plain").json()["sync"] is True
        assert http.get("/plain").status_code == 404
        binding_base = double.durable_url + "/"
        instance = _uid("seq")
        response = http.post(f"/api/orchestrations/sequence/{instance}",
                             json={"steps": 1, "marker_dir": str(tmp_path / "m"), "sleep": 0})
        assert response.json()["statusQueryGetUri"].startswith(binding_base)
        assert double.wait_for_status(instance, timeout=WAIT)["runtimeStatus"] == "Completed"
