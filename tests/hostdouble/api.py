"""Python API for tests: run the host double as a subprocess.

    with HostDouble("/work/main", env={"RESILIENT_ENABLE_CRASH_ENDPOINT": "true"}) as double:
        httpx.post(f"{double.base_url}/responses", json=...)
        double.kill_worker()
        double.wait_for_worker_restarts(1)
        assert double.stats()["worker_restarts"] == 1
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from .protocol import READY_LINE

REPO_ROOT = Path(__file__).resolve().parents[2]
DURABLE_PATH = "/runtime/webhooks/durabletask"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)


class HostDoubleError(RuntimeError):
    pass


class HostDouble:
    """The host double (host + worker processes) for one app directory, as a context manager."""

    def __init__(self, app_dir: str | os.PathLike[str], port: int | None = None, *,
                 env: dict[str, str] | None = None, settings: str | None = "local.settings.json",
                 script: str | None = None, startup_timeout: float = 60.0,
                 log_path: str | os.PathLike[str] | None = None) -> None:
        self.app_dir = str(Path(app_dir).resolve())
        self.port = port or free_port()
        self.env = dict(env or {})
        self.settings = settings
        self.script = script
        self.startup_timeout = startup_timeout
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.durable_url = f"{self.base_url}{DURABLE_PATH}"
        self._log_dir: tempfile.TemporaryDirectory[str] | None = None
        self.log_path = Path(log_path) if log_path else None
        self.proc: subprocess.Popen[bytes] | None = None
        self._http = httpx.Client(timeout=10.0)

    # ---------------------------------------------------------------------------------------------- lifecycle
    def start(self) -> HostDouble:
        if self.log_path is None:
            self._log_dir = tempfile.TemporaryDirectory(prefix="hostdouble-")
            self.log_path = Path(self._log_dir.name) / "hostdouble.log"
        env = {**os.environ, **self.env, "PYTHONUNBUFFERED": "1"}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
        cmd = [sys.executable, "-m", "tests.hostdouble", "--port", str(self.port), "--app-dir", self.app_dir,
               "--settings", self.settings or ""]
        if self.script:
            cmd += ["--script", self.script]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         preexec_fn=_die_with_parent)
        ready = READY_LINE.format(port=self.port)
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if ready in self.log():
                return self
            if self.proc.poll() is not None:
                raise HostDoubleError(f"host double exited with {self.proc.returncode}:\n{self.log()[-4000:]}")
            time.sleep(0.05)
        self.stop()
        raise HostDoubleError(f"host double not ready after {self.startup_timeout}s:\n{self.log()[-4000:]}")

    def stop(self) -> None:
        worker_pid = None
        with contextlib.suppress(Exception):
            worker_pid = self.stats().get("worker_pid")
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if worker_pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker_pid, signal.SIGKILL)
        self._http.close()

    def __enter__(self) -> HostDouble:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log(self) -> str:
        """Everything the host and the worker printed so far."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")

    # ---------------------------------------------------------------------------------------------- test hooks
    def stats(self) -> dict[str, Any]:
        """``GET /runtime/webhooks/durabletask/_double/stats``: worker pid/restarts, activity deliveries, ..."""
        response = self._http.get(f"{self.durable_url}/_double/stats")
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result

    def kill_worker(self) -> int:
        """SIGKILL the current worker process; returns its pid. The host restarts it."""
        pid = self.stats()["worker_pid"]
        os.kill(pid, signal.SIGKILL)
        return int(pid)

    def wait_for_worker_restarts(self, count: int, timeout: float = 30.0) -> dict[str, Any]:
        """Wait until the worker was restarted ``count`` times in total and the new one is ready."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            stats = self.stats()
            if stats["worker_restarts"] >= count and stats["worker_ready"]:
                return stats
            time.sleep(0.05)
        raise TimeoutError(f"worker restarts < {count} after {timeout}s: {self.stats()}")

    def status(self, instance_id: str) -> dict[str, Any] | None:
        """The Durable status payload of an instance (``None`` if unknown)."""
        response = self._http.get(f"{self.durable_url}/instances/{instance_id}")
        if response.status_code == 404:
            return None
        result: dict[str, Any] = response.json()
        return result

    def wait_for_status(self, instance_id: str, statuses: tuple[str, ...] = ("Completed", "Failed", "Terminated"),
                        timeout: float = 30.0) -> dict[str, Any]:
        """Poll the status until ``runtimeStatus`` is one of ``statuses``."""
        deadline = time.monotonic() + timeout
        last: dict[str, Any] | None = None
        while time.monotonic() < deadline:
            last = self.status(instance_id)
            if last is not None and last.get("runtimeStatus") in statuses:
                return last
            time.sleep(0.05)
        raise TimeoutError(f"instance {instance_id} not in {statuses} after {timeout}s: {last}")
