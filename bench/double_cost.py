"""What the host double itself costs per event, and what that cost is made of, for one or two checkouts.

The double's host (its Durable backend, HTTP proxy and event stream) and platform share the machine's
cores with the worker and Azurite, so their CPU shows in the whole-run time. This prints, per checkout:

* CPU per event of the double's platform, host and worker (psutil, over ``--runs`` sequential streamed runs
  of the offline agent, the workload of ``compare.py``), and the wall time per run;
* the host's storage calls per run, by kind (the double's own ``_double/stats`` counters);
* CPU per call of each kind, made in process through that checkout's own ``Storage`` and ``Queues`` (the
  double's clients, against the same Azurite): an episode's history commit (4 events and the sentinel in
  one table transaction, as each episode of this workload commits; also 1 and 8 events), an instance-row
  upsert, a point read, a queue send + delete;
* the host CPU those calls explain (calls per run × CPU per call, per event) beside the measured figure;
* with ``--spy``, the host's busy time by layer (SDK transaction body, aiohttp, SDK request code, policies,
  the double's own code, …) from py-spy samples of the thread holding the GIL during the runs.

With ``--also <checkout>`` the other checkout (e.g. a ``git worktree`` of an older commit, sharing this
``.venv``) is measured in the same rounds, alternating, so the machine's noise hits both alike; each
round starts a fresh double per checkout. Medians over ``--rounds``.

    AzureWebJobsStorage="$(bash scripts/azurite.sh connection-string NAME)" \\
        .venv/bin/python bench/double_cost.py --runs 20 --rounds 3 [--spy] [--also ../other-checkout]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CALL_KINDS = {  # per-call kind measured in process → the ``_double/stats`` counters it stands for
    "history commit (4 events + sentinel)": ("table.batch",),  # an episode of a run: 4 events (see docstring)
    "instance row write": ("table.upsert", "table.create_entity", "table.update"),
    "instance row read": ("table.get", "table.query"),
    "queue send + delete (per call)": ("queue.send", "queue.delete", "queue.update", "queue.receive"),
}

EXTRA_COMMIT_SIZES = (1, 8)  # how a transaction's CPU grows with its operations
# Where the host's CPU goes, by the innermost frame of a py-spy sample that names one of these (``--spy``).
LAYERS = (
    ("table transaction: multipart body (email package)", r"_prepare_multipart_body_helper|Message\.as_bytes"),
    ("table transaction: multipart answer", r"_get_raw_parts|_parse_response|parse_responses"),
    ("aiohttp (the SDKs' transport)", r"aiohttp/|AioHttpTransport\.send|transport/_aiohttp\.py"),
    ("SDK request building and answer parsing", r"_generated/|_serialization|model_base|_deserialize|"
                                                r"_convert_to_entity|_decode_error|_models\.py|_entity\.py"),
    ("SDK pipeline policies", r"pipeline/policies|_policies|policies_async|policies\.py|authentication|"
                              r"_base_async\.py|_tools_async"),
    ("SDK client methods", r"_table_client_async|_queue_client_async|decorator_async|_table_batch|"
                           r"_base_client_async|blob/aio"),
    ("the double's own code (backend model, proxy, event stream)", r"hostdouble/"),
    ("uvicorn, starlette", r"uvicorn|starlette|httptools"),
)


def stream_run(http: Any, phases: int, words: int) -> int:
    body = {"model": "m", "input": "What makes a streaming service crash resilient?", "stream": True,
            "background": True, "metadata": {"research_phases": str(phases), "words_per_phase": str(words),
                                             "delta_delay_ms": "0"}}
    events = 0
    with http.stream("POST", "/responses", json=body) as answer:
        answer.raise_for_status()
        for line in answer.iter_lines():
            events += line.startswith("data:")
    return events


def spy_shares(path: Path) -> dict[str, float]:
    """Share of the sampled busy time by :data:`LAYERS` (the innermost frame that matches names it)."""
    import re

    counts: dict[str, int] = {}
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        label = "other (event loop, sockets)"
        for frame in reversed(stack.split(";")):
            found = next((name for name, pattern in LAYERS if re.search(pattern, frame)), None)
            if found:
                label = found
                break
        counts[label] = counts.get(label, 0) + int(count)
    total = sum(counts.values()) or 1
    return {label: count / total for label, count in sorted(counts.items(), key=lambda kv: -kv[1])}


def measure_runs(checkout: Path, runs: int, phases: int, words: int, spy: bool = False) -> dict[str, Any]:
    """CPU per event of each double process and storage calls per run, over ``runs`` sequential runs.

    ``spy``: py-spy samples the host meanwhile, only the thread holding the GIL (``--gil``), so a thread
    descheduled inside a ``send()`` to Azurite does not count as busy, as it would in plain sampling."""
    import httpx
    import psutil

    from tests.hostdouble.api import HostDouble

    env = {"AzureWebJobsStorage": os.environ.get("AzureWebJobsStorage", "UseDevelopmentStorage=true"),
           "RESILIENT_STORAGE_PREFIX": "dc" + secrets.token_hex(4)}
    with HostDouble(checkout, env=env, settings=None) as double, \
            httpx.Client(base_url=double.base_url, timeout=60) as http:
        for _ in range(3):
            stream_run(http, phases, words)
        before_stats = double.stats()
        host = psutil.Process(int(before_stats["host_pid"]))
        procs = {"platform": host.parent(), "host": host, "worker": psutil.Process(int(before_stats["worker_pid"]))}
        time.sleep(0.5)  # the warm-up's tail (queue pollers backing off) stays out of the measurement
        spy_path = Path(tempfile.mkdtemp(prefix="double-cost-")) / "host.txt"
        spying = subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "-p", str(host.pid),
                                   "-r", "400", "--gil", "-f", "raw", "-o", str(spy_path), "--nonblocking"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) if spy else None
        if spying is not None:
            time.sleep(1.0)  # py-spy attaches
        before = {name: sum(proc.cpu_times()[:2]) for name, proc in procs.items() if proc is not None}
        started = time.perf_counter()
        events = sum(stream_run(http, phases, words) for _ in range(runs))
        wall = time.perf_counter() - started
        time.sleep(0.05)
        cpu = {name: sum(proc.cpu_times()[:2]) - before[name] for name, proc in procs.items() if proc is not None}
        after_stats = double.stats()
        if spying is not None:
            spying.send_signal(signal.SIGINT)
            spying.wait(60)
    calls = {kind: (count - before_stats["storage_calls"].get(kind, 0)) / runs
             for kind, count in after_stats["storage_calls"].items()}
    return {"events": events, "wall_ms_per_run": wall * 1000 / runs,
            "cpu_ms_per_event": {name: value * 1000 / events for name, value in cpu.items()},
            "calls_per_run": {kind: count for kind, count in calls.items() if count},
            "host_profile": spy_shares(spy_path) if spy and spy_path.exists() else {}}


async def measure_calls(calls: int) -> dict[str, float]:
    """CPU per call of the double's own storage calls, in process, kinds interleaved."""
    from tests.hostdouble.durable.messaging import Envelope, Queues
    from tests.hostdouble.durable.store import Storage, TaskHubNames

    names = TaskHubNames("dc" + secrets.token_hex(5), 1)
    storage = Storage(os.environ.get("AzureWebJobsStorage", "UseDevelopmentStorage=true"), names)
    queues = Queues(storage)
    await storage.create_task_hub()
    instance_id = "bench-" + uuid.uuid4().hex
    event = {"EventType": 4, "EventId": 0, "Name": "run_phase", "Input": json.dumps({"phase": 1, "x": "y" * 150}),
             "Timestamp": "2026-01-01T00:00:00.000000Z"}
    position: dict[str, Any] = {"etag": None, "index": 0}

    async def commit() -> None:
        position["etag"] = await storage.commit_history(instance_id, "exec", position["index"], [event] * 4,
                                                        {1: uuid.uuid4().hex}, position["etag"], {"n": 1})
        position["index"] += 4

    def commit_of(size: int) -> Callable[[], Awaitable[None]]:
        other = "bench-" + uuid.uuid4().hex
        mark: dict[str, Any] = {"etag": None, "index": 0}

        async def call() -> None:
            mark["etag"] = await storage.commit_history(other, "exec", mark["index"], [event] * size, {},
                                                        mark["etag"], {"n": 1})
            mark["index"] += size
        return call

    async def upsert() -> None:
        await storage.write_instance(instance_id, {"RuntimeStatus": "Running", "Output": "null"})

    async def read() -> None:
        await storage.read_instance(instance_id)

    async def send_delete() -> None:
        await queues.delete(await queues.send(names.control_queue(0), Envelope(instance_id, event)))

    kinds: dict[str, Callable[[], Awaitable[None]]] = dict(zip(CALL_KINDS, (commit, upsert, read, send_delete),
                                                                strict=True))
    for size in EXTRA_COMMIT_SIZES:
        kinds[f"history commit ({size} event{'s' if size > 1 else ''} + sentinel)"] = commit_of(size)
    per_call: dict[str, list[float]] = {name: [] for name in kinds}
    try:
        for call in kinds.values():
            for _ in range(3):
                await call()
        for _ in range(3):
            for name, call in kinds.items():
                started = time.process_time()
                for _ in range(calls):
                    await call()
                per_call[name].append((time.process_time() - started) * 1000 / calls)
    finally:
        await storage.delete_task_hub()
        await storage.close()
    result = {name: statistics.median(values) for name, values in per_call.items()}
    result["queue send + delete (per call)"] /= 2
    return result


def child(args: argparse.Namespace) -> None:
    checkout = Path(args.measure).resolve()
    sys.path.insert(0, str(checkout))
    result = measure_runs(checkout, args.runs, args.phases, args.words, spy=args.spy)
    result["cpu_ms_per_call"] = asyncio.run(measure_calls(args.calls))
    print(json.dumps(result))


def explained_ms_per_event(result: dict[str, Any]) -> float:
    """The host CPU per event that the storage calls account for (calls per run × CPU per call)."""
    per_run = 0.0
    for kind, counters in CALL_KINDS.items():
        count = sum(result["calls_per_run"].get(counter, 0.0) for counter in counters)
        per_run += count * result["cpu_ms_per_call"][kind]
    events_per_run = float(result["events"]) / max(1, int(result["runs"]))
    return per_run / events_per_run


def report(results: dict[str, list[dict[str, Any]]]) -> None:
    def med(values: list[float]) -> str:
        return f"{statistics.median(values):.3f}" if values else "n/a"

    labels = list(results)
    rows: list[tuple[str, list[str]]] = []
    for process in ("platform", "host", "worker"):
        rows.append((f"{process} CPU per event (ms)",
                     [med([r["cpu_ms_per_event"].get(process, 0.0) for r in results[c]]) for c in labels]))
    rows.append(("wall time per run (ms)", [med([r["wall_ms_per_run"] for r in results[c]]) for c in labels]))
    kinds = sorted({k for c in labels for r in results[c] for k in r["calls_per_run"]})
    for kind in kinds:
        rows.append((f"{kind} per run", [med([r["calls_per_run"].get(kind, 0.0) for r in results[c]]) for c in labels]))
    for kind in sorted({k for c in labels for r in results[c] for k in r["cpu_ms_per_call"]}):
        rows.append((f"CPU per call: {kind} (ms)", [med([r["cpu_ms_per_call"][kind] for r in results[c]
                                                         if kind in r["cpu_ms_per_call"]]) for c in labels]))
    rows.append(("host CPU per event explained by storage calls (ms)",
                 [med([explained_ms_per_event(r) for r in results[c]]) for c in labels]))
    layers = sorted({k for c in labels for r in results[c] for k in r.get("host_profile", {})})
    for layer in layers:
        rows.append((f"host busy samples: {layer} (%)", [
            med([100 * r["host_profile"].get(layer, 0.0) for r in results[c] if r.get("host_profile")])
            for c in labels]))
    width = max(len(name) for name, _ in rows)
    print(f"{'':{width}} | " + " | ".join(labels))
    for name, values in rows:
        print(f"{name:{width}} | " + " | ".join(f"{v:>{len(label)}}" for v, label in zip(values, labels, strict=True)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20, help="measured runs per double")
    parser.add_argument("--rounds", type=int, default=3, help="fresh doubles per checkout, alternating")
    parser.add_argument("--calls", type=int, default=40, help="in-process calls of each kind per round")
    parser.add_argument("--phases", type=int, default=3)
    parser.add_argument("--words", type=int, default=48)
    parser.add_argument("--also", default=None, help="another checkout to measure in the same rounds")
    parser.add_argument("--spy", action="store_true",
                        help="py-spy (--gil) on the host during the runs: its busy time by layer")
    parser.add_argument("--measure", default=None, help=argparse.SUPPRESS)  # child mode: one checkout, one round
    args = parser.parse_args(argv)
    if not 1 <= args.runs <= 500 or not 1 <= args.rounds <= 20:
        parser.error("--runs must be 1..500 and --rounds 1..20")
    if args.measure:
        child(args)
        return 0
    checkouts = [ROOT] + ([Path(args.also).resolve()] if args.also else [])
    results: dict[str, list[dict[str, Any]]] = {str(c): [] for c in checkouts}
    for round_ in range(args.rounds):
        for checkout in checkouts if round_ % 2 == 0 else list(reversed(checkouts)):
            command = [sys.executable, str(Path(__file__).resolve()), "--measure", str(checkout), "--runs",
                       str(args.runs), "--calls", str(args.calls), "--phases", str(args.phases), "--words",
                       str(args.words)] + (["--spy"] if args.spy else [])
            done = subprocess.run(command, cwd=checkout, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                print(done.stdout + done.stderr, file=sys.stderr)
                return 1
            result = json.loads(done.stdout.strip().splitlines()[-1])
            result["runs"] = args.runs
            results[str(checkout)].append(result)
            print(f"round {round_ + 1}: {checkout}: host {result['cpu_ms_per_event'].get('host', 0):.3f} ms/event",
                  file=sys.stderr, flush=True)
    report(results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
