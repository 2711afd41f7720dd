"""Load benchmark: many concurrent background responses, each watched by several live readers and a poller.

Starts the host double with the unmodified ``function_app.py`` on Azurite (or targets a running one with
``--url``), then, all at once, creates ``--responses`` background responses of the offline research agent
(``--phases`` × ``--words``, ``--delay-ms`` between words). Every response gets ``--readers`` live SSE
readers started right after its POST returns (alternately the official ``openai`` client,
``responses.retrieve(id, stream=True)``, and a raw ``httpx`` SSE parser that checks the wire format) and one
poller (``GET /responses/{id}`` every ``--poll-ms``).

Checked (the run fails with exit code 1 otherwise): every response completes with ``--phases`` output items;
every reader saw sequence numbers exactly 0..N, ending in the terminal event, with the same N for all
readers of a response; the poller saw the terminal status. Printed: throughput (responses/s and events/s
delivered to readers), time to first event per reader (p50/p95/max, from the start of the POST), time to
completion, and totals.

    AzureWebJobsStorage=UseDevelopmentStorage=true .venv/bin/python bench/load.py
    .venv/bin/python bench/load.py --responses 50 --readers 2 --phases 3 --words 24 --delay-ms 20
    .venv/bin/python bench/load.py --url http://127.0.0.1:7071        # a host double you started

Side by side with the reference SDK (``bench/reference_server.py``, configured with the same run shape: it
streams a background response only to the POST that asked for ``stream=true``), both with
``--create-stream`` (the POST's own stream is the first reader, the others attach with ``retrieve``)::

    .venv/bin/python bench/reference_server.py --port 8088 --phases 3 --words 24 --delay-ms 20 &
    .venv/bin/python bench/load.py --url http://127.0.0.1:8088 --create-stream --lenient --idle-seconds 0
    AzureWebJobsStorage=UseDevelopmentStorage=true .venv/bin/python bench/load.py --create-stream

Bounded: at most 500 responses × 8 readers, ``--max-seconds`` for the whole load (default 170 s), per-request
timeouts, at most ``MAX_EVENTS_PER_STREAM`` events per reader; only http://127.0.0.1 / localhost targets.
Not a CI test (it takes tens of seconds and measures, rather than asserts, speed).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import secrets
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import psutil
from counting_proxy import CountingProxy
from openai import AsyncOpenAI

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.hostdouble.api import HostDouble  # noqa: E402

LOOPBACK = {"127.0.0.1", "localhost"}
TERMINAL_EVENTS = {"response.completed", "response.failed", "response.incomplete"}
TERMINAL_STATUSES = {"completed", "failed", "cancelled", "incomplete"}
MAX_EVENTS_PER_STREAM = 100_000
MAX_POLLS = 10_000


@dataclass
class Reader:
    kind: str
    first_event_s: float = math.nan
    done_s: float = math.nan
    sequence: list[int] = field(default_factory=list)
    last_type: str | None = None
    error: str | None = None
    arrivals: list[float] = field(default_factory=list)  # perf_counter() of each event (the openai reader)


@dataclass
class Run:
    index: int
    response_id: str | None = None
    posted_s: float = math.nan  # POST round trip
    completed_s: float = math.nan  # poller saw a terminal status (from the start of the POST)
    status: str | None = None
    output_items: int = -1
    polls: int = 0
    readers: list[Reader] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def loopback_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme != "http" or parts.hostname not in LOOPBACK:
        raise SystemExit(f"only http://127.0.0.1 (or localhost) targets are allowed, got {url!r}")
    return url.rstrip("/")


def percentile(values: list[float], pct: float) -> float:
    clean = sorted(v for v in values if not math.isnan(v))
    if not clean:
        return math.nan
    rank = (len(clean) - 1) * pct / 100.0
    low, high = math.floor(rank), math.ceil(rank)
    return clean[low] + (clean[high] - clean[low]) * (rank - low)


# ------------------------------------------------------------------------------------------------- readers
async def read_with_openai(client: AsyncOpenAI, rid: str, started: float, reader: Reader) -> None:
    stream = await client.responses.retrieve(rid, stream=True, starting_after=-1)
    async with stream:
        async for event in stream:
            reader.arrivals.append(time.perf_counter())
            if math.isnan(reader.first_event_s):
                reader.first_event_s = reader.arrivals[-1] - started
            reader.sequence.append(int(event.sequence_number))
            reader.last_type = event.type
            if event.type in TERMINAL_EVENTS or len(reader.sequence) >= MAX_EVENTS_PER_STREAM:
                break


def sse_frames(lines: Iterator[str] | list[str]) -> Iterator[dict[str, str]]:
    """Group SSE lines into frames (``event``/``id``/``data`` fields); comment lines are skipped."""
    frame: dict[str, str] = {}
    for line in lines:
        if line == "":
            if frame:
                yield frame
            frame = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            frame[name] = value[1:] if value.startswith(" ") else value


async def read_with_httpx(http: httpx.AsyncClient, rid: str, started: float, reader: Reader, *,
                          require_id: bool = True) -> None:
    """A raw SSE reader: also checks that ``event:`` and ``id:`` agree with the JSON in ``data:`` (a frame
    without ``id:`` passes only when ``require_id`` is off: the reference SDK sends none)."""
    async with http.stream("GET", f"/responses/{rid}", params={"stream": "true", "starting_after": "-1"},
                           headers={"accept": "text/event-stream"}) as response:
        response.raise_for_status()
        pending: list[str] = []
        async for line in response.aiter_lines():
            pending.append(line)
            if line != "":
                continue
            for frame in sse_frames(pending):
                event = json.loads(frame["data"])
                frame_id = frame.get("id", None if require_id else str(event["sequence_number"]))
                if frame.get("event") != event["type"] or frame_id != str(event["sequence_number"]):
                    raise ValueError(f"frame header {frame.get('event')}/{frame.get('id')} does not match its data")
                if math.isnan(reader.first_event_s):
                    reader.first_event_s = time.perf_counter() - started
                reader.sequence.append(int(event["sequence_number"]))
                reader.last_type = event["type"]
            pending = []
            if reader.last_type in TERMINAL_EVENTS or len(reader.sequence) >= MAX_EVENTS_PER_STREAM:
                return


async def run_reader(kind: str, client: AsyncOpenAI, http: httpx.AsyncClient, rid: str, started: float,
                     timeout_s: float, *, require_id: bool = True, reader: Reader | None = None) -> Reader:
    """One live reader to its terminal event (``reader``: the caller's, to watch it while it reads)."""
    reader = reader or Reader(kind)
    try:
        call = read_with_openai(client, rid, started, reader) if kind == "openai" else read_with_httpx(
            http, rid, started, reader, require_id=require_id)
        await asyncio.wait_for(call, timeout_s)
    except Exception as exc:
        reader.error = f"{type(exc).__name__}: {exc}"[:300]
    reader.done_s = time.perf_counter() - started
    return reader


@dataclass
class CreateStream:
    first_event_s: float
    task: Any  # an awaitable finishing the stream, returning its Reader


async def open_create_stream(client: AsyncOpenAI, request: dict[str, Any], started: float,
                             timeout_s: float) -> tuple[str, CreateStream]:
    """``responses.create(stream=True, background=True)``: its first event names the response; the rest of
    the stream is read on as one of the response's readers (the shape the reference SDK needs for a
    background response to be streamed at all)."""
    reader = Reader("create")
    stream = await client.responses.create(**request, stream=True)
    iterator = stream.__aiter__()
    first = await asyncio.wait_for(iterator.__anext__(), timeout_s)
    reader.first_event_s = time.perf_counter() - started
    reader.sequence.append(int(first.sequence_number))
    reader.last_type = first.type

    async def rest() -> Reader:
        try:
            async def drain() -> None:
                async for event in iterator:
                    reader.sequence.append(int(event.sequence_number))
                    reader.last_type = event.type
                    if event.type in TERMINAL_EVENTS or len(reader.sequence) >= MAX_EVENTS_PER_STREAM:
                        break
            await asyncio.wait_for(drain(), timeout_s)
        except Exception as exc:
            reader.error = f"{type(exc).__name__}: {exc}"[:300]
        finally:
            await stream.close()
        reader.done_s = time.perf_counter() - started
        return reader

    return first.response.id, CreateStream(reader.first_event_s, rest())


async def poll(http: httpx.AsyncClient, run: Run, started: float, interval_s: float, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while run.polls < MAX_POLLS and time.monotonic() < deadline:
        run.polls += 1
        answer = await http.get(f"/responses/{run.response_id}")
        answer.raise_for_status()
        body = answer.json()
        if body["status"] in TERMINAL_STATUSES:
            run.completed_s = time.perf_counter() - started
            run.status = body["status"]
            run.output_items = len(body["output"])
            return
        await asyncio.sleep(interval_s)
    raise TimeoutError(f"no terminal status after {run.polls} polls")


def _cpu_seconds(proc: psutil.Process) -> float:
    try:
        times = proc.cpu_times()
        return float(times.user + times.system)
    except psutil.Error:
        return math.nan


# ---------------------------------------------------------------------------------------------- one response
async def one_response(index: int, client: AsyncOpenAI, http: httpx.AsyncClient, args: argparse.Namespace,
                       gate: asyncio.Event) -> Run:
    run = Run(index)
    await gate.wait()  # every response starts at the same moment
    started = time.perf_counter()
    try:
        request: dict[str, Any] = {
            "model": "load", "input": f"Load test question number {index}: what keeps a stream complete?",
            "background": True,
            "metadata": {"research_phases": str(args.phases), "words_per_phase": str(args.words),
                         "delta_delay_ms": str(args.delay_ms)}}
        kinds = ["openai" if i % 2 == 0 else "httpx" for i in range(args.readers)]
        own_stream: list[Any] = []
        if args.create_stream:  # the POST's own stream is the first reader; the others attach to it
            created_id, first = await open_create_stream(client, request, started, args.request_timeout)
            run.posted_s = first.first_event_s
            own_stream.append(first.task)
            kinds = kinds[1:]
        else:
            created_id = (await client.responses.create(**request)).id
            run.posted_s = time.perf_counter() - started
        run.response_id = created_id
        readers = [*own_stream,
                   *(run_reader(kind, client, http, created_id, started, args.request_timeout,
                               require_id=not args.lenient) for kind in kinds)]
        if args.poll_ms > 0:
            results = await asyncio.gather(poll(http, run, started, args.poll_ms / 1000.0, args.request_timeout),
                                           *readers, return_exceptions=True)
            if isinstance(results[0], BaseException):
                run.problems.append(f"poller: {results[0]!r}"[:300])
            run.readers = [r for r in results[1:] if isinstance(r, Reader)]
        else:  # no poller: the final status is read by final_check() once the whole load is measured
            run.readers = [r for r in await asyncio.gather(*readers, return_exceptions=True) if isinstance(r, Reader)]
            run.completed_s = max((r.done_s for r in run.readers), default=math.nan)
    except Exception as exc:
        run.problems.append(f"{type(exc).__name__}: {exc}"[:300])
    return run


async def final_check(http: httpx.AsyncClient, run: Run) -> None:
    """One GET for a run measured without a poller (outside the measured window)."""
    if run.response_id is None or run.status is not None:
        return
    try:
        answer = await http.get(f"/responses/{run.response_id}")
        answer.raise_for_status()
        body = answer.json()
        run.status, run.output_items = body["status"], len(body["output"])
    except Exception as exc:
        run.problems.append(f"final GET: {type(exc).__name__}: {exc}"[:300])


def check(run: Run, args: argparse.Namespace) -> None:
    """No loss: every reader saw 0..N contiguous ending in the terminal event, all readers the same N."""
    if run.status != "completed":
        run.problems.append(f"status {run.status!r}")
    if run.output_items != args.phases and run.status is not None:
        run.problems.append(f"{run.output_items} output items, expected {args.phases}")
    lengths = set()
    for reader in run.readers:
        if reader.error:
            run.problems.append(f"{reader.kind} reader: {reader.error}")
            continue
        if reader.sequence != list(range(len(reader.sequence))):
            run.problems.append(f"{reader.kind} reader: gap/duplicate in {reader.sequence[:5]}…")
        if reader.last_type not in TERMINAL_EVENTS:
            run.problems.append(f"{reader.kind} reader: ended with {reader.last_type!r}")
        lengths.add(len(reader.sequence))
    if len(lengths) > 1:
        run.problems.append(f"readers disagree on the number of events: {sorted(lengths)}")
    if len(run.readers) != args.readers:
        run.problems.append(f"{len(run.readers)} readers finished, expected {args.readers}")


# ----------------------------------------------------------------------------------------------- the load
def warm_up(base_url: str, timeout_s: float) -> None:
    """One tiny run before the measured load, so storage is opened and the code paths imported (a cold worker
    is a different benchmark: the import time, measured on its own)."""
    body = {"model": "warmup", "input": "warm up", "background": True, "stream": True,
            "metadata": {"research_phases": "1", "words_per_phase": "1", "delta_delay_ms": "0"}}
    with (
        httpx.Client(base_url=base_url, timeout=timeout_s) as http,
        http.stream("POST", "/responses", json=body) as answer,
    ):
        answer.raise_for_status()
        for _ in answer.iter_lines():
            pass


@dataclass
class Meter:
    """What the load costs the server: storage calls (when counted) and CPU of the host double's processes."""

    storage: Any = None  # a CountingProxy, or None
    host_pid: int | None = None
    worker_pid: int | None = None
    storage_calls: dict[str, int] = field(default_factory=dict)
    host_cpu_s: float = math.nan
    worker_cpu_s: float = math.nan
    idle_cpu_ms_per_s: float = math.nan
    window_s: float = 0.0  # --cpu-window: read every process's CPU this long after the POSTs start
    window_cpu: dict[str, float] = field(default_factory=dict)
    _before: tuple[Any, float, float] | None = None

    def cpu(self) -> tuple[float, float]:
        def of(pid: int | None) -> float:
            if pid is None:
                return math.nan
            try:
                return _cpu_seconds(psutil.Process(pid))
            except psutil.Error:
                return math.nan
        return of(self.host_pid), of(self.worker_pid)

    def measure_idle(self, seconds: float) -> None:
        if seconds <= 0 or self.host_pid is None:
            return
        time.sleep(1.0)  # let the warm-up run's last steps (finalize, lock release) finish first
        before = sum(self.cpu())
        time.sleep(seconds)
        self.idle_cpu_ms_per_s = (sum(self.cpu()) - before) * 1000.0 / seconds

    def start(self) -> None:
        self._before = (self.storage.snapshot() if self.storage else None, *self.cpu())
        if self.window_s > 0:
            processes = self._window_processes()
            before = {name: _cpu_seconds(proc) for name, proc in processes.items()}

            def reading() -> None:
                self.window_cpu = {name: round(_cpu_seconds(proc) - before[name], 2)
                                   for name, proc in processes.items()}
            timer = threading.Timer(self.window_s, reading)
            timer.daemon = True
            timer.start()

    def _window_processes(self) -> dict[str, psutil.Process]:
        """Who shares the machine during the load: Azurite, the double's platform, host and worker processes
        (spawned double only), and this benchmark with its clients."""
        found: dict[str, psutil.Process] = {"this benchmark": psutil.Process()}
        for proc in psutil.process_iter(["cmdline"]):
            if any("azurite" in part for part in (proc.info.get("cmdline") or [])[:2]):
                found["Azurite"] = proc
                break
        for name, pid in (("host", self.host_pid), ("worker", self.worker_pid)):
            if pid is not None:
                with contextlib.suppress(psutil.Error):
                    found[name] = psutil.Process(pid)
        if "host" in found:
            with contextlib.suppress(psutil.Error):
                parent = found["host"].parent()
                if parent is not None and parent.pid != os.getpid():
                    found["platform"] = parent
        return found

    def stop(self) -> None:
        if self._before is None:
            return
        storage_before, host_before, worker_before = self._before
        host, worker = self.cpu()
        self.host_cpu_s, self.worker_cpu_s = host - host_before, worker - worker_before
        if self.storage is not None:
            self.storage_calls = dict(self.storage.snapshot() - storage_before)


@contextlib.asynccontextmanager
async def clients(base_url: str, args: argparse.Namespace) -> AsyncIterator[tuple[AsyncOpenAI, httpx.AsyncClient]]:
    """The ``openai`` client and a raw ``httpx`` client for ``args.responses`` concurrent responses."""
    limits = httpx.Limits(max_connections=args.responses * (args.readers + 2) + 10, max_keepalive_connections=100)
    timeout = httpx.Timeout(args.request_timeout, connect=10.0)
    async with (
        httpx.AsyncClient(base_url=base_url, limits=limits, timeout=timeout) as http,
        httpx.AsyncClient(limits=limits, timeout=timeout) as client_http,
    ):
        yield AsyncOpenAI(base_url=base_url, api_key="local", max_retries=0, http_client=client_http,
                          _strict_response_validation=not args.lenient), http


async def load(base_url: str, args: argparse.Namespace, meter: Meter) -> tuple[list[Run], float]:
    async with clients(base_url, args) as (client, http):
        gate = asyncio.Event()
        tasks = [asyncio.create_task(one_response(i, client, http, args, gate)) for i in range(args.responses)]
        await asyncio.sleep(0.05)
        meter.start()
        started = time.perf_counter()
        gate.set()
        try:
            runs = await asyncio.wait_for(asyncio.gather(*tasks), args.max_seconds)
        except TimeoutError:
            for task in tasks:
                task.cancel()
            raise SystemExit(f"load did not finish within --max-seconds {args.max_seconds}") from None
        wall = time.perf_counter() - started
        await asyncio.sleep(args.settle_ms / 1000.0)  # the last finalize/release steps of the runs
        meter.stop()
        await asyncio.gather(*(final_check(http, run) for run in runs))
        for run in runs:
            check(run, args)
        return list(runs), wall


def report(runs: list[Run], wall_s: float, args: argparse.Namespace, base_url: str, meter: Meter) -> dict[str, Any]:
    readers = [r for run in runs for r in run.readers]
    events_delivered = sum(len(r.sequence) for r in readers)
    events_per_response = sorted({len(r.sequence) for r in readers})
    first = [r.first_event_s for r in readers]
    completion = [run.completed_s for run in runs]
    posts = [run.posted_s for run in runs]
    failed = [run for run in runs if run.problems]
    summary = {
        "target": base_url,
        "responses": len(runs),
        "readers_per_response": args.readers,
        "workload": f"{args.phases} phases x {args.words} words, {args.delay_ms} ms between words",
        "wall_s": round(wall_s, 2),
        "responses_per_s": round(len(runs) / wall_s, 2),
        "events_delivered": events_delivered,
        "events_delivered_per_s": round(events_delivered / wall_s, 1),
        "events_per_response": events_per_response,
        "first_event_s": {"p50": round(percentile(first, 50), 3), "p95": round(percentile(first, 95), 3),
                          "max": round(percentile(first, 100), 3)},
        "post_s": {"p50": round(percentile(posts, 50), 3), "p95": round(percentile(posts, 95), 3)},
        "completion_s": {"p50": round(percentile(completion, 50), 3), "p95": round(percentile(completion, 95), 3),
                         "max": round(percentile(completion, 100), 3)},
        "polls": sum(run.polls for run in runs),
        "responses_with_problems": len(failed),
    }
    deltas = len(runs) * args.phases * args.words  # what the agent yields (one output_text.delta each)
    # Each response's log length (its longest reader; a repeated phase makes a log longer than the others).
    events_written = sum(max((len(r.sequence) for r in run.readers), default=0) for run in runs)
    calls = sum(meter.storage_calls.values())
    summary["server"] = {
        "idle_cpu_ms_per_s": round(meter.idle_cpu_ms_per_s, 2),
        "worker_cpu_ms_per_event": round(meter.worker_cpu_s * 1000 / events_written, 3) if events_written else None,
        "host_cpu_ms_per_event": round(meter.host_cpu_s * 1000 / events_written, 3) if events_written else None,
        "worker_cpu_s": round(meter.worker_cpu_s, 2),
        "host_cpu_s": round(meter.host_cpu_s, 2),
    }
    if meter.window_cpu:
        summary["cpu_window"] = {"seconds": meter.window_s, "cpu_s": meter.window_cpu}
    if meter.storage is not None:
        summary["storage"] = {
            "calls": calls,
            "deltas": deltas,
            "calls_per_delta": round(calls / deltas, 3) if deltas else None,
            "appends_per_delta": round(meter.storage_calls.get("blob append", 0) / deltas, 3) if deltas else None,
            "control_reads_per_delta": round(meter.storage_calls.get("table read (control columns)", 0) / deltas, 3)
            if deltas else None,
            "calls_per_response": round(calls / len(runs), 1) if runs else None,
            "by_operation": dict(sorted(meter.storage_calls.items(), key=lambda kv: -kv[1])),
        }
    poller = "1 poller each" if args.poll_ms > 0 else "no poller (one GET each after the measured window)"
    print(f"load: {summary['responses']} background responses x {args.readers} live readers + {poller} "
          f"({summary['workload']}) against {base_url}")
    print(f"  wall time            {summary['wall_s']:.2f} s (first POST to last check)")
    print(f"  throughput           {summary['responses_per_s']:.2f} responses/s, "
          f"{summary['events_delivered_per_s']:.0f} events/s delivered to readers")
    print(f"  time to first event  p50 {summary['first_event_s']['p50'] * 1000:.0f} ms, "
          f"p95 {summary['first_event_s']['p95'] * 1000:.0f} ms, max {summary['first_event_s']['max'] * 1000:.0f} ms"
          " (from the start of the POST, per reader)")
    print(f"  POST round trip      p50 {summary['post_s']['p50'] * 1000:.0f} ms, "
          f"p95 {summary['post_s']['p95'] * 1000:.0f} ms"
          + (" (to the first event of its stream)" if args.create_stream else ""))
    print(f"  time to completion   p50 {summary['completion_s']['p50']:.2f} s, "
          f"p95 {summary['completion_s']['p95']:.2f} s, max {summary['completion_s']['max']:.2f} s "
          f"({'poller' if args.poll_ms > 0 else 'terminal event at the readers'})")
    print(f"  totals               {events_delivered} events to {len(readers)} readers "
          f"({events_per_response} per response), {summary['polls']} polls")
    server = summary["server"]
    print(f"  server CPU           worker {server['worker_cpu_ms_per_event']} ms/event, "
          f"host {server['host_cpu_ms_per_event']} ms/event (events written: {events_written}); "
          f"idle before the load {server['idle_cpu_ms_per_s']} ms/s")
    if meter.window_cpu:
        shares = ", ".join(f"{name} {seconds:.2f} s" for name, seconds in
                           sorted(meter.window_cpu.items(), key=lambda kv: -kv[1]))
        print(f"  CPU in the first {meter.window_s:g} s  {shares} "
              f"(of {meter.window_s * (os.cpu_count() or 1):g} s on {os.cpu_count()} cores)")
    if "storage" in summary:
        st = summary["storage"]
        print(f"  storage calls        {st['calls']} in the measured window: {st['calls_per_delta']} per delta "
              f"({st['deltas']} deltas), of which blob appends {st['appends_per_delta']} and control reads "
              f"{st['control_reads_per_delta']} per delta; {st['calls_per_response']} per response")
        print("    by operation       " + ", ".join(f"{k} {v}" for k, v in st["by_operation"].items()))
    if failed:
        print(f"  FAILED: {len(failed)} responses lost or broke something:")
        for run in failed[:10]:
            print(f"    #{run.index} {run.response_id}: {'; '.join(run.problems)[:400]}")
    else:
        print("  no loss: every reader saw 0..N contiguous ending in the terminal event; all completed")
    return summary


async def cleanup(prefix: str) -> None:
    """Drop the tables and containers of this run's storage prefix."""
    from azure.core.exceptions import ResourceNotFoundError

    from resilient.settings import Settings
    from resilient.storage.connection import StorageClients

    clients = StorageClients(Settings.from_env({**os.environ, "RESILIENT_STORAGE_PREFIX": prefix}))
    try:
        for table in (clients.responses_table_name, clients.items_table_name, clients.chains_table_name):
            with contextlib.suppress(ResourceNotFoundError):
                await clients.tables.delete_table(table)
        for container in (clients.events_container_name, clients.spill_container_name):
            with contextlib.suppress(ResourceNotFoundError):
                await clients.blobs.delete_container(container)
    finally:
        await clients.close()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a running host double (default: start one on a free port)")
    parser.add_argument("--responses", type=int, default=50)
    parser.add_argument("--readers", type=int, default=2, help="live SSE readers per response")
    parser.add_argument("--phases", type=int, default=3)
    parser.add_argument("--words", type=int, default=24)
    parser.add_argument("--delay-ms", type=int, default=20, help="agent pause between words")
    parser.add_argument("--poll-ms", type=int, default=250,
                        help="a poller per response (GET every N ms); 0: none, one GET per response after the load")
    parser.add_argument("--count-storage", action="store_true",
                        help="count storage calls through a loopback proxy in front of Azurite (spawned double only)")
    parser.add_argument("--azurite-ports", default="10000,10001,10002", help="blob,queue,table for the proxy")
    parser.add_argument("--append-window-ms", type=int, help="RESILIENT_APPEND_WINDOW_MS for the spawned double")
    parser.add_argument("--idle-seconds", type=float, default=3.0, help="idle CPU window before the load (0: skip)")
    parser.add_argument("--settle-ms", type=float, default=300.0, help="wait after the last reader before metering")
    parser.add_argument("--warmup", type=int, default=1, choices=(0, 1), help="one tiny run first (default 1)")
    parser.add_argument("--request-timeout", type=float, default=120.0)
    parser.add_argument("--max-seconds", type=float, default=170.0, help="bound for the whole load")
    parser.add_argument("--create-stream", action="store_true",
                        help="POST with stream=true: that stream is the first reader, the others attach to it "
                             "(the only way the reference SDK streams a background response)")
    parser.add_argument("--lenient", action="store_true",
                        help="the openai client without strict response validation (for the reference SDK)")
    parser.add_argument("--cpu-window", type=float, default=0.0,
                        help="also print each process's CPU in the first N s after the POSTs start: Azurite, "
                             "the spawned double's processes, this benchmark (0: off)")
    parser.add_argument("--json", type=Path, help="also write the summary here")
    parser.add_argument("--double-log", type=Path, help="keep the spawned host double's log here")
    parser.add_argument("--keep-data", action="store_true", help="keep this run's tables and containers")
    args = parser.parse_args(argv)
    if not 1 <= args.responses <= 500 or not 1 <= args.readers <= 8:
        parser.error("--responses must be 1..500 and --readers 1..8")
    if not 1 <= args.phases <= 20 or not 1 <= args.words <= 2000 or not 0 <= args.delay_ms <= 5000:
        parser.error("--phases 1..20, --words 1..2000, --delay-ms 0..5000 (the agent's own bounds)")
    if not 0 < args.max_seconds <= 900:
        parser.error("--max-seconds must be in (0, 900]")
    if args.count_storage and args.url:
        parser.error("--count-storage needs the double this script starts (not --url)")
    return args


def start_double(stack: contextlib.ExitStack, args: argparse.Namespace, prefix: str, meter: Meter,
                 extra_env: dict[str, str] | None = None) -> HostDouble:
    """Spawn one host double running ``function_app.py`` on ``AzureWebJobsStorage`` (through the counting
    proxy with ``--count-storage``), stopped when ``stack`` closes; ``meter`` learns its host and worker pids."""
    storage = os.environ["AzureWebJobsStorage"]
    if args.count_storage:
        blob, queue, table = (int(x) for x in args.azurite_ports.split(","))
        meter.storage = CountingProxy({"blob": blob, "queue": queue, "table": table})
        meter.storage.start()
        stack.callback(meter.storage.stop)
        storage = meter.storage.connection_string()
    env = {"AzureWebJobsStorage": storage, "RESILIENT_STORAGE_PREFIX": prefix,
           "RESILIENT_AGENT_DELTA_DELAY_MS": "0", "RESILIENT_ENABLE_CRASH_ENDPOINT": "false", **(extra_env or {})}
    if args.append_window_ms is not None:
        env["RESILIENT_APPEND_WINDOW_MS"] = str(args.append_window_ms)
    double = stack.enter_context(HostDouble(ROOT, env=env, settings=None, log_path=args.double_log))
    meter.host_pid = int(double.stats()["host_pid"])
    meter.worker_pid = int(double.stats()["worker_pid"])
    return double


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("AzureWebJobsStorage", "UseDevelopmentStorage=true")
    prefix = "l" + secrets.token_hex(4)
    meter = Meter(window_s=args.cpu_window)
    with contextlib.ExitStack() as stack:
        if args.url:
            base_url = loopback_url(args.url)
        else:
            double = start_double(stack, args, prefix, meter)
            base_url = double.base_url
        if args.warmup:
            warm_up(base_url, args.request_timeout)
        meter.measure_idle(args.idle_seconds)
        runs, wall_s = asyncio.run(load(base_url, args, meter))
        summary = report(runs, wall_s, args, base_url, meter)
        if not args.url:
            summary["host_double"] = {k: v for k, v in double.stats().items() if isinstance(v, int | float)}
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    if not args.url and not args.keep_data:
        asyncio.run(cleanup(prefix))
    return 1 if summary["responses_with_problems"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
