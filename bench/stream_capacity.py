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

``--mode held`` (levels from 0, default 0,10,25,50,100,200): what an instance's HTTP concurrency counts is
open invocations, and a live SSE stream is mostly an open invocation waiting for its next event. Per level,
N slow background responses (1 phase x ``--held-words`` words, ``--held-delay-ms`` apart: one event a second
by default, longer than the level) each get one live reader (``GET /responses/{id}?stream=true`` with the
official client); once every reader has its first event, ``--probes`` probes run one after the other (one
every ``--probe-interval-ms``) while those streams stay open: (a) a short streamed create (1 phase x 3 words,
no delay), timed to its first and its terminal event, and (b) a reconnect to one held response with
``starting_after=0``, timed to its first event (level 0 reconnects to one slow response nobody reads).
Printed per level: p50/p95 of each probe and their p50's ratio to level 0's, the held streams' inter-arrival
gaps inside the probe window (1000 ms when nothing lags), how many held streams received events in it, the
worker's peak RSS and CPU share over the window, and the first level whose create probe's p50 first event
exceeds 2x level 0's. Then every held response is cancelled (``POST /responses/{id}/cancel``) and its reader
waited for. The double's ``maxConcurrentActivityFunctions`` is raised above the highest level for this mode:
a held response is one long activity, and on Flex Consumption activities run on the durable group's
instances, not on the HTTP instances whose concurrency this measures.

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
    .venv/bin/python bench/stream_capacity.py --mode held --json held.json

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

ACTIVITY_LIMIT_ENV = "AzureFunctionsJobHost__extensions__durableTask__maxConcurrentActivityFunctions"
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


# ------------------------------------------------------------------------------------------ held streams
def _gaps_ms(readers: list[load.Reader], window: tuple[float, float]) -> list[float]:
    """The held streams' inter-arrival gaps (ms) between events that both arrived inside ``window``."""
    gaps: list[float] = []
    for reader in readers:
        inside = [t for t in reader.arrivals if window[0] <= t <= window[1]]
        gaps += [(b - a) * 1000.0 for a, b in itertools.pairwise(inside)]
    return gaps


async def reconnect_first_event(client: Any, rid: str, timeout_s: float) -> float:
    """``responses.retrieve(rid, stream=True, starting_after=0)``: seconds to its first event, then closed."""
    started = time.perf_counter()

    async def first() -> float:
        stream = await client.responses.retrieve(rid, stream=True, starting_after=0)
        async with stream:
            async for _ in stream:
                return time.perf_counter() - started
        raise ValueError("the reconnected stream ended without an event")

    return await asyncio.wait_for(first(), timeout_s)


async def held(base_url: str, largs: argparse.Namespace, level: int, args: argparse.Namespace,
               meter: load.Meter) -> dict[str, Any]:
    """``level`` slow background responses (``--held-words`` words, ``--held-delay-ms`` apart), each with one
    live SSE reader (``load.run_reader``, the openai client) held open; once every reader has its first
    event, ``--probes`` sequential probes: a short streamed create (``load.one_response``: 1 phase x 3 words,
    no delay; first and terminal event) and a reconnect with ``starting_after=0`` to one of the held responses
    (first event). Level 0 holds no stream: its reconnects go to one slow response that nobody reads. Then
    every held response is cancelled and its reader waited for, so the next level starts clean."""
    timeout_s = args.level_seconds
    level_args = argparse.Namespace(**{**vars(largs), "responses": max(level, 1) + 5, "readers": 1})
    probe_args = argparse.Namespace(**{**vars(largs), "phases": 1, "words": 3, "delay_ms": 0})
    out: dict[str, Any] = {"problems": []}
    async with load.clients(base_url, level_args) as (client, http):
        starts = asyncio.Semaphore(20)
        readers = [load.Reader("held") for _ in range(level)]
        reading: list[asyncio.Task[load.Reader]] = []
        began = time.perf_counter()

        async def start_held(index: int) -> str | None:
            try:
                async with starts:
                    created = await client.responses.create(
                        model="held", input=f"Held stream {index}: keep it open.", background=True,
                        metadata={"research_phases": "1", "words_per_phase": str(args.held_words),
                                  "delta_delay_ms": str(args.held_delay_ms)})
            except Exception as exc:  # counted: a held stream that never opened
                out["problems"].append(f"held create: {type(exc).__name__}: {exc}"[:300])
                return None
            if index < level:
                reading.append(asyncio.create_task(load.run_reader(
                    "openai", client, http, created.id, time.perf_counter(), timeout_s * 3, reader=readers[index])))
            return created.id

        held_ids = [rid for rid in await asyncio.gather(*(start_held(i) for i in range(max(level, 1)))) if rid]
        if not held_ids:
            raise SystemExit(f"level {level}: no held response could be created")
        for _ in range(int(timeout_s / 0.05)):  # every held reader has its first event (bounded)
            if not any(math.isnan(r.first_event_s) and r.error is None for r in readers):
                break
            await asyncio.sleep(0.05)
        out["ready_s"] = round(time.perf_counter() - began, 2)
        out["held_without_first_event"] = sum(1 for r in readers if math.isnan(r.first_event_s))

        gate = asyncio.Event()
        gate.set()
        creates: list[load.Run] = []
        reconnects: list[float] = []
        meter.start()
        window_start = time.perf_counter()
        for i in range(args.probes):
            await asyncio.sleep(max(0.0, window_start + i * args.probe_interval_ms / 1000.0 - time.perf_counter()))
            creates.append(await load.one_response(i, client, http, probe_args, gate))
            try:
                reconnects.append(await reconnect_first_event(client, held_ids[i % len(held_ids)], timeout_s))
            except Exception as exc:
                out["problems"].append(f"reconnect: {type(exc).__name__}: {exc}"[:300])
        window = (window_start, time.perf_counter())
        meter.stop()
        out["window_s"] = round(window[1] - window[0], 2)
        out["held_ended_in_window"] = sum(1 for r in readers if r.arrivals and r.last_type in load.TERMINAL_EVENTS
                                          and r.arrivals[-1] <= window[1])
        out["held_with_events_in_window"] = sum(1 for r in readers
                                                if any(window[0] <= t <= window[1] for t in r.arrivals))
        out["gaps_ms"] = _gaps_ms(readers, window)
        for run in creates:
            await load.final_check(http, run)
            load.check(run, probe_args)
        out["problems"] += [f"probe #{run.index} {run.response_id}: {'; '.join(run.problems)}"[:300]
                            for run in creates if run.problems]
        out["create_first_s"] = [run.posted_s for run in creates]
        out["create_done_s"] = [run.completed_s for run in creates]
        out["reconnect_first_s"] = reconnects

        async def cancel(rid: str) -> None:
            async with starts:
                answer = await http.post(f"/responses/{rid}/cancel")
            if answer.status_code != 200:
                out["problems"].append(f"cancel {rid}: HTTP {answer.status_code}")

        await asyncio.gather(*(cancel(rid) for rid in held_ids))
        _, pending = await asyncio.wait(reading, timeout=timeout_s) if reading else (set(), set())
        for task in pending:
            task.cancel()
        out["held_not_ended"] = len(pending)
        out["problems"] += [f"held reader: {r.error}"[:300] for r in readers if r.error][:5]
    return out


def run_held_level(level: int, base_url: str, largs: argparse.Namespace, meter: load.Meter,
                   args: argparse.Namespace) -> dict[str, Any]:
    load_before = os.getloadavg()
    with RssSampler(meter.worker_pid or 0) as rss:
        out = asyncio.run(held(base_url, largs, level, args, meter))
    rss_end_mb = round((_status_kb(meter.worker_pid or 0, "VmRSS") or 0) / 1024.0, 1)

    def pcts(values: list[float]) -> dict[str, float]:
        return {"p50": round(load.percentile(values, 50), 4), "p95": round(load.percentile(values, 95), 4)}

    gaps = out.pop("gaps_ms")
    return {
        "level": level,
        "ready_s": out["ready_s"],
        "window_s": out["window_s"],
        "create_first_event_s": pcts(out["create_first_s"]),
        "create_terminal_event_s": pcts(out["create_done_s"]),
        "reconnect_first_event_s": pcts(out["reconnect_first_s"]),
        "held_gap_ms": {"count": len(gaps), "p50": round(load.percentile(gaps, 50), 1),
                        "p95": round(load.percentile(gaps, 95), 1), "max": round(load.percentile(gaps, 100), 1)},
        "held_with_events_in_window": out["held_with_events_in_window"],
        "held_without_first_event": out["held_without_first_event"],
        "held_ended_in_window": out["held_ended_in_window"],
        "held_not_ended_after_cancel": out["held_not_ended"],
        "worker_peak_rss_mb": rss.peak_mb,
        "worker_rss_after_mb": rss_end_mb,
        "worker_cpu_s": round(meter.worker_cpu_s, 2),
        "worker_cpu_share": round(meter.worker_cpu_s / out["window_s"], 2) if out["window_s"] else math.nan,
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "errors": len(out["problems"]) + out["held_without_first_event"] + out["held_ended_in_window"]
        + out["held_not_ended"],
        "problems": out["problems"][:5],
    }


def report_held(results: list[dict[str, Any]], args: argparse.Namespace, idle_rss_mb: float) -> dict[str, Any]:
    base = results[0]
    keys = ("create_first_event_s", "create_terminal_event_s", "reconnect_first_event_s")
    gap_base = next((r["held_gap_ms"]["p95"] for r in results if r["held_gap_ms"]["count"]), math.nan)
    doubled = None
    print(f"held streams on one worker: N responses of 1 phase x {args.held_words} words, {args.held_delay_ms} ms "
          f"apart, each with one live SSE reader; per level {args.probes} sequential probes while they stay open: a "
          f"streamed create (1 phase x 3 words, no delay) and a reconnect (starting_after=0); worker idle RSS "
          f"{idle_rss_mb} MB; {os.cpu_count()} cores; baseline = level {base['level']}")
    print(f"{'held':>5} {'ready':>6} | {'create first p50/p95':>21} {'x':>5} | {'create end p50/p95':>21} {'x':>5} | "
          f"{'reconnect p50/p95':>21} {'x':>5} | {'gap p50/p95/max ms':>18} {'live':>5} | {'RSS MB':>6} "
          f"{'CPU/wall':>8} {'load avg':>15} {'err':>3}")
    for r in results:
        ratios = {k: round(r[k]["p50"] / base[k]["p50"], 2) if base[k]["p50"] else math.nan for k in keys}
        r["ratio_to_baseline"] = ratios
        if doubled is None and ratios["create_first_event_s"] > 2.0:
            doubled = r["level"]
        cells = " | ".join(f"{r[k]['p50'] * 1000:>8.0f}/{r[k]['p95'] * 1000:<6.0f}ms {ratios[k]:>5.2f}".rjust(27)
                           for k in keys)
        gap = r["held_gap_ms"]
        gaps = f"{gap['p50']:.0f}/{gap['p95']:.0f}/{gap['max']:.0f}" if gap["count"] else "-"
        print(f"{r['level']:>5} {r['ready_s']:>5.1f}s | {cells} | {gaps:>18} {r['held_with_events_in_window']:>5} | "
              f"{r['worker_peak_rss_mb']:>6.1f} {r['worker_cpu_share']:>8.2f} "
              f"{' '.join(f'{x:.2f}' for x in r['loadavg_before']):>15} {r['errors']:>3}")
        for problem in r["problems"]:
            print(f"          {problem}")
    base_ms = base["create_first_event_s"]["p50"] * 1000
    if doubled is None:
        print(f"the create probe's p50 first event stayed within 2x the baseline ({base_ms:.0f} ms) up to "
              f"{results[-1]['level']} held streams")
    else:
        print(f"the create probe's p50 first event first exceeds 2x the baseline ({base_ms:.0f} ms) at {doubled} held "
              f"streams")
    return {"mode": "held", "held": {"words": args.held_words, "delay_ms": args.held_delay_ms},
            "probes": args.probes, "held_gap_p95_ms_first_level": gap_base, "first_level_over_2x": doubled,
            "worker_idle_rss_mb": idle_rss_mb, "levels": results}


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
    parser.add_argument("--mode", choices=("steady", "burst", "held"), default="steady",
                        help="steady: each level keeps that many streams open for --window-seconds (a finished "
                             "stream is replaced at once); burst: that many streams start at the same instant; "
                             "held: that many slow streams held open while --probes probes run")
    parser.add_argument("--held-words", type=int, default=120, help="held: words of each held response")
    parser.add_argument("--held-delay-ms", type=int, default=1000, help="held: pause between its words")
    parser.add_argument("--probes", type=int, default=20, help="held: sequential probes per level")
    parser.add_argument("--probe-interval-ms", type=int, default=500,
                        help="held: a probe starts this long after the previous one started (or when it ends)")
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
    lowest = 0 if args.mode == "held" else 1
    if not args.level_list or not all(lowest <= n <= 500 for n in args.level_list):
        parser.error(f"--levels must be {lowest}..500")
    if not 1 <= args.held_words <= 2000 or not 0 <= args.held_delay_ms <= 5000 or not 1 <= args.probes <= 200:
        parser.error("--held-words 1..2000, --held-delay-ms 0..5000 (the agent's bounds), --probes 1..200")
    if args.mode == "held" and args.levels == parser.get_default("levels"):
        args.level_list = [0, 10, 25, 50, 100, 200]
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
        extra_env = {"HOSTDOUBLE_TRACE": "1"}
        if args.mode == "held":  # held runs are activities: none may wait for a free activity slot (see above)
            extra_env[ACTIVITY_LIMIT_ENV] = str(max(args.level_list) + args.probes + 10)
        double = load.start_double(stack, largs, prefix, meter, extra_env=extra_env)
        load.warm_up(double.base_url, largs.request_timeout)
        time.sleep(1.0)
        idle_rss_mb = round((_status_kb(meter.worker_pid or 0, "VmRSS") or 0) / 1024.0, 1)
        offset = args.double_log.stat().st_size
        for level in args.level_list:
            if args.mode == "held":
                results.append(run_held_level(level, double.base_url, largs, meter, args))
                print(f"level {level} done: {json.dumps(results[-1])[:400]}", file=sys.stderr, flush=True)
            else:
                result, offset = run_level(level, double.base_url, largs, meter, args, args.double_log, offset)
                results.append(result)
            time.sleep(args.pause_seconds)
        summary = report_held(results, args, idle_rss_mb) if args.mode == "held" else report(results, args,
                                                                                             idle_rss_mb)
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    asyncio.run(load.cleanup(prefix))
    if log_dir is not None:
        log_dir.cleanup()
    return 1 if any(r["errors"] for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
