"""``python -m tests.hostdouble --port 7071 [--app-dir DIR] [--settings local.settings.json] [--kind-redelivery]``.

This process plays the *platform*: it loads ``Values`` of the settings file into the environment (existing
variables win), opens the port, and runs one Functions host (``tests.hostdouble.hostmain``) on it. When
the host stops itself — the worker restart limit, as the real host does with "Exceeded language worker
restart retry count … recycling the Functions Host" — the platform starts a fresh host on the same port
and storage, as Azure does, and says so in the log. The port stays open in between: connections wait in
the listen backlog until the new host accepts them.

Prints ``host double listening on http://127.0.0.1:PORT`` once a host is ready (again after each
recycle). Stop it with SIGINT/SIGTERM (the host and its worker stop too). SIGKILL of the whole process
group is a container crash: start the same command again and the Durable state in storage resumes.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType

from .config import LEASE_TIMINGS_SETTING
from .protocol import RECYCLE_EXIT_CODE, STARTUP_FAILED_EXIT_CODE
from .serving import loopback_socket

REPO_ROOT = Path(__file__).resolve().parents[2]


def platform_log(message: str) -> None:
    print(f"[platform] {message}", file=sys.stderr, flush=True)


def load_settings(app_dir: Path, settings: str | None) -> Path | None:
    """Copy ``Values`` of a local.settings.json-style file into ``os.environ`` (existing variables win)."""
    if not settings:
        return None
    path = Path(settings)
    if not path.is_absolute():
        path = (app_dir / path) if (app_dir / path).exists() else Path.cwd() / path
    if not path.exists():
        print(f"[hostdouble] settings file {settings} not found; continuing without it", file=sys.stderr)
        return None
    values = json.loads(path.read_text()).get("Values", {})
    for key, value in values.items():
        os.environ.setdefault(str(key), "" if value is None else str(value))
    return path


def _die_with_parent() -> None:  # runs in the host child between fork and exec
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)


def run_platform(app_dir: str, port: int, script: str, kind_redelivery: bool) -> int:
    try:
        sock = loopback_socket(port)
        sock.listen(1024)
    except OSError as exc:
        raise SystemExit(f"host double: cannot listen on 127.0.0.1:{port}: {exc}") from None
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    stopping = False
    child: subprocess.Popen[bytes] | None = None

    def forward(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    with tempfile.TemporaryDirectory(prefix="hostdouble-platform-") as scratch:
        state_file = str(Path(scratch) / "carried-stats.json")
        generation = 0
        while True:
            generation += 1
            cmd = [sys.executable, "-m", "tests.hostdouble.hostmain", "--fd", str(sock.fileno()), "--port", str(port),
                   "--app-dir", app_dir, "--script", script, "--state-file", state_file,
                   "--host-generation", str(generation)]
            if kind_redelivery:
                cmd.append("--kind-redelivery")
            child = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, pass_fds=[sock.fileno()],
                                     preexec_fn=_die_with_parent)
            code = child.wait()
            if stopping:
                return 0
            if code == STARTUP_FAILED_EXIT_CODE and generation == 1:
                platform_log(f"the Functions host failed to start (exit code {code}); giving up")
                return code
            if code == RECYCLE_EXIT_CODE:
                why = "stopped itself (worker restart limit)"
            elif code == STARTUP_FAILED_EXIT_CODE:
                why = "failed to start"
            else:
                why = f"exited with code {code}"
            platform_log(f"the Functions host {why}; starting a fresh host on port {port} with the same storage "
                         f"(host generation {generation + 1})")
            time.sleep(0.2 if code != STARTUP_FAILED_EXIT_CODE else 5.0)
            if stopping:
                return 0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.hostdouble", description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=7071)
    parser.add_argument("--app-dir", default=".")
    parser.add_argument("--settings", default="local.settings.json",
                        help="local.settings.json-style file (relative to the app dir or the cwd)")
    parser.add_argument("--script", default=None, help="app script (default: $PYTHON_SCRIPT_FILE_NAME or "
                                                       "function_app.py)")
    parser.add_argument("--kind-redelivery", action="store_true",
                        help="the double's old crash semantics: Durable work whose worker died is sent to the next "
                             "worker again, no worker restart limit (not what the real host does)")
    parser.add_argument("--instances", type=int, default=1,
                        help="instances (hosts, each with its worker and worker id) behind one front end on --port")
    parser.add_argument("--shutdown-timeout", type=int, default=5,
                        help="with --instances: seconds a draining instance gives its open HTTP requests")
    parser.add_argument("--lease-timings", default=None, metavar="LEASE,RENEW,ACQUIRE",
                        help="the double's own option for time-bound tests: partition lease timings in seconds "
                             "(default 30,10,10 as DTFx; the lease 15-60 s); sets HOSTDOUBLE_LEASE_TIMINGS")
    args = parser.parse_args(argv)
    app_dir = Path(args.app_dir).resolve()
    load_settings(app_dir, args.settings)
    if args.lease_timings:
        os.environ[LEASE_TIMINGS_SETTING] = args.lease_timings
    script = args.script or os.environ.get("PYTHON_SCRIPT_FILE_NAME") or "function_app.py"
    if args.instances < 1:
        raise SystemExit("--instances must be at least 1")
    if args.instances > 1:
        from .scaleout import run_scaled_platform

        sys.exit(run_scaled_platform(str(app_dir), args.port, script, args.kind_redelivery, args.instances,
                                     args.shutdown_timeout))
    sys.exit(run_platform(str(app_dir), args.port, script, args.kind_redelivery))


if __name__ == "__main__":
    main()
