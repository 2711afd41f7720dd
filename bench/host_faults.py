"""Host-double figures: resuming after a whole-host SIGKILL, storage calls per episode/activity, idle CPU.

    .venv/bin/python bench/host_faults.py resume                 # fixture app, the fixture's host.json
    .venv/bin/python bench/host_faults.py resume --repo-settings # fixture app, the repo host.json's durableTask values
    .venv/bin/python bench/host_faults.py product                # function_app.py: 3 runs in flight, SIGKILL, restart
    .venv/bin/python bench/host_faults.py calls --steps 20       # storage calls of a 20-activity orchestration
    .venv/bin/python bench/host_faults.py calls --product        # the Durable backend's calls per response
    .venv/bin/python bench/host_faults.py idle --product         # CPU per process while idle (ms/s)

``--set name=value`` overrides a host.json value for the double (``--set functionTimeout=00:10:00``,
``--set extensions.durableTask.storageProvider.controlQueueVisibilityTimeout=00:00:30``), through the
``AzureFunctionsJobHost__`` app settings the real host reads. Storage: ``AzureWebJobsStorage`` (default
``UseDevelopmentStorage=true``, loopback endpoints only). Every double gets its own task hub.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.hostdouble.api import HostDouble
from tests.hostdouble.testkit import FIXTURE_APP, done, markers, start, uid, wait_until

ROOT = Path(__file__).resolve().parents[1]
DURABLE_KEYS = ("partitionCount", "controlQueueVisibilityTimeout", "workItemQueueVisibilityTimeout",
                "maxQueuePollingInterval")


def overrides(sets: list[str], repo_settings: bool) -> dict[str, str]:
    env: dict[str, str] = {}
    if repo_settings:
        tree = json.loads((ROOT / "host.json").read_text())
        provider = tree.get("extensions", {}).get("durableTask", {}).get("storageProvider", {})
        defaults = {"controlQueueVisibilityTimeout": "00:05:00", "workItemQueueVisibilityTimeout": "00:05:00",
                    "maxQueuePollingInterval": "00:00:30", "partitionCount": "4"}
        for key in DURABLE_KEYS:
            value = provider.get(key, defaults[key])
            env[f"AzureFunctionsJobHost__extensions__durableTask__storageProvider__{key}"] = str(value)
        if "functionTimeout" in tree:
            env["AzureFunctionsJobHost__functionTimeout"] = str(tree["functionTimeout"])
    for item in sets:
        name, _, value = item.partition("=")
        env["AzureFunctionsJobHost__" + "__".join(name.split("."))] = value
    return env


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def resume(args: argparse.Namespace) -> dict[str, Any]:
    env = overrides(args.set, args.repo_settings)
    results = []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory() as scratch:
            folder = Path(scratch)
            double = HostDouble(FIXTURE_APP, settings="fixture.settings.json", env=env, startup_timeout=60)
            double.start()
            try:
                http = httpx.Client(base_url=double.base_url, timeout=30)
                instance = uid("seq")
                start(http, "sequence", instance, {"steps": 3, "marker_dir": str(folder), "sleep": 1.0})
                wait_until(lambda folder=folder: markers(folder, "step-1") == 1, timeout=60)
                killed = time.monotonic()
                double.kill_host()
                double.restart()
                restarted = time.monotonic() - killed
                wait_until(lambda folder=folder: markers(folder, "step-1") == 2, timeout=args.timeout)
                resumed = time.monotonic() - killed
                status = done(http, instance, timeout=args.timeout)
                finished = time.monotonic() - killed
                results.append({"restart_s": round(restarted, 2), "resumed_s": round(resumed, 2),
                                "completed_s": round(finished, 2), "status": status["runtimeStatus"]})
                http.close()
            finally:
                double.stop()
        print(json.dumps(results[-1]), flush=True)
    return {"settings": env or "fixture host.json", "runs": results}


def product(args: argparse.Namespace) -> dict[str, Any]:
    from openai import OpenAI

    env = {"RESILIENT_STORAGE_PREFIX": "b" + os.urandom(4).hex(), "RESILIENT_AGENT_DELTA_DELAY_MS": "0",
           **overrides(args.set, False)}
    knobs = {"research_phases": "3", "words_per_phase": "60", "delta_delay_ms": "40"}
    with HostDouble(ROOT, env=env, settings=None, startup_timeout=60) as double:
        client = OpenAI(base_url=double.base_url, api_key="x", max_retries=0, timeout=60)
        clean = client.responses.create(model="m", input="host kill", metadata=knobs)
        clean_text = [o.content[0].text for o in clean.output]
        runs = [client.responses.create(model="m", input="host kill", background=True, metadata=knobs)
                for _ in range(3)]
        wait_until(lambda: all(len(client.responses.retrieve(r.id).output) >= 1 for r in runs), timeout=60)
        killed = time.monotonic()
        double.kill_host()
        double.restart()
        completed: dict[str, float] = {}
        deadline = time.monotonic() + args.timeout
        while len(completed) < len(runs) and time.monotonic() < deadline:
            for run in runs:
                if run.id in completed:
                    continue
                try:
                    got = client.responses.retrieve(run.id)
                except Exception:
                    continue
                if got.status not in ("queued", "in_progress"):
                    completed[run.id] = time.monotonic() - killed
                    assert got.status == "completed", got.status
                    assert [o.content[0].text for o in got.output] == clean_text, "output differs from fault-free"
            time.sleep(0.2)
        follow = client.responses.create(model="m", input="follow-up", background=True,
                                         previous_response_id=runs[0].id, metadata=knobs)
        follow_done = wait_until(lambda: client.responses.retrieve(follow.id).status == "completed", timeout=120)
        return {"settings": env, "completed_after_kill_s": sorted(round(v, 2) for v in completed.values()),
                "all_completed": len(completed) == len(runs), "follow_up_completed": bool(follow_done),
                "redeliveries": double.stats()["activity_redeliveries"]}


def product_calls(args: argparse.Namespace) -> dict[str, Any]:
    """The Durable backend's storage calls per response of function_app.py, counted by the double: ``--runs``
    sequential 3-phase responses after 2 warm-ups (idle polling during the window included)."""
    knobs = {"research_phases": "3", "words_per_phase": "48", "delta_delay_ms": "0"}
    with HostDouble(ROOT, env=overrides(args.set, args.repo_settings)) as double:
        http = httpx.Client(base_url=double.base_url, timeout=60)

        def one() -> None:
            body = {"model": "m", "input": "count the calls", "stream": True, "background": True, "metadata": knobs}
            with http.stream("POST", "/responses", json=body) as stream:
                for _ in stream.iter_lines():
                    pass
        for _ in range(2):
            one()
        time.sleep(1.0)  # the warm-ups' last episodes (lock release) end first
        before, started = double.stats(), time.monotonic()
        for _ in range(args.runs):
            one()
        time.sleep(1.0)
        after, elapsed = double.stats(), time.monotonic() - started
        by_kind = {k: round((v - before["storage_calls"].get(k, 0)) / args.runs, 2)
                   for k, v in after["storage_calls"].items() if v - before["storage_calls"].get(k, 0)}
        return {"runs": args.runs, "window_s": round(elapsed, 1),
                "episodes_per_response": (after["episodes"] - before["episodes"]) / args.runs,
                "activities_per_response": (sum(after["activity_deliveries"].values())
                                            - sum(before["activity_deliveries"].values())) / args.runs,
                "durable_calls_per_response_by_kind": by_kind,
                "durable_calls_per_response": round(sum(by_kind.values()), 1)}


def calls(args: argparse.Namespace) -> dict[str, Any]:
    if args.product:
        return product_calls(args)
    with tempfile.TemporaryDirectory() as scratch, HostDouble(FIXTURE_APP, settings="fixture.settings.json",
                                                              env=overrides(args.set, args.repo_settings)) as double:
        http = httpx.Client(base_url=double.base_url, timeout=30)
        instance = uid("seq")
        before = double.stats()
        start(http, "sequence", instance, {"steps": args.steps, "marker_dir": scratch, "sleep": 0})
        done(http, instance, timeout=120)
        after = double.stats()
        by_kind = {k: v - before["storage_calls"].get(k, 0) for k, v in after["storage_calls"].items()
                   if v - before["storage_calls"].get(k, 0)}
        episodes = after["episodes"] - before["episodes"]
        activities = sum(after["activity_deliveries"].values()) - sum(before["activity_deliveries"].values())
        # status polls by the client go through the app (1 table.get each): not the engine's cost
        total = sum(by_kind.values())
        return {"steps": args.steps, "episodes": episodes, "activities": activities, "calls_by_kind": by_kind,
                "calls_total_incl_status_polls": total}


def idle(args: argparse.Namespace) -> dict[str, Any]:
    """CPU per process and storage calls of a double with nothing to do.

    For ``--product``, one small response runs first (an instance that served traffic and went idle: its
    first requests' one-time imports are not idle cost), then ``--warmup`` seconds pass (the queue pollers
    back off to ``maxQueuePollingInterval``). The default window is 60 s: the app's repair sweep is a timer
    that runs once a minute, so a whole minute holds exactly one of them and a shorter window holds one or
    none, depending on when it starts."""
    env = overrides(args.set, args.repo_settings)
    app = ROOT if args.product else FIXTURE_APP
    settings = None if args.product else "fixture.settings.json"
    with HostDouble(app, settings=settings, env=env) as double:
        assert double.proc is not None
        host_pid = double.stats()["host_pid"]
        if args.product:
            body = {"model": "m", "input": "warm up", "stream": True,
                    "metadata": {"research_phases": "1", "words_per_phase": "3", "delta_delay_ms": "0"}}
            with httpx.Client(base_url=double.base_url, timeout=60) as http, \
                    http.stream("POST", "/responses", json=body) as stream:
                for _ in stream.iter_lines():
                    pass
        time.sleep(args.warmup)  # the polling back-off grows to its ceiling first
        before_calls = double.stats()["storage_calls_total"]
        children = psutil.Process(double.proc.pid).children(recursive=True)
        roles = {double.proc.pid: "platform", host_pid: "host"}
        roles.update({c.pid: "worker" for c in children if c.pid not in roles})
        start_cpu, started = {pid: cpu_seconds(pid) for pid in roles}, time.monotonic()
        time.sleep(args.seconds)
        elapsed = time.monotonic() - started
        used = {role: 0.0 for role in roles.values()}
        for pid, role in roles.items():
            used[role] += cpu_seconds(pid) - start_cpu[pid]
        calls_made = double.stats()["storage_calls_total"] - before_calls
        per_s = {role: round(1000 * seconds / elapsed, 2) for role, seconds in used.items()}
        return {"app": str(app), "settings": env or "app host.json", "warmup_s": args.warmup,
                "window_s": round(elapsed, 1), "host_cpu_ms_per_s": per_s["host"],
                "worker_cpu_ms_per_s": per_s.get("worker", 0.0), "platform_cpu_ms_per_s": per_s["platform"],
                "platform_host_worker_cpu_ms_per_s": round(sum(per_s.values()), 2),
                "storage_calls_per_s": round(calls_made / elapsed, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["resume", "product", "calls", "idle"])
    parser.add_argument("--set", action="append", default=[], help="host.json override name=value")
    parser.add_argument("--repo-settings", action="store_true", help="the repo host.json's durableTask values")
    parser.add_argument("--product", action="store_true",
                        help="idle, calls: measure function_app.py, not the fixture")
    parser.add_argument("--runs", type=int, default=10, help="calls --product: sequential responses")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=60.0, help="idle: the window (a whole minute by default)")
    parser.add_argument("--warmup", type=float, default=15.0)
    parser.add_argument("--timeout", type=float, default=420.0)
    args = parser.parse_args()
    result = {"resume": resume, "product": product, "calls": calls, "idle": idle}[args.what](args)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
