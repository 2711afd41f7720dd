"""Stream capacity of one worker: concurrent open SSE streams against first-event latency, RSS and CPU.

Spawns ONE host double (one host, one worker process) running the unmodified ``function_app.py`` and, level
by level (``--levels``, default 1,10,25,50,100,150,200), keeps that many streamed responses open. Each
response is one ``responses.create(stream=True, background=True)`` with the official ``openai`` client, and
its own POST stream is its only reader: that is what an SSE stream costs a Flex Consumption instance, one
HTTP invocation held open from the POST to the terminal event (the app serves ``stream=true`` the same way
with or without ``background``; ``background`` only lets a client reconnect). Each response is
``bench/load.py``'s (``--create-stream --readers 1 --poll-ms 0``), checked for loss the same way (0..N
contiguous, terminal event, completed with every phase).

``--mode steady`` (default): N slots each start a streamed response, read it to its end and start the next
at once, their first starts spread over ``--ramp-seconds``; the responses started in the following
``--window-seconds`` are measured. ``--mode burst``: N responses start at the same instant (a level with
fewer than ``--min-streams`` runs batches one after the other); that measures a burst of creates, which
queue behind each other's storage round trips, rather than N streams held open.

Per level it prints: first-event latency p50/p95 (from the start of the POST to the stream's first event)
and p50's ratio to the level-1 baseline of the same run, stream duration p50 (POST to terminal event),
events/s delivered, the worker process's peak RSS during the level (its ``VmHWM``, reset before each level
through ``/proc/<pid>/clear_refs``; when that is refused, the peak of ``VmRSS`` sampled every 50 ms), the
worker's CPU seconds and its share of one core, the phases' (``run_phase`` activities') execution time per
response (mean activity time x phases, from the double's ``HOSTDOUBLE_TRACE`` lines), the 1/5/15-minute
load average, and the responses with problems. Then the first level whose p50 first event exceeds 2x the
baseline. ``--json`` also keeps the wall time and responses per level (wall / responses is how long an
instance holding N streams is busy per response).

    bash scripts/azurite.sh start cap1 --temporary
    export AzureWebJobsStorage="$(bash scripts/azurite.sh connection-string cap1)"
    .venv/bin/python bench/stream_capacity.py --json cap.json
    .venv/bin/python bench/stream_capacity.py --levels 1,2,5,8,10,15,25,50 --phases 3 --words 24 --delay-ms 20

The benchmark's own clients run on the same machine (with Azurite and the double's host): the worker's
CPU share says whether the worker or the machine is the limit. Bounded: ``--level-seconds`` per burst level
and per stream (default 60), levels 1..500.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import math
import os
import re
import secrets
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import load  # (bench/load.py: the load, its checks and the double's start are reused as they are)

TRACE_LINE = re.compile(r"^TRACE (?P<ms>[\d.]+) (?P<tail>\S+) activity (?P<name>\S+) (?P<step>start|end)$")


# ------------------------------------------------------------------------------------------ worker memory
def _status_kb(pid: int, field: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


class RssSampler:
    """The worker's peak RSS over a window: ``VmHWM`` after resetting it (``clear_refs`` 5), and the peak of
    ``VmRSS`` sampled every ``interval_s`` as a check (and the fallback when the reset is refused)."""

    def __init__(self, pid: int, interval_s: float = 0.05) -> None:
        self.pid, self.interval_s = pid, interval_s
        self.peak_sampled_kb = 0
        self.hwm_reset = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> RssSampler:
        try:
            Path(f"/proc/{self.pid}/clear_refs").write_text("5")
            self.hwm_reset = True
        except OSError:
            self.hwm_reset = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_sampled_kb = max(self.peak_sampled_kb, _status_kb(self.pid, "VmRSS") or 0)
            self._stop.wait(self.interval_s)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.peak_sampled_kb = max(self.peak_sampled_kb, _status_kb(self.pid, "VmRSS") or 0)

    @property
    def peak_mb(self) -> float:
        hwm = _status_kb(self.pid, "VmHWM") if self.hwm_reset else None
        return round(max(hwm or 0, self.peak_sampled_kb) / 1024.0, 1)


# ------------------------------------------------------------------------------------------ phase times
def phase_seconds(log_text: str) -> dict[str, list[float]]:
    """Activity execution times from the double's ``HOSTDOUBLE_TRACE`` lines (start/end per instance and
    activity, in order), by activity name."""
    open_at: dict[tuple[str, str], list[float]] = {}
    done: dict[str, list[float]] = {}
    for line in log_text.splitlines():
        match = TRACE_LINE.match(line.strip())
        if not match:
            continue
        key = (match["tail"], match["name"])
        at = float(match["ms"]) / 1000.0
        if match["step"] == "start":
            open_at.setdefault(key, []).append(at)
        elif open_at.get(key):
            done.setdefault(match["name"], []).append(at - open_at[key].pop(0))
    return done


def read_from(path: Path, offset: int) -> tuple[str, int]:
    with open(path, "rb") as log_file:
        log_file.seek(offset)
        data = log_file.read()
    return data.decode(errors="replace"), offset + len(data)


# ------------------------------------------------------------------------------------------ steady state
async def steady(base_url: str, level_args: argparse.Namespace, level: int, ramp_s: float, window_s: float,
                 meter: load.Meter) -> tuple[list[load.Run], float]:
    """``level`` streams open all the time: each of ``level`` slots starts a streamed response, reads it to
    its end and starts the next one at once; the slots' first starts are spread over ``ramp_s``. Measured:
    the responses started in the ``window_s`` after the ramp (each read to its end), and the worker's CPU
    from the end of the ramp to the last of them."""
    async with load.clients(base_url, level_args) as (client, http):
        gate = asyncio.Event()
        gate.set()
        started = time.perf_counter()
        measured: list[load.Run] = []
        numbers = itertools.count()

        async def slot(index: int) -> None:
            await asyncio.sleep(index * ramp_s / level)
            while (began := time.perf_counter() - started) < ramp_s + window_s:
                run = await load.one_response(next(numbers), client, http, level_args, gate)
                if began >= ramp_s:
                    measured.append(run)

        async def meter_after_ramp() -> None:
            await asyncio.sleep(ramp_s)
            meter.start()

        slots = [asyncio.create_task(slot(i)) for i in range(level)]
        metering = asyncio.create_task(meter_after_ramp())
        try:
            await asyncio.wait_for(asyncio.gather(*slots), ramp_s + window_s + level_args.request_timeout)
        except TimeoutError:
            for task in slots:
                task.cancel()
            raise SystemExit("the level did not finish") from None
        await metering
        wall = time.perf_counter() - started - ramp_s
        await asyncio.sleep(level_args.settle_ms / 1000.0)
        meter.stop()
        await asyncio.gather(*(load.final_check(http, run) for run in measured))
        for run in measured:
            load.check(run, level_args)
        return measured, wall


# ------------------------------------------------------------------------------------------ one level
def run_level(level: int, base_url: str, largs: argparse.Namespace, meter: load.Meter, args: argparse.Namespace,
              log_path: Path, log_offset: int) -> tuple[dict[str, Any], int]:
    batches = max(1, math.ceil(args.min_streams / level)) if args.mode == "burst" else 1
    level_args = argparse.Namespace(**{**vars(largs), "responses": level,
                                       "max_seconds": args.level_seconds / batches})
    runs: list[load.Run] = []
    walls: list[float] = []
    cpu_s = 0.0
    load_before = os.getloadavg()
    timed_out = False
    with RssSampler(meter.worker_pid or 0) as rss:
        if args.mode == "steady":
            try:
                runs, wall = asyncio.run(steady(base_url, level_args, level, args.ramp_seconds, args.window_seconds,
                                                meter))
                walls.append(wall)
                cpu_s = meter.worker_cpu_s
            except SystemExit:
                timed_out = True
        for _ in range(batches if args.mode == "burst" else 0):
            try:
                batch, wall = asyncio.run(load.load(base_url, level_args, meter))
            except SystemExit:  # load.load's bound: this level did not finish in its share of --level-seconds
                timed_out = True
                break
            runs += batch
            walls.append(wall)
            cpu_s += meter.worker_cpu_s
    log_text, log_offset = read_from(log_path, log_offset)
    phases = phase_seconds(log_text)
    streams = [r for run in runs for r in run.readers]
    first = [r.first_event_s for r in streams]
    durations = [run.completed_s for run in runs]
    wall_s = sum(walls)
    result = {
        "level": level,
        "batches": batches,
        "streams": len(runs),
        "timed_out": timed_out,
        "first_event_s": {"p50": round(load.percentile(first, 50), 4), "p95": round(load.percentile(first, 95), 4)},
        "stream_s": {"p50": round(load.percentile(durations, 50), 3), "p95": round(load.percentile(durations, 95), 3),
                     "mean": round(sum(durations) / len(durations), 3) if durations else math.nan},
        "wall_s": round(wall_s, 2),
        "events_per_s": round(sum(len(r.sequence) for r in streams) / wall_s, 1) if wall_s else math.nan,
        "worker_peak_rss_mb": rss.peak_mb,
        "rss_from": "VmHWM (reset per level)" if rss.hwm_reset else "VmRSS sampled every 50 ms",
        "worker_cpu_s": round(cpu_s, 2),
        "worker_cpu_share": round(cpu_s / wall_s, 2) if wall_s else math.nan,
        "run_phase_s": {"count": len(phases.get("run_phase", [])),
                        "mean": round(statistics.fmean(phases["run_phase"]), 4)
                        if phases.get("run_phase") else math.nan,
                        "p50": round(load.percentile(phases.get("run_phase", []), 50), 4)},
        # activities' execution per response: the mean run_phase time x phases (the log's window holds the
        # ramp's and the drain's phases too, so its total is not divided by the measured responses)
        "activities_s_per_response": round(statistics.fmean(phases["run_phase"]) * args.phases, 4)
        if phases.get("run_phase") else math.nan,
        "activities": {name: len(v) for name, v in sorted(phases.items())},
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "errors": sum(1 for run in runs if run.problems) + (level * batches - len(runs) if args.mode == "burst"
                                                            else int(timed_out)),
        "problems": [f"#{run.index} {run.response_id}: {'; '.join(run.problems)}"[:300] for run in runs
                     if run.problems][:5],
    }
    return result, log_offset


def report(results: list[dict[str, Any]], args: argparse.Namespace, idle_rss_mb: float) -> dict[str, Any]:
    base = results[0]["first_event_s"]["p50"] if results else math.nan
    doubled = None
    how = (f"steady: N streams open for {args.window_seconds:g} s after a {args.ramp_seconds:g} s ramp"
           if args.mode == "steady" else "burst: N streams started at once")
    print(f"stream capacity of one worker ({how}): {args.phases} phases x {args.words} words, {args.delay_ms} ms "
          f"between words; one streamed create per response (its own SSE stream, the only reader); worker idle RSS "
          f"{idle_rss_mb} MB; {os.cpu_count()} cores")
    print(f"{'streams':>7} {'first p50':>9} {'p95':>7} {'x base':>6} {'stream p50':>10} {'events/s':>8} "
          f"{'RSS MB':>7} {'CPU s':>6} {'CPU/wall':>8} {'phase s/resp':>12} {'load avg':>15} {'errors':>6}")
    for r in results:
        r["ratio_to_baseline"] = round(r["first_event_s"]["p50"] / base, 2) if base else math.nan
        if doubled is None and r["ratio_to_baseline"] > 2.0:
            doubled = r["level"]
        print(f"{r['level']:>7} {r['first_event_s']['p50'] * 1000:>7.0f}ms {r['first_event_s']['p95'] * 1000:>5.0f}ms "
              f"{r['ratio_to_baseline']:>6.2f} {r['stream_s']['p50']:>9.2f}s {r['events_per_s']:>8.0f} "
              f"{r['worker_peak_rss_mb']:>7.1f} {r['worker_cpu_s']:>6.2f} {r['worker_cpu_share']:>8.2f} "
              f"{r['activities_s_per_response']:>12.3f} {' '.join(f'{x:.2f}' for x in r['loadavg_before']):>15} "
              f"{r['errors']:>6}{'  TIMED OUT' if r['timed_out'] else ''}")
        for problem in r["problems"]:
            print(f"          {problem}")
    held = [r["level"] for r in results if doubled is None or r["level"] < doubled]
    if doubled is None:
        print(f"p50 first event stayed within 2x the level-1 baseline ({base * 1000:.0f} ms) up to "
              f"{results[-1]['level']} streams")
    else:
        print(f"p50 first event first exceeds 2x the level-1 baseline ({base * 1000:.0f} ms) at {doubled} streams; "
              f"highest level within 2x: {max(held) if held else None}")
    return {"mode": args.mode, "window_s": args.window_seconds, "ramp_s": args.ramp_seconds,
            "workload": {"phases": args.phases, "words": args.words, "delay_ms": args.delay_ms},
            "baseline_first_event_p50_s": base, "first_level_over_2x": doubled,
            "highest_level_within_2x": max(held) if held else None, "worker_idle_rss_mb": idle_rss_mb,
            "levels": results}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", default="1,10,25,50,100,150,200", help="concurrent streams per level")
    parser.add_argument("--phases", type=int, default=3)
    parser.add_argument("--words", type=int, default=24)
    parser.add_argument("--delay-ms", type=int, default=20, help="agent pause between words")
    parser.add_argument("--mode", choices=("steady", "burst"), default="steady",
                        help="steady: each level keeps that many streams open for --window-seconds (a finished "
                             "stream is replaced at once); burst: that many streams start at the same instant")
    parser.add_argument("--ramp-seconds", type=float, default=2.0,
                        help="steady: the slots' first starts are spread over this, and not measured")
    parser.add_argument("--window-seconds", type=float, default=30.0,
                        help="steady: responses started in this window after the ramp are measured")
    parser.add_argument("--min-streams", type=int, default=20,
                        help="burst: a level below this runs batches one after the other until it has this many")
    parser.add_argument("--level-seconds", type=float, default=60.0, help="bound for one level (all its batches)")
    parser.add_argument("--pause-seconds", type=float, default=3.0, help="pause between levels")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--double-log", type=Path, help="keep the spawned host double's log here")
    args = parser.parse_args(argv)
    try:
        args.level_list = [int(x) for x in args.levels.split(",") if x.strip()]
    except ValueError:
        parser.error("--levels: comma-separated integers")
    if not args.level_list or not all(1 <= n <= 500 for n in args.level_list):
        parser.error("--levels must be 1..500")
    if not 0 < args.level_seconds <= 300:
        parser.error("--level-seconds must be in (0, 300]")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("AzureWebJobsStorage", "UseDevelopmentStorage=true")
    log_dir = None
    if args.double_log is None:
        import tempfile
        log_dir = tempfile.TemporaryDirectory(prefix="stream-capacity-")
        args.double_log = Path(log_dir.name) / "hostdouble.log"
    largs = load.parse_args(["--create-stream", "--readers", "1", "--poll-ms", "0", "--idle-seconds", "0",
                             "--phases", str(args.phases), "--words", str(args.words),
                             "--delay-ms", str(args.delay_ms), "--request-timeout", str(args.level_seconds),
                             "--double-log", str(args.double_log)])
    prefix = "c" + secrets.token_hex(4)
    meter = load.Meter()
    results: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        double = load.start_double(stack, largs, prefix, meter, extra_env={"HOSTDOUBLE_TRACE": "1"})
        load.warm_up(double.base_url, largs.request_timeout)
        time.sleep(1.0)
        idle_rss_mb = round((_status_kb(meter.worker_pid or 0, "VmRSS") or 0) / 1024.0, 1)
        offset = args.double_log.stat().st_size
        for level in args.level_list:
            result, offset = run_level(level, double.base_url, largs, meter, args, args.double_log, offset)
            results.append(result)
            time.sleep(args.pause_seconds)
        summary = report(results, args, idle_rss_mb)
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    asyncio.run(load.cleanup(prefix))
    if log_dir is not None:
        log_dir.cleanup()
    return 1 if any(r["errors"] for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
