"""Where the worker's CPU goes: py-spy over N sequential runs of the host double, summarized.

Starts the host double with the unmodified ``function_app.py`` on Azurite, warms it up, then samples the
worker process (and the host process) with ``py-spy record --format raw`` while ``--runs`` streaming runs
of the offline agent (``--phases`` × ``--words``, no delay: the workload of ``compare.py``) are read to
their terminal event, one after the other. Prints CPU per run and per event from psutil (the figures to
trust) and, from the samples, the share of the worker's busy time by product area and the top frames.

    .venv/bin/pip install -r bench/requirements.txt        # py-spy, psutil (bench-only)
    AzureWebJobsStorage=UseDevelopmentStorage=true .venv/bin/python bench/profile_worker.py --runs 20

py-spy needs permission to read the worker's memory (root, or ptrace allowed). Sampling slows the
processes down somewhat; CPU figures printed here are for comparison between versions, not absolutes.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.pyspy_raw import busy_stacks  # noqa: E402
from tests.hostdouble.api import HostDouble  # noqa: E402

# A sample whose innermost frame is one of these is a thread waiting, not working.
IDLE_LEAF = re.compile(r"(\.select \(.*selectors\.py|Condition\.wait \(.*threading\.py|^sleep \(.*tasks\.py|"
                       r"_die_with_parent)")
AREAS = (  # (label, pattern on the stack): the first that matches a sample's stack names its area
    ("product: plan / finalize (in the first and last phase's activities, and as steps)",
     r"(Engine\.plan|Engine\.finalize|mark_queued) \("),
    ("product: phase streaming (run_phase, appends, control reads)",
     r"(run_phase|Appender\._run|ControlPoller\._run) \("),
    ("product: create (POST /responses)", r"(create_response|TableResponseStore\.create|BlobEventLog\.create|"
                                          r"put_input_items) \("),
    ("product: SSE tails (live streams, reconnects, GET)", r"(tail_events|get_response|_stream_then_forget) \("),
    ("Durable SDK (orchestrator and entity replay)", r"durable_functions/"),
    ("host double's worker endpoints, uvicorn, starlette", r"(hostdouble/|uvicorn/|starlette/|h11/)"),
)


def stream_run(http: httpx.Client, phases: int, words: int) -> int:
    body = {"model": "m", "input": "What makes a streaming service crash resilient?", "stream": True,
            "background": True, "metadata": {"research_phases": str(phases), "words_per_phase": str(words),
                                             "delta_delay_ms": "0"}}
    events = 0
    with http.stream("POST", "/responses", json=body) as answer:
        answer.raise_for_status()
        for line in answer.iter_lines():
            events += line.startswith("data:")
    return events


def summarize(path: Path, top: int) -> list[str]:
    areas: collections.Counter[str] = collections.Counter()
    leaves: collections.Counter[str] = collections.Counter()
    busy = 0
    for frames, n in busy_stacks(path, IDLE_LEAF):
        busy += n
        joined = ";".join(frames)
        area = next((label for label, pattern in AREAS if re.search(pattern, joined)), "event loop, sockets, other")
        areas[area] += n
        leaves[re.sub(r" \(([^()]*/)?([^/()]+\.py):\d+\)", r" (\2)", frames[-1])] += n
    if not busy:
        return ["  no busy samples"]
    out = [f"  busy samples: {busy}", "  by area:"]
    out += [f"    {100 * v / busy:5.1f}%  {k}" for k, v in areas.most_common()]
    out.append("  top frames (self):")
    out += [f"    {100 * v / busy:5.1f}%  {k}" for k, v in leaves.most_common(top)]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--phases", type=int, default=3)
    parser.add_argument("--words", type=int, default=48)
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args(argv)
    if not 1 <= args.runs <= 500:
        parser.error("--runs must be 1..500")
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        raise SystemExit("py-spy not found: .venv/bin/pip install -r bench/requirements.txt")
    out_dir = Path(tempfile.mkdtemp(prefix="profile-worker-"))
    env = {"AzureWebJobsStorage": os.environ.get("AzureWebJobsStorage", "UseDevelopmentStorage=true"),
           "RESILIENT_STORAGE_PREFIX": "pw" + secrets.token_hex(4)}
    with HostDouble(ROOT, env=env, settings=None) as double, httpx.Client(base_url=double.base_url,
                                                                          timeout=60) as http:
        for _ in range(3):
            stream_run(http, args.phases, args.words)
        pids = {"worker": int(double.stats()["worker_pid"]), "host": int(double.stats()["host_pid"])}
        spies = [subprocess.Popen([spy, "record", "-p", str(pid), "-r", str(args.rate), "-f", "raw", "-o",
                                   str(out_dir / f"{name}.txt"), "--nonblocking"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for name, pid in pids.items()]
        time.sleep(1.0)
        procs = {name: psutil.Process(pid) for name, pid in pids.items()}
        before = {name: sum(p.cpu_times()[:2]) for name, p in procs.items()}
        events = sum(stream_run(http, args.phases, args.words) for _ in range(args.runs))
        time.sleep(0.3)
        cpu = {name: sum(p.cpu_times()[:2]) - before[name] for name, p in procs.items()}
        for proc in spies:
            proc.send_signal(signal.SIGINT)
            proc.wait(60)
    print(f"{args.runs} runs of {args.phases} phases x {args.words} words, {events} events, sampled at "
          f"{args.rate}/s by py-spy")
    for name in ("worker", "host"):
        print(f"{name}: {cpu[name] * 1000 / args.runs:.1f} ms CPU per run, {cpu[name] * 1000 / events:.3f} ms "
              "per event (psutil)")
        print("\n".join(summarize(out_dir / f"{name}.txt", args.top)))
    print(f"raw samples: {out_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
