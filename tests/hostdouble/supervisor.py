"""Starts, watches and restarts the worker process, like the Functions host does for its language worker."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import httpx

from .protocol import WORKER_READY_PREFIX

REPO_ROOT = Path(__file__).resolve().parents[2]


class WorkerUnavailable(RuntimeError):
    """The worker did not become ready in time."""


class WorkerSupervisor:
    """One worker at a time; a new *generation* after every (re)start.

    Callers ask :meth:`ready` for ``(generation, base_url)``; after a transport failure they call
    :meth:`wait_past` with the generation they used, which returns once a newer worker is ready (or after
    ``timeout`` when the old one turns out to be alive).
    """

    def __init__(self, app_dir: str, script: str, log: Any) -> None:
        self.app_dir = app_dir
        self.script = script
        self.log = log
        self.generation = 0
        self.restarts = 0
        self.proc: asyncio.subprocess.Process | None = None
        self.pid: int | None = None
        self.base_url: str | None = None
        self.functions: list[dict[str, Any]] = []
        self.exit_codes: list[int] = []
        self._ready = asyncio.Event()
        self._changed = asyncio.Condition()
        self._stopping = False
        self._first_ready = asyncio.get_running_loop().create_future()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._crash_streak = 0

    # -- lifecycle ------------------------------------------------------------------------------------------
    async def start(self, timeout: float = 60.0) -> None:
        await self._spawn()
        try:
            await asyncio.wait_for(asyncio.shield(self._first_ready), timeout)
        except TimeoutError as exc:
            raise WorkerUnavailable(f"worker not ready after {timeout}s") from exc

    async def stop(self) -> None:
        self._stopping = True
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
        """SIGKILL the current worker (tests); the watcher restarts it."""
        pid = self.pid
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return pid

    async def _spawn(self) -> None:
        self.generation += 1
        generation = self.generation
        self._ready.clear()
        self.base_url = None
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
        env["PYTHONUNBUFFERED"] = "1"
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tests.hostdouble.worker", "--app-dir", self.app_dir, "--script", self.script,
            cwd=self.app_dir, env=env, stdout=asyncio.subprocess.PIPE, stderr=None, limit=2**24,
        )
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
            if text.startswith(WORKER_READY_PREFIX) and generation == self.generation:
                info = json.loads(text[len(WORKER_READY_PREFIX):])
                self.base_url = f"http://127.0.0.1:{info['port']}"
                self.functions = info["functions"]
                self._crash_streak = 0
                self._ready.set()
                async with self._changed:
                    self._changed.notify_all()
                if not self._first_ready.done():
                    self._first_ready.set_result(None)
                self.log(f"worker generation {generation} ready on {self.base_url}")
            else:
                print(f"[worker] {text}", file=sys.stderr, flush=True)

    async def _watch(self, proc: asyncio.subprocess.Process, generation: int) -> None:
        code = await proc.wait()
        if self._stopping or generation != self.generation:
            return
        self.exit_codes.append(code)
        was_ready = self._ready.is_set()
        self._ready.clear()
        self.log(f"worker generation {generation} (pid {proc.pid}) exited with code {code}; restarting")
        if not self._first_ready.done():
            self._first_ready.set_exception(WorkerUnavailable(f"worker exited with code {code} during startup"))
            return
        self.restarts += 1
        self._crash_streak = 0 if was_ready else self._crash_streak + 1
        await asyncio.sleep(min(5.0, 0.05 * (2 ** self._crash_streak)))
        if not self._stopping:
            await self._spawn()
        async with self._changed:
            self._changed.notify_all()

    # -- access -----------------------------------------------------------------------------------------------
    async def ready(self, timeout: float | None = None) -> tuple[int, str]:
        """The current ready worker as ``(generation, base_url)``; waits while it is (re)starting."""
        await asyncio.wait_for(self._ready.wait(), timeout)
        assert self.base_url is not None
        return self.generation, self.base_url

    async def wait_past(self, generation: int, timeout: float) -> bool:
        """After a transport failure on worker ``generation``: wait until a newer worker is ready.

        Returns ``False`` right away (after a short grace period) when that worker is still alive, i.e. the
        failure was not a crash (e.g. a pooled connection the worker had just closed).
        """
        proc = self.proc
        if proc is not None and proc.returncode is None and self.generation == generation:
            # The process may be dying right now; give the watcher a chance to notice.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), min(timeout, 0.5))
            if proc.returncode is None:
                return False
        async with self._changed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._changed.wait_for(lambda: self.generation > generation and self._ready.is_set()),
                    timeout)
        return True


async def post_json(client: httpx.AsyncClient, url: str, payload: dict[str, Any]) -> dict[str, Any]:
    response = await client.post(url, json=payload, timeout=httpx.Timeout(None, connect=10.0))
    response.raise_for_status()
    result: dict[str, Any] = response.json()
    return result
