"""The language-worker side of the host: start, watch and restart the worker; track every invocation.

Modelled on the Functions host (each rule checked in its source):

* **in-flight invocations fail when the worker dies** (``GrpcWorkerChannel.TryFailExecutions``) with
  ``WorkerProcessExitException: python exited with code N (0xN)`` — the caller turns that into TaskFailed,
  a Failed orchestration, an aborted entity batch or a 500 (see ``failures.py``);
* **restart**: right away after a crash, but never sooner than ``ProcessRestartInterval`` (10 s) after the
  previous restart began (``RpcFunctionInvocationDispatcher.StartWorkerChannel`` holds its start lock that
  long); meanwhile the dispatcher is ``WorkerProcessRestarting`` and **invocations wait** for the new
  worker (``WorkerFunctionInvoker.DelayUntilFunctionDispatcherInitializedOrShutdown``: up to
  4 × the worker's initialization timeout, then the host stops);
* **restart limit**: the 3rd worker error with less than 30 minutes between consecutive errors
  (``AddOrUpdateErrorBucket``; 3 × ``FUNCTIONS_WORKER_PROCESS_COUNT``) stops the host: "Exceeded language
  worker restart retry count for runtime:python. Shutting down and proactively recycling the Functions
  Host to recover";
* **functionTimeout** on every invocation: the invocation fails with ``FunctionTimeoutException``; after a
  2 s grace the worker process running it is disposed and restarted
  (``WebScriptHostExceptionHandler.OnTimeoutExceptionAsync`` → ``RestartWorkerWithInvocationIdAsync``). That
  disposal does **not** count towards the restart limit and does **not** fail the other invocations of that
  worker (``TryFailExecutions(null)`` fails nothing): they complete only when their own timeout fires.

``semantics="kind"`` (``--kind-redelivery``) keeps the double's old, gentler behaviour for Durable work:
an activity, episode or entity batch whose worker died is sent again to the next worker, and there is
no restart limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from .eventstream import HostStream, WorkerAnsweredError, open_pipes
from .failures import Answered, HostStopping, Outcome, TimedOut, WorkerExited, exit_code_of
from .protocol import KILL_HEADER, WORKER_READY_PREFIX

REPO_ROOT = Path(__file__).resolve().parents[2]
RESTART_INTERVAL_S = 10.0  # WorkerProcessCountOptions.ProcessRestartInterval
ERROR_WINDOW_S = 30 * 60.0  # WorkerConstants.WorkerRestartErrorIntervalThresholdInMinutes
ERROR_THRESHOLD = 3  # 3 × FUNCTIONS_WORKER_PROCESS_COUNT (1)
INITIALIZATION_TIMEOUT_S = 120.0  # the Python worker's initialization timeout as observed (see README)
HOLD_LIMIT_S = (ERROR_THRESHOLD + 1) * INITIALIZATION_TIMEOUT_S
TIMEOUT_GRACE_S = 2.0
KILL_TARGETS = ("activity", "orchestrator", "entity", "http", "timer")

INITIALIZED, RESTARTING, STOPPED = "Initialized", "WorkerProcessRestarting", "Stopped"


class WorkerUnavailable(RuntimeError):
    """The first worker did not become ready (the app does not import, or it took too long)."""


class HostIsStopping(Exception):
    """No worker will come: the host is stopping."""


@dataclass
class KillPlan:
    """Kill the worker (SIGKILL, from inside it) ``delay`` s into the next matching invocation."""

    target: str
    name: str | None = None
    delay: float = 0.0

    def matches(self, kind: str, function: str, name: str | None) -> bool:
        if kind != self.target:
            return False
        return self.name is None or self.name.lower() in {function.lower(), (name or "").lower()}


@dataclass
class Invocation:
    """One invocation of a function in the worker, from dispatch until its result is in."""

    kind: str
    function: str
    name: str | None
    instance_id: str | None
    generation: int
    base_url: str
    stream: HostStream
    headers: dict[str, str]
    outcome: asyncio.Future[Outcome]
    id: str = field(default_factory=lambda: str(uuid.uuid4()))
    started: float = field(default_factory=time.monotonic)
    finished_in_worker: bool = False
    deadline: asyncio.TimerHandle | None = None


class WorkerSupervisor:
    """One worker at a time (a new *generation* after every start) plus the invocations running in it."""

    def __init__(self, app_dir: str, script: str, log: Callable[[str], None], *, function_timeout: timedelta | None,
                 semantics: str, on_host_stop: Callable[[str], None]) -> None:
        self.app_dir = app_dir
        self.script = script
        self.log = log
        self.function_timeout = function_timeout
        self.semantics = semantics
        self.on_host_stop = on_host_stop
        self.state = RESTARTING
        self.generation = 0
        self.restarts = 0
        self.exit_codes: list[int] = []
        self.proc: asyncio.subprocess.Process | None = None
        self.pid: int | None = None
        self.base_url: str | None = None
        self.stream: HostStream | None = None
        self.functions: list[dict[str, Any]] = []
        self.invocations: dict[str, Invocation] = {}
        self.kill_plan: KillPlan | None = None
        self.kills: list[dict[str, Any]] = []
        self.held: int = 0
        self.timeouts: dict[str, int] = {}
        self.error_times: list[float] = []
        self._ready = asyncio.Event()
        self._changed = asyncio.Event()
        self._stopping = False
        self._first_ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._lock_free_at = 0.0
        self._timed_out_generations: set[int] = set()

    # ------------------------------------------------------------------------------------------ lifecycle
    async def start(self, timeout: float = 60.0) -> None:
        await self._spawn()
        try:
            await asyncio.wait_for(asyncio.shield(self._first_ready), timeout)
        except TimeoutError as exc:
            raise WorkerUnavailable(f"worker not ready after {timeout}s") from exc

    def stopping(self) -> None:
        """The host is going down: no restarts, no new invocations (the worker is stopped by :meth:`stop`)."""
        self._stopping = True
        self._changed.set()

    async def stop(self) -> None:
        self._stopping = True
        self.state = STOPPED
        self._ready.clear()
        self._changed.set()
        for invocation in list(self.invocations.values()):
            if not invocation.outcome.done():
                invocation.outcome.set_result(HostStopping())
        proc = self.proc
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 3.0)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        for task in list(self._tasks):
            task.cancel()

    def kill(self) -> int | None:
        """SIGKILL the current worker now; the watcher handles the exit like any other crash."""
        pid = self.pid
        if pid is not None and self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            self.kills.append({"target": "now", "pid": pid, "at": time.time()})
        return pid

    def arm_kill(self, plan: KillPlan) -> None:
        self.kill_plan = plan

    async def _spawn(self) -> None:
        self.generation += 1
        generation = self.generation
        self._ready.clear()
        self.base_url = None
        if self.stream is not None:
            self.stream.close()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
        env["PYTHONUNBUFFERED"] = "1"
        # The event stream (eventstream.py): the worker reads invocations from one pipe, answers on the other.
        to_worker_read, to_worker_write = os.pipe()
        from_worker_read, from_worker_write = os.pipe()
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "tests.hostdouble.worker", "--app-dir", self.app_dir, "--script", self.script,
                "--stream-fds", f"{to_worker_read},{from_worker_write}",
                cwd=self.app_dir, env=env, stdout=asyncio.subprocess.PIPE, stderr=None, limit=2**24,
                pass_fds=(to_worker_read, from_worker_write),
            )
        except BaseException:
            for fd in (to_worker_write, from_worker_read):
                os.close(fd)
            raise
        finally:
            for fd in (to_worker_read, from_worker_write):  # the worker's ends, now the worker's alone
                os.close(fd)
        self.stream = HostStream(*await open_pipes(from_worker_read, to_worker_write))
        self.proc = proc
        self.pid = proc.pid
        self.log(f"worker generation {generation} started (pid {proc.pid})")
        self._track(self._read_stdout(proc, generation))
        self._track(self._watch(proc, generation))

    def _track(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _read_stdout(self, proc: asyncio.subprocess.Process, generation: int) -> None:
        assert proc.stdout is not None
        while True:
            try:
                line = await proc.stdout.readline()
            except ValueError:  # an absurdly long line: drop it, keep draining the pipe
                await proc.stdout.read(2**16)
                continue
            if not line:
                return
            text = line.decode(errors="replace").rstrip("\n")
            if text.startswith(WORKER_READY_PREFIX) and generation == self.generation and not self._stopping:
                info = json.loads(text[len(WORKER_READY_PREFIX):])
                self.base_url = f"http://127.0.0.1:{info['port']}"
                self.functions = info["functions"]
                self.state = INITIALIZED
                self._ready.set()
                self._changed.set()
                if not self._first_ready.done():
                    self._first_ready.set_result(None)
                self.log(f"worker generation {generation} ready on {self.base_url}")
            else:
                print(f"[worker] {text}", file=sys.stderr, flush=True)

    async def _watch(self, proc: asyncio.subprocess.Process, generation: int) -> None:
        code = exit_code_of(await proc.wait())
        if self._stopping or generation != self.generation:
            return
        self.exit_codes.append(code)
        self.state = RESTARTING
        self._ready.clear()
        self.base_url = None
        self._changed.set()
        if not self._first_ready.done():
            self._first_ready.set_exception(WorkerUnavailable(f"worker exited with code {code} during startup"))
            return
        disposed = generation in self._timed_out_generations and self.semantics == "real"
        if disposed:
            self.log(f"worker generation {generation} (pid {proc.pid}) disposed after a function timeout; "
                     "its other invocations complete when their own timeout fires")
        else:
            outcome = WorkerExited(code)
            self.log(f"worker generation {generation} (pid {proc.pid}): {outcome.message}")
            for invocation in list(self.invocations.values()):
                if invocation.generation == generation and not invocation.outcome.done():
                    invocation.outcome.set_result(outcome)
            now = time.monotonic()
            if self.error_times and now - self.error_times[-1] > ERROR_WINDOW_S:
                self.error_times.clear()
            if self.semantics == "real":  # the kind mode has no restart limit, and leaves no errors behind
                self.error_times.append(now)
            if self.semantics == "real" and len(self.error_times) >= ERROR_THRESHOLD:
                self.log("Exceeded language worker restart retry count for runtime:python. Shutting down and "
                         "proactively recycling the Functions Host to recover")
                self.state = STOPPED
                self.on_host_stop("worker restart limit")
                return
        wait = max(0.0, self._lock_free_at - time.monotonic())
        if wait > 0:
            self.log(f"restarting the worker in {wait:.1f} s (restart interval {RESTART_INTERVAL_S:.0f} s)")
            await asyncio.sleep(wait)
        if self._stopping:
            return
        self._lock_free_at = time.monotonic() + RESTART_INTERVAL_S
        self.restarts += 1
        await self._spawn()

    # ----------------------------------------------------------------------------------------- invocations
    async def wait_ready(self) -> tuple[int, str, HostStream]:
        """The ready worker as ``(generation, base_url, stream)``; while it restarts, wait (the host holds
        requests)."""
        if self._stopping or self.state == STOPPED:
            raise HostIsStopping()
        if self.state == INITIALIZED and self.base_url is not None and self.stream is not None:
            return self.generation, self.base_url, self.stream
        self.held += 1
        deadline = time.monotonic() + HOLD_LIMIT_S
        while not (self.state == INITIALIZED and self.base_url is not None and self.stream is not None):
            if self._stopping or self.state == STOPPED:
                raise HostIsStopping()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.log(f"Final functionDispatcher state: {self.state}. Initialization timed out and host is "
                         "shutting down")
                self.on_host_stop("worker initialization timed out")
                raise HostIsStopping()
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), remaining)
        return self.generation, self.base_url, self.stream

    async def begin(self, kind: str, function: str, name: str | None = None,
                    instance_id: str | None = None) -> Invocation:
        """Dispatch: wait for a worker, register the invocation, arm its timeout (and a kill, if planned)."""
        generation, base_url, stream = await self.wait_ready()
        headers: dict[str, str] = {}
        plan = self.kill_plan
        if plan is not None and plan.matches(kind, function, name):
            self.kill_plan = None
            headers[KILL_HEADER] = str(plan.delay)
            self.kills.append({"target": kind, "function": function, "name": name, "instance_id": instance_id,
                               "pid": self.pid, "delay": plan.delay, "at": time.time()})
            self.log(f"kill armed for this {kind} invocation of '{name or function}' "
                     f"(worker pid {self.pid}, {plan.delay:.2f} s after it starts)")
        invocation = Invocation(kind, function, name, instance_id, generation, base_url, stream, headers,
                                asyncio.get_running_loop().create_future())
        self.invocations[invocation.id] = invocation
        if self.function_timeout is not None:
            invocation.deadline = asyncio.get_running_loop().call_later(
                self.function_timeout.total_seconds(), self._deadline, invocation)
        return invocation

    def end(self, invocation: Invocation) -> None:
        if invocation.deadline is not None:
            invocation.deadline.cancel()
        self.invocations.pop(invocation.id, None)

    def _deadline(self, invocation: Invocation) -> None:
        if invocation.outcome.done():
            return
        assert self.function_timeout is not None
        outcome = TimedOut(invocation.function, self.function_timeout)
        invocation.outcome.set_result(outcome)
        self.timeouts[invocation.kind] = self.timeouts.get(invocation.kind, 0) + 1
        self.log(f"{outcome.message} (invocation {invocation.id})")
        self._track(self._restart_after_timeout(invocation))

    async def _restart_after_timeout(self, invocation: Invocation) -> None:
        await asyncio.sleep(TIMEOUT_GRACE_S)
        if invocation.finished_in_worker or invocation.generation != self.generation or self.state != INITIALIZED:
            return
        self.log(f"A function timeout has occurred. Restarting worker process executing invocationId "
                 f"'{invocation.id}'.")
        self._timed_out_generations.add(invocation.generation)
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()

    async def wait_alive(self, invocation: Invocation, grace: float = 0.5) -> bool:
        """After a transport error: is the invocation's worker still alive (a stale connection, not a crash)?"""
        proc = self.proc
        if invocation.generation != self.generation or proc is None:
            return False
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), grace)
        return proc.returncode is None

    async def call(self, kind: str, function: str, name: str | None, instance_id: str | None,
                   send: Callable[[Invocation], Awaitable[dict[str, Any]]],
                   on_attempt: Callable[[bool], None] | None = None) -> Outcome:
        """One Durable invocation (orchestrator episode, activity, entity batch, timer) through the worker.

        Real semantics: a worker death is the outcome. Kind semantics: the call goes to the next worker.
        """
        redelivery = False
        while True:
            try:
                invocation = await self.begin(kind, function, name, instance_id)
            except HostIsStopping:
                return HostStopping()
            try:
                if on_attempt is not None:
                    on_attempt(redelivery)
                outcome = await self._attempt(invocation, send)
            finally:
                self.end(invocation)
            if isinstance(outcome, WorkerExited) and self.semantics == "kind":
                redelivery = True
                continue
            return outcome

    async def _attempt(self, invocation: Invocation, send: Callable[[Invocation], Awaitable[dict[str, Any]]]
                       ) -> Outcome:
        request = asyncio.ensure_future(send(invocation))
        waiting: set[asyncio.Future[Any]] = {request, invocation.outcome}
        done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        if request not in done:  # the worker died, or the invocation timed out, first
            request.cancel()
            with contextlib.suppress(BaseException):
                await request
            return invocation.outcome.result()
        error = request.exception()
        if error is None:
            invocation.finished_in_worker = True
            if invocation.outcome.done():  # answered after its timeout: the timeout stands
                return invocation.outcome.result()
            return Answered(request.result())
        if isinstance(error, WorkerAnsweredError):
            return Answered({"ok": False, "error": f"worker refused the invocation ({error.status})",
                             "stack": error.text[:2000]})
        if invocation.outcome.done():
            return invocation.outcome.result()
        if await self.wait_alive(invocation):
            # The stream broke under a live worker: the host can no longer reach it, so the worker is
            # replaced (the harsher reading; a live worker keeps its stream open).
            self.log(f"the event stream of worker pid {self.pid} broke ({error}): restarting it")
            self.kill()
        return await invocation.outcome  # resolved by the exit watcher (or the timeout)
