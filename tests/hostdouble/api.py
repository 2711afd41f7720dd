"""Python API for tests: run the host double (platform → host → worker processes) as a subprocess.

    with HostDouble("/work/main", env={"RESILIENT_ENABLE_CRASH_ENDPOINT": "true"}) as double:
        httpx.post(f"{double.base_url}/responses", json=...)
        double.kill_worker()                                  # SIGKILL the worker now
        double.kill_worker(target="activity", name="run_phase", delay=0.2)  # ...inside the next run_phase
        double.kill_host(); double.restart()                  # a container crash, then the same command again

Each double gets its **own task hub** (and host id) unless the caller names one: several doubles share one
Azurite (CI, parallel engineers), and Durable state now lives there. A task hub the double generated is
deleted again by :meth:`stop`.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from .config import LEASE_TIMINGS_SETTING
from .protocol import INSTANCE_HEADER, READY_LINE

REPO_ROOT = Path(__file__).resolve().parents[2]
DURABLE_PATH = "/runtime/webhooks/durabletask"
HUB_SETTING = "AzureFunctionsJobHost__extensions__durableTask__hubName"
HOST_ID_SETTING = "AzureFunctionsWebHost__hostid"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)


def delete_task_hub(connection_string: str, hub: str, host_id: str | None = None) -> None:
    """Delete a task hub's tables, queues and containers (and the host id's timer status blobs)."""
    from azure.core.exceptions import ResourceNotFoundError
    from azure.data.tables import TableServiceClient
    from azure.storage.blob import BlobServiceClient
    from azure.storage.queue import QueueServiceClient

    common: dict[str, Any] = {"use_env_settings": False, "retry_total": 1, "connection_timeout": 3, "read_timeout": 10}
    tables = TableServiceClient.from_connection_string(connection_string, **common)
    queues = QueueServiceClient.from_connection_string(connection_string, **common)
    blobs = BlobServiceClient.from_connection_string(connection_string, **common)
    with tables, queues, blobs:
        for table in (f"{hub}Instances", f"{hub}History"):
            with contextlib.suppress(ResourceNotFoundError):
                tables.delete_table(table)
        for queue in list(queues.list_queues(name_starts_with=f"{hub.lower()}-")):
            with contextlib.suppress(ResourceNotFoundError):
                queues.delete_queue(queue.name)
        for container in list(blobs.list_containers(name_starts_with=f"{hub.lower()}-")):
            with contextlib.suppress(ResourceNotFoundError):
                blobs.delete_container(container.name)
        if host_id:
            hosts = blobs.get_container_client("azure-webjobs-hosts")
            with contextlib.suppress(ResourceNotFoundError):
                for blob in list(hosts.list_blobs(name_starts_with=f"timers/{host_id}/")):
                    hosts.delete_blob(blob.name)


class HostDoubleError(RuntimeError):
    pass


class HostDouble:
    """The host double for one app directory, as a context manager.

    ``task_hub``: a task hub name; default: a fresh one per double (deleted by :meth:`stop`). Pass
    ``task_hub="host.json"`` to use whatever host.json names. ``kind_redelivery``: the double's old crash
    semantics (see the README); off by default.
    """

    def __init__(self, app_dir: str | os.PathLike[str], port: int | None = None, *,
                 env: dict[str, str] | None = None, settings: str | None = "local.settings.json",
                 script: str | None = None, startup_timeout: float = 60.0,
                 log_path: str | os.PathLike[str] | None = None, kind_redelivery: bool = False,
                 task_hub: str | None = None, instances: int = 1,
                 lease_timings: tuple[float, float, float] | None = None, shutdown_timeout: int | None = None) -> None:
        self.app_dir = str(Path(app_dir).resolve())
        self.port = port or free_port()
        self.env = dict(env or {})
        self.settings = settings
        self.script = script
        self.startup_timeout = startup_timeout
        self.kind_redelivery = kind_redelivery
        self.instances = instances
        self.shutdown_timeout = shutdown_timeout
        if lease_timings is not None:  # the double's own option for time-bound tests (README, "Scale-out")
            self.env[LEASE_TIMINGS_SETTING] = ",".join(f"{float(v):g}" for v in lease_timings)
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.durable_url = f"{self.base_url}{DURABLE_PATH}"
        self._log_dir: tempfile.TemporaryDirectory[str] | None = None
        self.log_path = Path(log_path) if log_path else None
        self.proc: subprocess.Popen[bytes] | None = None
        self._http: httpx.Client | None = None
        self.owns_task_hub = False
        if task_hub == "host.json":
            self.task_hub: str | None = None
        elif task_hub is not None:
            self.env[HUB_SETTING] = self.task_hub = task_hub
        elif HUB_SETTING in self.env or HUB_SETTING in os.environ:
            self.task_hub = self.env.get(HUB_SETTING) or os.environ[HUB_SETTING]
        else:
            self.env[HUB_SETTING] = self.task_hub = "hd" + secrets.token_hex(6)
            self.owns_task_hub = True
        self.env.setdefault(HOST_ID_SETTING, f"hostdouble-{secrets.token_hex(4)}")

    # ---------------------------------------------------------------------------------------------- lifecycle
    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "tests.hostdouble", "--port", str(self.port), "--app-dir", self.app_dir,
               "--settings", self.settings or ""]
        if self.script:
            cmd += ["--script", self.script]
        if self.kind_redelivery:
            cmd.append("--kind-redelivery")
        if self.instances != 1:
            cmd += ["--instances", str(self.instances)]
        if self.shutdown_timeout is not None:
            cmd += ["--shutdown-timeout", str(self.shutdown_timeout)]
        return cmd

    def _process_env(self) -> dict[str, str]:
        env = {**os.environ, **self.env, "PYTHONUNBUFFERED": "1"}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
        return env

    def start(self) -> HostDouble:
        """Start the platform (in its own process group) and wait until a host is ready."""
        if self.log_path is None:
            self._log_dir = tempfile.TemporaryDirectory(prefix="hostdouble-")
            self.log_path = Path(self._log_dir.name) / "hostdouble.log"
        seen = self.log().count(READY_LINE.format(port=self.port))
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.command(), cwd=REPO_ROOT, env=self._process_env(), stdout=log,
                                         stderr=subprocess.STDOUT, preexec_fn=_die_with_parent,
                                         start_new_session=True)
        if self._http is None:
            self._http = httpx.Client(timeout=10.0)
        try:
            self.wait_until_ready(seen + 1, self.startup_timeout)
        except HostDoubleError:
            self.stop()
            raise
        return self

    def wait_until_ready(self, ready_lines: int | None = None, timeout: float | None = None) -> None:
        """Wait for the ``ready_lines``-th "listening" line (default: one more than now)."""
        ready = READY_LINE.format(port=self.port)
        target = self.log().count(ready) + 1 if ready_lines is None else ready_lines
        deadline = time.monotonic() + (timeout or self.startup_timeout)
        while time.monotonic() < deadline:
            if self.log().count(ready) >= target:
                return
            if self.proc is not None and self.proc.poll() is not None:
                raise HostDoubleError(f"host double exited with {self.proc.returncode}:\n{self.log()[-4000:]}")
            time.sleep(0.05)
        raise HostDoubleError(f"host double not ready after {timeout or self.startup_timeout}s:\n{self.log()[-4000:]}")

    def stop(self, *, delete_task_hub_too: bool | None = None) -> None:
        """SIGTERM the platform (it stops its host and worker), SIGKILL the group if that hangs; delete the
        task hub if this double generated it (or ``delete_task_hub_too``)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self._kill_group()
        self._kill_group()  # anything left in the group (a host or worker that outlived the platform)
        if self._http is not None:
            self._http.close()
            self._http = None
        if delete_task_hub_too if delete_task_hub_too is not None else self.owns_task_hub:
            with contextlib.suppress(Exception):
                delete_task_hub(self._process_env().get("AzureWebJobsStorage", "UseDevelopmentStorage=true"),
                                str(self.task_hub), self.env.get(HOST_ID_SETTING))

    def _kill_group(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)

    def kill_host(self) -> None:
        """SIGKILL the whole process group (platform, host, worker): what a container crash does."""
        if self.proc is None:
            raise HostDoubleError("the double is not running")
        self._kill_group()

    def restart(self) -> HostDouble:
        """Start again with the same command, port, settings and task hub (after :meth:`kill_host`)."""
        if self.proc is not None and self.proc.poll() is None:
            raise HostDoubleError("the double is still running: kill_host() or stop() it first")
        return self.start()

    def __enter__(self) -> HostDouble:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log(self) -> str:
        """Everything the platform, the hosts and the workers printed so far."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")

    # ---------------------------------------------------------------------------------------------- test hooks
    @property
    def http(self) -> httpx.Client:
        if self._http is None:
            self._http = httpx.Client(timeout=10.0)
        return self._http

    def stats(self, instance: str | None = None) -> dict[str, Any]:
        """``GET /runtime/webhooks/durabletask/_double/stats`` (retried briefly while a host recycles); with
        several instances, of ``instance`` (a name from :meth:`list_instances`), else of whichever the front
        end picks."""
        deadline = time.monotonic() + 30.0
        headers = {INSTANCE_HEADER: instance} if instance else {}
        while True:
            try:
                response = self.http.get(f"{self.durable_url}/_double/stats", headers=headers)
                response.raise_for_status()
                result: dict[str, Any] = response.json()
                return result
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    # ---------------------------------------------------------------------------------- several instances
    def list_instances(self) -> list[dict[str, Any]]:
        """The platform's instances (``instances`` > 1): name, state (starting, ready, draining, stopped,
        killed), port, worker id, host pid, requests the front end sent it."""
        response = self.http.get(f"{self.base_url}/_platform/instances")
        response.raise_for_status()
        result: list[dict[str, Any]] = response.json()
        return result

    def ready_instances(self) -> list[str]:
        return [i["name"] for i in self.list_instances() if i["state"] == "ready"]

    def add_instance(self) -> str:
        """Scale out by one instance (a new worker id); returns its name once its host is ready."""
        response = self.http.post(f"{self.base_url}/_platform/instances", timeout=130.0)
        response.raise_for_status()
        return str(response.json()["name"])

    def drain_instance(self, name: str) -> None:
        """Scale in: the front end stops sending it requests, its host gets SIGTERM and drains."""
        self.http.post(f"{self.base_url}/_platform/instances/{name}/drain").raise_for_status()

    def kill_instance(self, name: str) -> int | None:
        """SIGKILL one instance's host (and so its worker): a crashed container. Returns the host's pid."""
        response = self.http.post(f"{self.base_url}/_platform/instances/{name}/kill")
        response.raise_for_status()
        pid = response.json().get("killed_pid")
        return None if pid is None else int(pid)

    def wait_instance_state(self, name: str, states: tuple[str, ...], timeout: float = 60.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        last: dict[str, Any] = {}
        while time.monotonic() < deadline:
            last = next((i for i in self.list_instances() if i["name"] == name), {})
            if last.get("state") in states:
                return last
            time.sleep(0.1)
        raise TimeoutError(f"instance {name} not in {states} after {timeout}s: {last}")

    def kill_worker(self, target: str = "now", *, name: str | None = None, delay: float = 0.0) -> Any:
        """SIGKILL the worker: ``now`` (returns its pid), or inside the next ``activity`` (optionally of
        ``name``), ``orchestrator`` episode, ``entity`` batch, ``http`` request or ``timer`` run, ``delay``
        seconds after it starts (returns the armed plan; ``stats()["kills"]`` records when it fired)."""
        params: dict[str, Any] = {"target": target, "delay": delay}
        if name:
            params["name"] = name
        response = self.http.post(f"{self.durable_url}/_double/kill-worker", params=params)
        response.raise_for_status()
        answer: dict[str, Any] = response.json()
        if target == "now":
            return int(answer["killed_pid"])
        return answer["armed"]

    def crash_host_before_checkpoint(self, activity: str, delay: float = 0.0) -> None:
        """Arm a container crash inside the Durable backend's one unguarded window: the next orchestrator
        episode that schedules ``activity`` sends its messages (the activity starts), then ``delay`` s
        later the whole process group is SIGKILLed before the episode's history is committed. Wait for
        it with :meth:`wait_dead`, then :meth:`restart`."""
        self._arm_checkpoint_fault(activity, delay, "kill")

    def fail_checkpoint(self, activity: str, delay: float = 0.0) -> None:
        """Arm a storage fault in the same window: the next orchestrator episode that schedules ``activity``
        sends its messages, then its checkpoint fails (the connection lost for good, after the SDK's own
        retries). The host abandons the work item and runs the episode again, which sends the activity
        again: it is delivered twice (the stats count it in ``activity_sends_before_a_failed_checkpoint``)."""
        self._arm_checkpoint_fault(activity, delay, "storage")

    def _arm_checkpoint_fault(self, activity: str, delay: float, how: str) -> None:
        response = self.http.post(f"{self.durable_url}/_double/crash-host",
                                  params={"at": "checkpoint", "name": activity, "delay": delay, "how": how})
        response.raise_for_status()

    def wait_dead(self, timeout: float = 30.0) -> None:
        """Until the process group started by :meth:`start` has died (an armed crash)."""
        if self.proc is None:
            raise HostDoubleError("the double is not running")
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise HostDoubleError(f"the double was still running after {timeout} s") from None
        self._kill_group()  # anything the platform left behind

    def set_kind_redelivery(self, enabled: bool) -> None:
        """Switch the running double between the real crash semantics and the old kind re-delivery."""
        response = self.http.post(f"{self.durable_url}/_double/semantics",
                                  params={"kind_redelivery": str(enabled).lower()})
        response.raise_for_status()

    def wait_for(self, predicate: Callable[[dict[str, Any]], Any], timeout: float = 30.0) -> dict[str, Any]:
        """Poll ``stats()`` until ``predicate(stats)`` is true; returns those stats."""
        deadline = time.monotonic() + timeout
        stats: dict[str, Any] = {}
        while time.monotonic() < deadline:
            stats = self.stats()
            if predicate(stats):
                return stats
            time.sleep(0.05)
        raise TimeoutError(f"condition not met after {timeout}s: {stats}")

    def wait_for_worker_restarts(self, count: int, timeout: float = 30.0) -> dict[str, Any]:
        """Wait until the worker was restarted ``count`` times in total and the new one is ready."""
        return self.wait_for(lambda s: s["worker_restarts"] >= count and s["worker_ready"], timeout)

    def status(self, instance_id: str) -> dict[str, Any] | None:
        """The Durable status payload of an instance (``None`` if unknown)."""
        response = self.http.get(f"{self.durable_url}/instances/{instance_id}")
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
            with contextlib.suppress(httpx.TransportError):
                last = self.status(instance_id)
                if last is not None and last.get("runtimeStatus") in statuses:
                    return last
            time.sleep(0.05)
        raise TimeoutError(f"instance {instance_id} not in {statuses} after {timeout}s: {last}")
