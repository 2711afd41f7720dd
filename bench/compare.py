"""Side-by-side benchmark: our Responses service vs the reference SDK (``bench/reference_server.py``).

Both are driven with the official ``openai`` client (``max_retries=0``), interleaved run by run
(ours, reference, ours, reference, ...) so machine noise hits both alike. Each run is one
``responses.create(stream=True, background=True)`` of the 3-phase research agent read to its terminal
event, then one reconnect ``responses.retrieve(id, stream=True, starting_after=N)`` of the finished response.

Measured per server: time to first event after the POST (p50/p95, client side), events/s delivered for the
whole run, server CPU per event (user+system of the listening process and all its descendants, read with
psutil before and after each run; 10 ms tick resolution, so the headline is total CPU / total events),
reconnect time to first event and to completion, and, when countable, storage calls per phase:

* reference: ``bench/reference_server.py --count-storage`` counts calls into its file stores
  (read from ``GET /bench/stats``);
* ours: only when this script starts the host double (``--start-ours --count-storage``): its
  ``AzureWebJobsStorage`` then points at a loopback counting proxy in front of Azurite, which counts HTTP
  requests (blob/queue/table). The proxy adds a hop to every storage call, so take timings from a run
  without ``--count-storage``.

    .venv/bin/python bench/compare.py --ours http://127.0.0.1:7071 --reference http://127.0.0.1:8088
    .venv/bin/python bench/compare.py --start --runs 20            # spawns both, stops them at the end
    .venv/bin/python bench/compare.py --start --only reference

Every loop is bounded (``--runs`` ≤ 1000, per-request ``--timeout``, whole-bench ``--max-seconds``) and only
127.0.0.1 / localhost targets are accepted.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import itertools
import json
import math
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import statistics
import string
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import psutil
from counting_proxy import CountingProxy
from openai import OpenAI

ROOT = Path(__file__).resolve().parents[1]
LOOPBACK = {"127.0.0.1", "localhost"}
MAX_EVENTS_PER_STREAM = 200_000
READY = re.compile(r"listening on (http://127\.0\.0\.1:\d+)")


# ------------------------------------------------------------------------------------------------ helpers
def _settings_value(name: str) -> str | None:
    """``Values[name]`` of local.settings.json (what ``python -m tests.hostdouble`` loads), if any."""
    try:
        value = json.loads((ROOT / "local.settings.json").read_text()).get("Values", {}).get(name)
    except (OSError, ValueError):
        return None
    return str(value) if value else None


def loopback_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme != "http" or parts.hostname not in LOOPBACK:
        raise SystemExit(f"only http://127.0.0.1 (or localhost) targets are allowed, got {url!r}")
    return url.rstrip("/")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile (no interpolation: with 20 runs p95 is the 19th value)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100.0 * len(ordered)))
    return ordered[rank - 1]


def listening_pid(url: str) -> int | None:
    port = urlsplit(url).port or 80
    with contextlib.suppress(psutil.Error, PermissionError):
        for conn in psutil.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port and conn.pid:
                return int(conn.pid)
    return None


def _is_double_worker(proc: psutil.Process) -> bool:
    """The host double's Python worker (``python -m tests.hostdouble.worker``): the product code's process."""
    with contextlib.suppress(psutil.Error):
        return "tests.hostdouble.worker" in proc.cmdline()
    return False


def cpu_split(pid: int) -> tuple[float, float]:
    """user+system CPU in seconds: (``pid`` and its descendants except workers, the host double's workers).

    The host double is three processes (platform → host → worker): the first figure is the platform and the
    host (HTTP proxy + Durable engine), the second the worker (the product code). The reference server is
    one process: everything is in the first figure.
    """
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return math.nan, math.nan

    def cpu(proc: psutil.Process) -> float:
        with contextlib.suppress(psutil.Error):
            times = proc.cpu_times()
            return float(times.user + times.system)
        return 0.0

    workers = [proc for proc in procs if _is_double_worker(proc)]
    others = [proc for proc in procs if proc not in workers]
    return sum(cpu(proc) for proc in others), sum(cpu(proc) for proc in workers)


def tree_cpu_seconds(pid: int) -> float:
    """user+system CPU of ``pid`` and every live descendant (host double: host process + worker child)."""
    return sum(cpu_split(pid))


# ------------------------------------------------------------------------------------------ managed servers
class ManagedServer:
    """A server subprocess in its own process group, its output in a log file, stopped by its group id."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log_dir: Path) -> None:
        self.name, self.argv, self.env = name, argv, env
        self.log_path = log_dir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float) -> str:
        log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            self.argv, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            match = READY.search(self.log_path.read_text(errors="replace"))
            if match:
                return match.group(1)
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        tail = self.log_path.read_text(errors="replace")[-3000:]
        self.stop()
        raise RuntimeError(f"{self.name} did not become ready ({' '.join(self.argv)}):\n{tail}")

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        pgid = self.proc.pid  # start_new_session: the group id is the child's pid
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            self.proc.wait(timeout=5)


# --------------------------------------------------------------------------------------------- the runs
@dataclass
class RunResult:
    ok: bool = False
    error: str = ""
    first_event_s: float = math.nan
    total_s: float = math.nan
    events: int = 0
    seq_gaps: int = 0
    cpu_s: float = math.nan
    cpu_root_s: float = math.nan  # the server without its workers (host double: platform + host)
    cpu_children_s: float = math.nan  # the host double's worker process
    storage_calls: float = math.nan
    reconnect_first_s: float = math.nan
    reconnect_total_s: float = math.nan
    reconnect_events: int = 0
    reconnect_first_seq: int = -1
    reconnect_cpu_s: float = math.nan
    storage_detail: dict[str, int] = field(default_factory=dict)
    reconnect_storage_calls: float = math.nan


@dataclass
class Target:
    name: str
    url: str
    pid: int | None
    storage: Callable[[], collections.Counter[str] | None]
    client: OpenAI = field(repr=False, default=None)  # type: ignore[assignment]
    results: list[RunResult] = field(default_factory=list)
    storage_breakdown: collections.Counter[str] = field(default_factory=collections.Counter)
    consecutive_failures: int = 0
    disabled: str = ""
    idle_cpu_ms_per_s: float = math.nan
    idle_worker_cpu_ms_per_s: float = math.nan
    after_run_cpu_ms: float = math.nan


def _gaps(seqs: list[int]) -> int:
    return sum(1 for a, b in itertools.pairwise(seqs) if b != a + 1)


def _consume(stream: Any, started: float) -> tuple[float, list[int], str | None, str | None]:
    first = math.nan
    seqs: list[int] = []
    response_id = None
    last_type = None
    for count, event in enumerate(stream):
        if count == 0:
            first = time.perf_counter() - started
        seqs.append(int(getattr(event, "sequence_number", -1)))
        last_type = getattr(event, "type", None)
        resp = getattr(event, "response", None)
        if response_id is None and resp is not None and getattr(resp, "id", None):
            response_id = resp.id
        if count >= MAX_EVENTS_PER_STREAM:
            break
    return first, seqs, response_id, last_type


def one_run(target: Target, args: argparse.Namespace) -> RunResult:
    result = RunResult()
    metadata = {
        "research_phases": str(args.phases),
        "words_per_phase": str(args.words),
        "delta_delay_ms": str(int(args.delay_ms)),
    }
    storage_before = target.storage()
    split_before = cpu_split(target.pid) if target.pid else (math.nan, math.nan)
    cpu_before = sum(split_before)
    started = time.perf_counter()
    try:
        stream = target.client.responses.create(
            model="m", input=args.question, stream=True, background=True, metadata=metadata
        )
        with contextlib.closing(stream):
            first, seqs, response_id, last_type = _consume(stream, started)
        result.total_s = time.perf_counter() - started
        time.sleep(args.settle_ms / 1000.0)
        if target.pid:
            split_after = cpu_split(target.pid)
            result.cpu_s = sum(split_after) - cpu_before
            result.cpu_root_s = split_after[0] - split_before[0]
            result.cpu_children_s = split_after[1] - split_before[1]
        storage_after = target.storage()
        if storage_before is not None and storage_after is not None:
            delta = storage_after - storage_before
            result.storage_calls = float(sum(delta.values()))
            result.storage_detail = dict(delta)
        result.first_event_s, result.events, result.seq_gaps = first, len(seqs), _gaps(seqs)
        if last_type not in {"response.completed", "response.failed", "response.incomplete"}:
            raise RuntimeError(f"stream ended without a terminal event (last {last_type!r})")
        if response_id is None:
            raise RuntimeError("no response id in the stream")

        after = min(args.reconnect_after, max(0, len(seqs) - 2))
        storage_before = target.storage()
        cpu_before = tree_cpu_seconds(target.pid) if target.pid else math.nan
        started = time.perf_counter()
        replay = target.client.responses.retrieve(response_id, stream=True, starting_after=after)
        with contextlib.closing(replay):
            first, rseqs, _, _ = _consume(replay, started)
        result.reconnect_total_s = time.perf_counter() - started
        if target.pid:
            result.reconnect_cpu_s = tree_cpu_seconds(target.pid) - cpu_before
        storage_after = target.storage()
        if storage_before is not None and storage_after is not None:
            result.reconnect_storage_calls = float(sum((storage_after - storage_before).values()))
        result.reconnect_first_s, result.reconnect_events = first, len(rseqs)
        result.reconnect_first_seq = rseqs[0] if rseqs else -1
        result.ok = True
    except Exception as exc:
        result.error = f"{type(exc).__name__}: {exc}"[:500]
    return result


def measure_idle(target: Target, seconds: float, settle: float) -> None:
    """CPU with no requests, once the probe run's after-effects are over, and the CPU of those.

    Why a settle: after a run the Durable backend's queue pollers back off from 50 ms to their ceiling
    (``maxQueuePollingInterval``, 5 s in host.json) over ~11 s, and the run's last steps (finalize, the
    lock release) end in its first second. That tail is part of a run's cost, not of an idle service, so it
    is reported on its own (``after-run CPU``). psutil counts in 10 ms ticks: take 20 s or more to resolve
    a few ms per second."""
    if target.pid:
        before = cpu_split(target.pid)
        time.sleep(settle)
        settled = cpu_split(target.pid)
        target.after_run_cpu_ms = whole_ms(sum(settled) - sum(before))
        time.sleep(seconds)
        idle = cpu_split(target.pid)
        target.idle_cpu_ms_per_s = whole_ms(sum(idle) - sum(settled)) / seconds
        # The product's own share: the double's worker (the reference server is one process: all of it).
        own = (idle[1] - settled[1]) if target.name == "ours" else (idle[0] - settled[0])
        target.idle_worker_cpu_ms_per_s = whole_ms(own) / seconds


def whole_ms(cpu_seconds: float) -> float:
    """CPU seconds (a difference of tick counts: multiples of 10 ms) in whole milliseconds. Why: the sums
    of per-process times carry float error (60 ms over 20 s came out as 3.000000000000025 ms/s and failed
    the "<= 3.0" check); no figure here is finer than a millisecond."""
    return float(round(cpu_seconds * 1000.0))


def sse_probe(target: Target, args: argparse.Namespace) -> dict[str, Any]:
    """One raw-HTTP look at the wire (the openai client hides ``id:`` lines and header details)."""
    out: dict[str, Any] = {}
    body = {
        "model": "m",
        "input": args.question,
        "stream": True,
        "background": True,
        "metadata": {
            "research_phases": str(args.phases),
            "words_per_phase": str(args.words),
            "delta_delay_ms": str(int(args.delay_ms)),
        },
    }

    def read(resp: httpx.Response) -> tuple[int, int, list[int], str | None]:
        id_lines = event_lines = 0
        seqs: list[int] = []
        rid = None
        for count, line in enumerate(resp.iter_lines()):
            if count > 4 * MAX_EVENTS_PER_STREAM:
                break
            if line.startswith("id:"):
                id_lines += 1
            elif line.startswith("event:"):
                event_lines += 1
            elif line.startswith("data:"):
                with contextlib.suppress(ValueError):
                    data = json.loads(line[5:])
                    seqs.append(int(data.get("sequence_number", -1)))
                    if rid is None and isinstance(data.get("response"), dict):
                        rid = data["response"].get("id")
        return id_lines, event_lines, seqs, rid

    try:
        with httpx.Client(base_url=target.url, timeout=args.timeout) as http:
            with http.stream("POST", "/responses", json=body) as resp:
                out["status"] = resp.status_code
                out["content_type"] = resp.headers.get("content-type")
                ids, evs, seqs, rid = read(resp)
            out.update(
                events=len(seqs),
                id_lines=ids,
                event_lines=evs,
                seq_gaps=_gaps(seqs),
                first_seq=seqs[0] if seqs else None,
                last_seq=seqs[-1] if seqs else None,
            )
            if rid:
                params = {"stream": "true", "starting_after": str(args.reconnect_after)}
                with http.stream("GET", f"/responses/{rid}", params=params) as resp:
                    ids, evs, rseqs, _ = read(resp)
                out.update(
                    replay_status=resp.status_code,
                    replay_events=len(rseqs),
                    replay_id_lines=ids,
                    replay_first_seq=rseqs[0] if rseqs else None,
                    replay_gaps=_gaps(rseqs),
                )
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"[:300]
    return out


# --------------------------------------------------------------------------------------------- reporting
def _ok(target: Target) -> list[RunResult]:
    return [r for r in target.results if r.ok]


def _vals(target: Target, name: str) -> list[float]:
    return [getattr(r, name) for r in _ok(target) if not math.isnan(getattr(r, name))]


def metrics(target: Target, phases: int, words: int) -> dict[str, float]:
    ok = _ok(target)
    ms = 1000.0
    m: dict[str, float] = {}
    first, total = _vals(target, "first_event_s"), _vals(target, "total_s")
    m["first event p50 (ms)"] = percentile(first, 50) * ms
    m["first event p95 (ms)"] = percentile(first, 95) * ms
    m["whole run p50 (ms)"] = percentile(total, 50) * ms
    m["events per run (median)"] = statistics.median([r.events for r in ok]) if ok else math.nan
    rates = [r.events / r.total_s for r in ok if r.total_s > 0]
    m["events/s delivered p50"] = percentile(rates, 50)
    m["events/s delivered p5 (worst)"] = percentile(rates, 5)
    cpu_runs = [r for r in ok if not math.isnan(r.cpu_s)]
    events = sum(r.events for r in cpu_runs)
    m["server CPU per event (ms, total/total)"] = sum(r.cpu_s for r in cpu_runs) / events * ms if events else math.nan
    m["server CPU per run p50 (ms)"] = percentile([r.cpu_s for r in cpu_runs], 50) * ms
    # Product code only: the host double's worker process; the reference server has no such split (its one
    # process is the product), so its whole-process figure is the comparison point.
    worker = [r.cpu_children_s if target.name == "ours" else r.cpu_root_s for r in cpu_runs]
    m["worker CPU per event (ms; ref: whole server)"] = sum(worker) / events * ms if events else math.nan
    host = sum(r.cpu_root_s for r in cpu_runs) / events * ms if events and target.name == "ours" else math.nan
    m["host-double host CPU per event (ms)"] = host
    m["reconnect first event p50 (ms)"] = percentile(_vals(target, "reconnect_first_s"), 50) * ms
    m["reconnect first event p95 (ms)"] = percentile(_vals(target, "reconnect_first_s"), 95) * ms
    m["reconnect to completion p50 (ms)"] = percentile(_vals(target, "reconnect_total_s"), 50) * ms
    m["reconnect to completion p95 (ms)"] = percentile(_vals(target, "reconnect_total_s"), 95) * ms
    m["reconnect events (median)"] = statistics.median([r.reconnect_events for r in ok]) if ok else math.nan
    rc = [r for r in ok if not math.isnan(r.reconnect_cpu_s) and r.reconnect_events]
    revents = sum(r.reconnect_events for r in rc)
    m["server CPU per replayed event (ms)"] = sum(r.reconnect_cpu_s for r in rc) / revents * ms if revents else math.nan
    storage = _vals(target, "storage_calls")
    m["storage calls per phase (mean)"] = statistics.fmean(storage) / phases if storage else math.nan
    m["storage calls per delta (mean)"] = statistics.fmean(storage) / (phases * words) if storage else math.nan
    appends = [float(r.storage_detail.get("blob append", 0)) for r in ok if r.storage_detail]
    m["blob appends per delta (mean)"] = statistics.fmean(appends) / (phases * words) if appends else math.nan
    rstorage = _vals(target, "reconnect_storage_calls")
    m["storage calls per reconnect (mean)"] = statistics.fmean(rstorage) if rstorage else math.nan
    m["sequence gaps (all runs)"] = float(sum(r.seq_gaps for r in ok))
    m["idle server CPU (ms per s)"] = target.idle_cpu_ms_per_s
    m["idle worker CPU (ms per s; ref: whole server)"] = target.idle_worker_cpu_ms_per_s
    m["server CPU in the settle window after a run (ms)"] = target.after_run_cpu_ms
    m["failed runs"] = float(len(target.results) - len(ok))
    m["runs measured"] = float(len(ok))
    return m


HIGHER_IS_BETTER = {"events/s delivered p50", "events/s delivered p5 (worst)"}
# The hot-path targets: (metric, bound on ours/reference; for HIGHER_IS_BETTER metrics a lower bound).
# CPU targets count the worker, the app's own process: the host double's host (platform, HTTP proxy,
# Durable engine) stands in for the Functions host, which is .NET and not this app's code; its CPU is
# printed ("server CPU", "host-double host CPU") but not targeted.
RATIO_TARGETS = (
    ("whole run p50 (ms)", 1.3),
    ("worker CPU per event (ms; ref: whole server)", 1.0),
    ("reconnect first event p50 (ms)", 2.0),
    ("events/s delivered p50", 0.7),
)
IDLE_CPU_TARGET_MS_PER_S = 3.0


def target_check(targets: list[Target], phases: int, words: int) -> list[dict[str, Any]]:
    """Each target with its measured value and whether it is met (only when both servers were measured)."""
    by_name = {t.name: metrics(t, phases, words) for t in targets}
    rows: list[dict[str, Any]] = []
    if "ours" in by_name and "reference" in by_name:
        for key, bound in RATIO_TARGETS:
            ours, ref = by_name["ours"][key], by_name["reference"][key]
            ratio = ours / ref if ref and not math.isnan(ours) and not math.isnan(ref) else math.nan
            higher = key in HIGHER_IS_BETTER
            met = not math.isnan(ratio) and (ratio >= bound if higher else ratio <= bound)
            rows.append({"metric": f"{key} ours/ref", "value": ratio, "target": f"{'>=' if higher else '<='} {bound}",
                         "met": met})
    if "ours" in by_name:
        idle = by_name["ours"]["idle worker CPU (ms per s; ref: whole server)"]
        rows.append({"metric": "ours idle worker CPU (ms per s)", "value": idle,
                     "target": f"<= {IDLE_CPU_TARGET_MS_PER_S}",
                     "met": not math.isnan(idle) and idle <= IDLE_CPU_TARGET_MS_PER_S})
    return rows
NO_RATIO = {
    "runs measured",
    "failed runs",
    "sequence gaps (all runs)",
    "events per run (median)",
    "reconnect events (median)",
}


def _fmt(value: float) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def render(targets: list[Target], phases: int, words: int) -> str:
    by_name = {t.name: metrics(t, phases, words) for t in targets}
    names = [t.name for t in targets]
    keys = list(next(iter(by_name.values())).keys())
    header = ["metric", *names] + (["ours/ref", "better"] if len(names) == 2 else [])
    rows = [header]
    for key in keys:
        row = [key, *(_fmt(by_name[n][key]) for n in names)]
        if len(names) == 2:
            ours, ref = by_name["ours"][key], by_name["reference"][key]
            if key in NO_RATIO or math.isnan(ours) or math.isnan(ref) or ref == 0:
                row += ["", ""]
            else:
                row += [f"{ours / ref:.2f}", "higher" if key in HIGHER_IS_BETTER else "lower"]
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = [
        " | ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
        for r in rows
    ]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ main
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ours", help="base URL of our service (the host double), e.g. http://127.0.0.1:7071")
    p.add_argument("--reference", help="base URL of bench/reference_server.py, e.g. http://127.0.0.1:8088")
    p.add_argument("--only", choices=["ours", "reference"], help="measure one server only")
    p.add_argument("--start", action="store_true", help="spawn every measured server not given by URL")
    p.add_argument("--start-ours", action="store_true", help="spawn python -m tests.hostdouble")
    p.add_argument("--start-reference", action="store_true", help="spawn bench/reference_server.py")
    p.add_argument("--runs", type=int, default=20, help="measured runs per server (1-1000, default 20)")
    p.add_argument("--warmup", type=int, default=2, help="unmeasured runs per server first (default 2)")
    p.add_argument("--phases", type=int, default=3)
    p.add_argument("--words", type=int, default=48, help="word deltas per phase (default 48)")
    p.add_argument("--delay-ms", type=float, default=0.0, help="per-delta delay (default 0)")
    p.add_argument("--question", default="What makes a streaming service crash resilient?")
    p.add_argument("--reconnect-after", type=int, default=10, help="starting_after for the reconnect")
    p.add_argument("--timeout", type=float, default=30.0, help="per-request timeout, s (default 30)")
    p.add_argument("--max-seconds", type=float, default=900.0, help="stop measuring after this long")
    p.add_argument("--settle-ms", type=float, default=20.0, help="wait after the terminal event before CPU")
    p.add_argument("--idle-seconds", type=float, default=20.0, help="idle CPU window per server (0: skip)")
    p.add_argument("--idle-settle", type=float, default=15.0,
                   help="seconds after the probe run before the idle window (its CPU is reported apart)")
    p.add_argument("--count-storage", action="store_true", help="count storage calls (see module doc)")
    p.add_argument(
        "--reference-observability",
        action="store_true",
        help="spawned reference keeps the SDK's OpenTelemetry setup (reference_server.py --observability)",
    )
    p.add_argument("--ours-pid", type=int, help="server pid (default: the process listening on the port)")
    p.add_argument("--reference-pid", type=int, help="server pid (default: the process listening on the port)")
    p.add_argument("--azurite-ports", default="10000,10001,10002", help="blob,queue,table for the proxy")
    p.add_argument("--ready-timeout", type=float, default=90.0, help="wait for a spawned server, s")
    p.add_argument("--json", help="also write raw results to this file")
    args = p.parse_args(argv)
    if not 1 <= args.runs <= 1000 or not 0 <= args.warmup <= 50:
        p.error("--runs must be 1-1000 and --warmup 0-50")
    if not (1 <= args.phases <= 20 and 1 <= args.words <= 2000 and 0 <= args.delay_ms <= 5000):
        p.error("--phases 1-20, --words 1-2000, --delay-ms 0-5000")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    names = [args.only] if args.only else ["ours", "reference"]
    start = {
        "ours": args.start_ours or (args.start and not args.ours),
        "reference": args.start_reference or (args.start and not args.reference),
    }
    for name in names:
        if not start[name] and not getattr(args, name):
            raise SystemExit(f"give --{name} URL or --start/--start-{name}")
    log_dir = Path(tempfile.mkdtemp(prefix="bench-compare-"))
    managed: list[ManagedServer] = []
    proxy: CountingProxy | None = None
    targets: list[Target] = []
    probes: dict[str, dict[str, Any]] = {}
    try:
        for name in names:
            url = getattr(args, name)
            pid = getattr(args, f"{name}_pid")
            storage: Callable[[], collections.Counter[str] | None] = lambda: None  # noqa: E731
            if start[name]:
                port = free_port()
                env = dict(os.environ)
                if name == "reference":
                    argv_ = [
                        sys.executable,
                        "bench/reference_server.py",
                        "--port",
                        str(port),
                        "--words",
                        str(args.words),
                        "--phases",
                        str(args.phases),
                        "--delay-ms",
                        str(args.delay_ms),
                        "--state-root",
                        str(log_dir / "reference-state"),
                    ]
                    if args.count_storage:
                        argv_.append("--count-storage")
                    if args.reference_observability:
                        argv_.append("--observability")
                else:
                    argv_ = [sys.executable, "-m", "tests.hostdouble", "--port", str(port), "--app-dir", str(ROOT)]
                    env.setdefault("AzureWebJobsStorage", "UseDevelopmentStorage=true")
                    # host.json's hubName is %TASKHUB_NAME%: local.settings.json names it; else the local default.
                    if not env.get("TASKHUB_NAME") and not _settings_value("TASKHUB_NAME"):
                        env["TASKHUB_NAME"] = "ResilientResponsesLocal"
                    env["RESILIENT_STORAGE_PREFIX"] = "bench" + "".join(
                        secrets.choice(string.ascii_lowercase + string.digits) for _ in range(6)
                    )
                    env.setdefault("RESILIENT_AGENT_DELTA_DELAY_MS", str(int(args.delay_ms)))
                    if args.count_storage:
                        blob, queue, table = (int(x) for x in args.azurite_ports.split(","))
                        proxy = CountingProxy({"blob": blob, "queue": queue, "table": table})
                        proxy.start()
                        env["AzureWebJobsStorage"] = proxy.connection_string()
                        storage = proxy.snapshot
                server = ManagedServer(name, argv_, env, log_dir)
                managed.append(server)
                print(f"starting {name}: {shlex.join(argv_)}", flush=True)
                url = server.start(args.ready_timeout)
                pid = server.pid
            url = loopback_url(url)
            if name == "reference":
                storage = reference_stats(url, args.timeout) or storage
            pid = pid or listening_pid(url)
            client = OpenAI(base_url=url, api_key="x", max_retries=0, timeout=args.timeout)
            targets.append(Target(name=name, url=url, pid=pid, storage=storage, client=client))
            print(f"{name}: {url} (server pid {pid or 'unknown: CPU not measured'})", flush=True)

        for target in targets:
            probes[target.name] = sse_probe(target, args)
            if args.idle_seconds > 0:
                measure_idle(target, args.idle_seconds, args.idle_settle)
        deadline = time.monotonic() + args.max_seconds
        for i in range(args.warmup + args.runs):
            if time.monotonic() > deadline:
                print(f"stopping early: --max-seconds {args.max_seconds:.0f} reached", flush=True)
                break
            for target in targets:  # interleaved: ours, reference, ours, reference, ...
                if target.disabled:
                    continue
                result = one_run(target, args)
                if i >= args.warmup:
                    target.results.append(result)
                    target.storage_breakdown.update(result.storage_detail)
                target.consecutive_failures = 0 if result.ok else target.consecutive_failures + 1
                if not result.ok:
                    print(f"  {target.name} run {i + 1}: {result.error}", flush=True)
                if target.consecutive_failures >= 3:
                    target.disabled = result.error
                    print(f"  {target.name}: 3 failures in a row, no more runs", flush=True)
            if all(t.disabled for t in targets):
                break

        print()
        print(render(targets, args.phases, args.words))
        print()
        checks = target_check(targets, args.phases, args.words)
        for check in checks:
            print(f"target {check['metric']}: {_fmt(check['value'])} (target {check['target']}): "
                  f"{'met' if check['met'] else 'NOT met'}")
        if checks:
            print()
        for target in targets:
            if target.storage_breakdown:
                runs = max(1, len(_ok(target)))
                parts = ", ".join(f"{k} {v / runs:.1f}" for k, v in target.storage_breakdown.most_common())
                print(f"{target.name} storage calls per run: {parts}")
        for name, probe in probes.items():
            print(f"{name} wire probe: {json.dumps(probe)}")
        print(
            f"\nsettings: phases={args.phases} words/phase={args.words} delay={args.delay_ms} ms "
            f"runs={args.runs} warmup={args.warmup} reconnect starting_after={args.reconnect_after}"
        )
        print("command: " + shlex.join([sys.executable, *sys.argv]))
        if args.json:
            Path(args.json).write_text(
                json.dumps(
                    {
                        "command": [sys.executable, *sys.argv],
                        "metrics": {t.name: metrics(t, args.phases, args.words) for t in targets},
                        "targets": checks,
                        "runs": {t.name: [asdict(r) for r in t.results] for t in targets},
                        "storage_breakdown": {t.name: dict(t.storage_breakdown) for t in targets},
                        "probes": probes,
                    },
                    indent=2,
                    default=str,
                )
            )
        return 0 if all(_ok(t) for t in targets) else 1
    finally:
        for target in targets:
            with contextlib.suppress(Exception):
                target.client.close()
        for server in reversed(managed):
            server.stop()
        if proxy is not None:
            proxy.stop()
        shutil.rmtree(log_dir / "reference-state", ignore_errors=True)
        if managed:
            print(f"server logs: {log_dir}")


def reference_stats(url: str, timeout: float) -> Callable[[], collections.Counter[str] | None] | None:
    """The reference server's store-call counters, when it runs with ``--count-storage``."""
    try:
        if httpx.get(f"{url}/bench/stats", timeout=timeout).status_code != 200:
            return None
    except httpx.HTTPError:
        return None

    def read() -> collections.Counter[str] | None:
        try:
            return collections.Counter(httpx.get(f"{url}/bench/stats", timeout=timeout).json())
        except (httpx.HTTPError, ValueError):
            return None

    return read


if __name__ == "__main__":
    sys.exit(main())
