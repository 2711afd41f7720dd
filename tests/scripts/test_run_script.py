"""``scripts/run.sh`` as a user runs it: real processes, a throwaway port set, bounded in time.

It serves; a second start on the busy port fails with a clear message; SIGTERM (and SIGINT, sent to the
script's PID alone) stops everything it started within a few seconds, leaving no process of its session
and no listener; a restart serves the responses made before it (the data stays under ``.azurite/``).
The script runs in a session of its own (``start_new_session``), so "everything it started" is exactly
the processes of that session, and a failing test can stop them without touching anything else.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

pytestmark = [pytest.mark.slow(seconds=26)]

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 120.0  # setup.sh (an idempotent pip check) + Azurite + the host double and its worker
STOP_TIMEOUT_S = 20.0  # the script itself gives the host 8 s, then its process group 2 s


def _free_ports(count: int) -> list[int]:
    socks = [socket.socket() for _ in range(count)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _session_processes(session: int) -> list[str]:
    """Every live process whose session is ``session`` (zombies excluded), as ``pid command`` lines."""
    listing = subprocess.run(["ps", "-eo", "pid=,sess=,stat=,args="], capture_output=True, text=True,
                             check=True).stdout
    found = []
    for line in listing.splitlines():
        pid, sess, stat, *args = line.split(None, 3)
        if int(sess) == session and not stat.startswith("Z"):
            found.append(f"{pid} {' '.join(args)}")
    return found


@dataclass
class Throwaway:
    """A port set and an Azurite instance name of its own, so nothing here meets a real run."""

    port: int
    azurite_ports: list[int]
    instance: str
    started: list[subprocess.Popen[str]] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items() if key != "AzureWebJobsStorage"}
        blob, queue, table = self.azurite_ports
        env.update(PORT=str(self.port), AZURITE_BLOB_PORT=str(blob), AZURITE_QUEUE_PORT=str(queue),
                   AZURITE_TABLE_PORT=str(table), RESILIENT_AZURITE_INSTANCE=self.instance,
                   RESILIENT_USE_HOST_DOUBLE="1")
        return env

    def start(self, log: Path) -> subprocess.Popen[str]:
        with log.open("w") as out:
            process = subprocess.Popen(["bash", "scripts/run.sh"], cwd=ROOT, env=self.env(), stdout=out,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
                                       start_new_session=True)
        self.started.append(process)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if "host double listening on" in log.read_text():
                return process
            if process.poll() is not None:
                pytest.fail(f"run.sh exited with {process.returncode}:\n{log.read_text()}")
            time.sleep(0.2)
        pytest.fail(f"run.sh did not serve within {START_TIMEOUT_S} s:\n{log.read_text()}")

    def stop(self, process: subprocess.Popen[str], how: signal.Signals) -> int:
        process.send_signal(how)  # the script's PID alone, not its group
        return process.wait(timeout=STOP_TIMEOUT_S)


@pytest.fixture()
def throwaway() -> Iterator[Throwaway]:
    port, *azurite = _free_ports(4)
    run = Throwaway(port, azurite, "scripttest-" + secrets.token_hex(4))
    yield run
    for process in run.started:  # a failed test leaves nothing behind either
        for line in _session_processes(process.pid):  # only what this test's script started
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(line.split()[0]), signal.SIGKILL)
        process.wait(timeout=10)
    shutil.rmtree(ROOT / ".azurite" / run.instance, ignore_errors=True)


def _assert_nothing_left(run: Throwaway, process: subprocess.Popen[str], log: Path) -> None:
    deadline = time.monotonic() + 5.0  # the kernel reaps orphans asynchronously
    while _session_processes(process.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _session_processes(process.pid) == [], log.read_text()
    assert [p for p in [run.port, *run.azurite_ports] if _listening(p)] == [], log.read_text()


def test_run_serves_stops_on_signals_and_keeps_responses_across_a_restart(throwaway: Throwaway,
                                                                         tmp_path: Path) -> None:
    first_log = tmp_path / "first.log"
    first = throwaway.start(first_log)
    base = f"http://127.0.0.1:{throwaway.port}"
    with httpx.Client(base_url=base, timeout=30.0) as http:
        created = http.post("/responses", json={
            "model": "m", "input": "keep me", "background": True,
            "metadata": {"research_phases": "2", "words_per_phase": "4", "delta_delay_ms": "0"}}).json()
        deadline = time.monotonic() + 60
        while http.get(f"/responses/{created['id']}").json()["status"] != "completed":
            assert time.monotonic() < deadline, "the response did not complete"
            time.sleep(0.1)
        done = http.get(f"/responses/{created['id']}").json()

    # A second start on the busy port fails at once, with a message that says what to do.
    busy = subprocess.run(["bash", "scripts/run.sh"], cwd=ROOT, env=throwaway.env(), capture_output=True,
                          text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert busy.returncode == 1
    assert f"port {throwaway.port} is already in use" in busy.stderr and "PORT=" in busy.stderr

    code = throwaway.stop(first, signal.SIGTERM)
    assert code == 128 + signal.SIGTERM, first_log.read_text()
    _assert_nothing_left(throwaway, first, first_log)

    second_log = tmp_path / "second.log"
    second = throwaway.start(second_log)
    with httpx.Client(base_url=base, timeout=30.0) as http:
        again = http.get(f"/responses/{created['id']}")
    assert again.status_code == 200, again.text
    assert again.json()["output"] == done["output"] and again.json()["status"] == "completed"

    code = throwaway.stop(second, signal.SIGINT)
    assert code == 128 + signal.SIGINT, second_log.read_text()
    _assert_nothing_left(throwaway, second, second_log)


def test_ctrl_c_stops_the_host_first_and_storage_last_within_seconds(throwaway: Throwaway, tmp_path: Path) -> None:
    """Ctrl-C in a terminal is SIGINT to the whole foreground process group. Azurite runs in a group of its
    own, so it outlives the host (a host whose storage vanished waits for it, and took 10 s); the script
    stops the host, then Azurite."""
    log = tmp_path / "run.log"
    process = throwaway.start(log)
    started = time.monotonic()
    os.killpg(process.pid, signal.SIGINT)  # what the terminal does: the script's whole group
    assert process.wait(timeout=STOP_TIMEOUT_S) == 130
    elapsed = time.monotonic() - started
    text = log.read_text()
    assert elapsed < 5.0, text
    assert "did not stop within" not in text, text
    assert text.index("host stopping") < text.index("stopped (pid") < text.index("run: stopped"), text
    _assert_nothing_left(throwaway, process, log)
