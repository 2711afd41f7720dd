"""Reliability fixtures and the crash-scenario driver shared by the tests and ``bench/crash_matrix.py``.

One host double for the whole package, with ``AzureWebJobsStorage`` pointing through a loopback
:class:`~tests.reliability.tcpproxy.TcpProxy` in front of Azurite: the crash tests only forward through it
(or slow it down to widen a window), the storage-fault tests cut it.

The driver (:func:`crash_run`) streams one background response of the offline research agent with the
official ``openai`` client (strict validation, no automatic retries), kills the worker right after chosen
events, reconnects with ``starting_after=<last seen>`` and reads to the terminal event; :func:`check_run`
then returns every broken promise (CONTRACT R2-R4) as a list of strings, so the tests assert it is empty
and the bench counts it.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx
import openai
import pytest
from openai import OpenAI

from tests.hostdouble.api import HostDouble
from tests.reliability.tcpproxy import TcpProxy
from tests.scenario.conftest import ROOT, knobs, rebuild

AZURITE_DEFAULT_PORTS = {"blob": 10000, "queue": 10001, "table": 10002}  # UseDevelopmentStorage=true


def azurite_ports(connection: str) -> dict[str, int]:
    """Azurite's blob/queue/table ports from ``AzureWebJobsStorage`` (the proxy forwards to them): the
    test command runs its own Azurite on free ports and names them in explicit endpoints."""
    parts = dict(part.split("=", 1) for part in connection.split(";") if "=" in part)
    ports = dict(AZURITE_DEFAULT_PORTS)
    for name in ports:
        endpoint = parts.get(f"{name.capitalize()}Endpoint")
        if endpoint:
            port = urlsplit(endpoint).port
            if port is None:
                raise ValueError(f"{name.capitalize()}Endpoint of AzureWebJobsStorage has no port: {endpoint}")
            ports[name] = port
    return ports

QUESTION = "Survive the crash matrix"
PHASES, WORDS, DELAY_MS = 3, 6, 60  # 36 events; a 60 ms delta pace flushes every delta on its own
MAX_EVENTS = 1000  # no run of these tests comes close; bounds every read loop
READ_TIMEOUT_S = 30.0
RUN_DEADLINE_S = 90.0
TERMINAL = frozenset({"response.completed", "response.failed", "response.incomplete"})

Stop = Callable[[Any, list[Any]], bool]


# ----------------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="session")
def storage_proxy() -> Iterator[TcpProxy]:
    with TcpProxy(azurite_ports(default_storage())) as proxy:
        yield proxy


@pytest.fixture(scope="session")
def double(storage_proxy: TcpProxy) -> Iterator[HostDouble]:
    with HostDouble(ROOT, env=double_env(storage_proxy.azurite_connection_string()), settings=None) as running:
        yield running


@pytest.fixture()
def proxy(storage_proxy: TcpProxy) -> Iterator[TcpProxy]:
    """The storage proxy, guaranteed forwarding at full speed again after the test (whatever it did)."""
    storage_proxy.latency = 0.0
    yield storage_proxy
    storage_proxy.latency = 0.0
    storage_proxy.resume()


@pytest.fixture(scope="session")
def client(double: HostDouble) -> OpenAI:
    return make_client(double.base_url)


@pytest.fixture(scope="session")
def clean(client: OpenAI) -> list[Any]:
    """The events of a fault-free run of the standard crash-test request."""
    return clean_run(client)


def double_env(storage: str) -> dict[str, str]:
    return {
        "AzureWebJobsStorage": storage,
        "RESILIENT_STORAGE_PREFIX": "r" + secrets.token_hex(4),
        "RESILIENT_AGENT_DELTA_DELAY_MS": "0",
        "RESILIENT_ENABLE_CRASH_ENDPOINT": "true",
        "RESILIENT_STEERABLE_CONVERSATIONS": "true",
        "RESILIENT_REPAIR_GRACE_SECONDS": "5",  # a missing orchestration is repaired after 5 s, not 60
    }


def default_storage() -> str:
    return os.environ.get("AzureWebJobsStorage", "UseDevelopmentStorage=true")


def make_client(base_url: str) -> OpenAI:
    return OpenAI(base_url=base_url, api_key="x", max_retries=0, _strict_response_validation=True,
                  timeout=READ_TIMEOUT_S)


# ------------------------------------------------------------------------------------------------- reading
def read_events(stream: Any, stop: Stop | None = None, limit: int = MAX_EVENTS) -> tuple[list[Any], bool]:
    """Iterate ``stream`` until ``stop(event, seen)``, the terminal event, its end, or a transport error.
    Returns (events, broken) where broken tells that the stream failed before its end."""
    seen: list[Any] = []
    try:
        for event in stream:
            seen.append(event)
            if (stop is not None and stop(event, seen)) or event.type in TERMINAL or len(seen) >= limit:
                break
    except Exception:  # the worker died under the stream (openai/httpx2 transport errors): expected here
        return seen, True
    return seen, False


def follow(client: OpenAI, response_id: str, after: int, *, deadline_s: float = RUN_DEADLINE_S,
           stop: Stop | None = None, attempts: int = 40) -> tuple[list[Any], list[str]]:
    """Reconnect with ``starting_after`` (again after every failure, bounded) until the terminal event
    (or ``stop``). Returns the events and a note per failed attempt (``"503"``, ``"APIConnectionError"``…)."""
    events: list[Any] = []
    notes: list[str] = []
    deadline = time.monotonic() + deadline_s
    for _ in range(attempts):
        if time.monotonic() > deadline:
            break
        last = events[-1].sequence_number if events else after
        so_far = list(events)

        def stop_here(event: Any, seen: list[Any], so_far: list[Any] = so_far) -> bool:
            return stop is not None and stop(event, so_far + seen)

        try:
            with client.responses.retrieve(response_id, stream=True, starting_after=last) as stream:
                more, broken = read_events(stream, stop=stop_here)
        except openai.APIStatusError as error:
            notes.append(str(error.status_code))
            time.sleep(min(2.0, float(error.response.headers.get("retry-after", "1") or 1)))
            continue
        except Exception as error:  # connection refused/reset while the worker restarts
            notes.append(type(error).__name__)
            time.sleep(0.2)
            continue
        events += more
        if events and (events[-1].type in TERMINAL or (stop is not None and stop(events[-1], events))):
            return events, notes
        notes.append("broken" if broken else "ended-early")
        time.sleep(0.1)
    return events, notes


def clean_run(client: OpenAI) -> list[Any]:
    stream = client.responses.create(model="m", input=QUESTION, stream=True, background=True,
                                     metadata=knobs(PHASES, WORDS, DELAY_MS))
    with stream:
        events, broken = read_events(stream)
    assert not broken and events and events[-1].type == "response.completed", "fault-free run did not complete"
    return events


def texts(output: list[Any]) -> list[str]:
    return [o.content[0].text if o.content else "" for o in output]


# -------------------------------------------------------------------------------------------------- crashes
def kill(double: HostDouble, how: str = "sigkill") -> None:
    """Kill the worker (SIGKILL from outside, or the app's own ``POST /ops/crash``) and wait for the new one."""
    before = double.stats()["worker_restarts"]
    if how == "sigkill":
        double.kill_worker()
    else:
        with contextlib.suppress(httpx.HTTPError):  # the worker dies while answering: that is the point
            httpx.post(f"{double.base_url}/ops/crash", timeout=10)
    double.wait_for_worker_restarts(before + 1, timeout=60)


def at_seq(k: int) -> Stop:
    return lambda event, seen: event.sequence_number >= k


@dataclass
class AppLog:
    """What the app's own log lines (the worker's output, kept by the double) say about one response."""

    phases_done: int = 0  # "phase done": a phase streamed and checkpointed (a kill can fall just before it)
    recovering: int = 0  # "recovering phase": an attempt that starts by resetting a partial phase
    repairs: int = 0  # "repaired": the repair path started a new execution

    @classmethod
    def of(cls, log: str, response_id: str) -> AppLog:
        def count(message: str) -> int:
            return len(re.findall(rf"{re.escape(message)} \| response_id={re.escape(response_id)}(?!\w)", log))

        return cls(count("phase done"), count("recovering phase"), count("repaired"))


@dataclass
class CrashRun:
    response_id: str
    events: list[Any]
    crashes: int
    stats_before: dict[str, Any]
    stats_after: dict[str, Any]
    kill_after: list[int] = field(default_factory=list)  # last sequence number seen before each kill
    notes: list[str] = field(default_factory=list)
    orchestration: str | None = None  # the Durable runtimeStatus once the run ended
    app: AppLog = field(default_factory=AppLog)
    log_excerpt: str = ""  # the double's log lines about this run and the worker's lifecycle, for a failure
    ended_before_episode_died: bool = False  # the app logged the run's end before its episode died with the worker

    def delta(self, counter: str, name: str) -> int:
        return int(self.stats_after.get(counter, {}).get(name, 0)) - \
            int(self.stats_before.get(counter, {}).get(name, 0))

    def delta_count(self, counter: str) -> int:
        """The change of a plain counter (``episodes_failed_worker_exit``, ``entity_batches_aborted``…)."""
        return int(self.stats_after[counter]) - int(self.stats_before[counter])


def crash_run(client: OpenAI, double: HostDouble, stops: list[Stop], how: list[str] | None = None) -> CrashRun:
    """Start the standard run; for each ``stop`` read until it holds (first on the live stream, then on a
    reconnect), kill the worker, and finally read to the terminal event."""
    how = how or ["sigkill"] * len(stops)
    before = double.stats()
    stream = client.responses.create(model="m", input=QUESTION, stream=True, background=True,
                                     metadata=knobs(PHASES, WORDS, DELAY_MS))
    kill_after: list[int] = []
    notes: list[str] = []
    with stream:
        events, broken = read_events(stream, stops[0] if stops else None)
        if not events:
            raise AssertionError("no event before the first kill")
        response_id = events[0].response.id
        if broken:
            notes.append("live stream broke before the first kill")
        if stops:
            kill_after.append(events[-1].sequence_number)
            kill(double, how[0])
    for stop, way in zip(stops[1:], how[1:], strict=True):
        more, extra = follow(client, response_id, events[-1].sequence_number, stop=stop)
        events += more
        notes += extra
        kill_after.append(events[-1].sequence_number)
        kill(double, way)
    return finish_run(client, double, response_id, events, before, kill_after, notes)


def start_run(client: OpenAI, stop: Stop, **body: Any) -> tuple[str, list[Any], list[str]]:
    """Create the standard run (streamed, background) and read its live stream until ``stop``: its id,
    the events and a note if the stream broke."""
    stream = client.responses.create(model="m", input=QUESTION, stream=True, background=True,
                                     metadata=knobs(PHASES, WORDS, DELAY_MS), **body)
    with stream:
        events, broken = read_events(stream, stop)
    if not events:
        raise AssertionError("the stream ended before its first event")
    return events[0].response.id, events, ["live stream broke"] if broken else []


def finish_run(client: OpenAI, double: HostDouble, response_id: str, events: list[Any], before: dict[str, Any],
               kill_after: list[int], notes: list[str], *, deadline_s: float = RUN_DEADLINE_S) -> CrashRun:
    """Reconnect with ``starting_after`` until the terminal event (retrying 5xx and connection errors),
    wait for the orchestration to end, and collect what :func:`check_run` needs."""
    events, notes = list(events), list(notes)
    if not events or events[-1].type not in TERMINAL:
        more, extra = follow(client, response_id, events[-1].sequence_number if events else -1,
                             deadline_s=deadline_s, attempts=200)
        events += more
        notes += extra
    orchestration = settle(double, response_id)
    log = double.log()
    lines = run_lines(log, response_id)
    return CrashRun(response_id, events, len(kill_after), before, double.stats(), kill_after, notes, orchestration,
                    AppLog.of(log, response_id), log_excerpt(lines), ended_before_episode_died(lines, response_id))


LIFECYCLE = ("worker generation", "kill armed", "restarting the worker", "function timeout", "re-delivering",
             "Exceeded language worker")
EPISODE_DIED = "orchestrator episode in flight when the worker died"  # the double's line (durable/runtime.py)


def run_lines(log: str, response_id: str) -> list[str]:
    """The log lines a run's checks read: from the first line naming the response on (a double serves many
    runs, and earlier runs' kills are not this run's), those naming it and the worker's lifecycle lines."""
    lines = log.splitlines()
    first = next((i for i, line in enumerate(lines) if response_id in line), len(lines))
    return [line for line in lines[first:] if response_id in line or any(word in line for word in LIFECYCLE)]


def log_excerpt(lines: list[str], limit: int = 80) -> str:
    """The last of a run's lines (:func:`run_lines`), for a reader of a failed check. A crash test's failure
    is often load-dependent and does not reproduce alone, so its evidence has to travel with the assertion."""
    return "\n".join(lines[-limit:])


def ended_before_episode_died(lines: list[str], response_id: str) -> bool:
    """The app logged the run's terminal status (``finalized``) before the host logged the run's
    orchestrator episode failed by the worker's exit: the run was over in storage when its episode died,
    even if the client had not read the terminal event yet. The worker writes its line before it can die
    and the host logs the failure after it, so a reordering of the two (the pipe from the worker read late)
    can only make this False."""
    ended = next((i for i, line in enumerate(lines) if f"finalized | response_id={response_id}" in line), None)
    died = [i for i, line in enumerate(lines) if f"instance {response_id} " in line and EPISODE_DIED in line]
    return ended is not None and bool(died) and ended < died[-1]


FREE_LOCK = {"active": None, "queue": []}


def chain_lock_once_free(double: HostDouble, chain: str, timeout: float = 30.0) -> Any:
    """The chain lock's state once it is free, or its last state after ``timeout`` (a lock left held).

    A turn's client sees its terminal event (written by finalize) before its orchestration sends the
    release, and the entity handles that signal in a batch of its own (retried after a back-off when its
    worker died), so a lock read right after the terminal event may still name the turn."""
    return chain_lock_once(double, chain, lambda lock: lock == FREE_LOCK, timeout)


def chain_lock_once(double: HostDouble, chain: str, holds: Callable[[Any], bool], timeout: float = 30.0,
                    poll_s: float = 0.25) -> Any:
    """The chain lock's state once ``holds`` is true of it, or its last state after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        lock = httpx.get(f"{double.durable_url}/entities/chain_lock/{chain}", timeout=10).json()
        if holds(lock) or time.monotonic() > deadline:
            return lock
        time.sleep(poll_s)


def settle(double: HostDouble, instance_id: str, timeout: float = 30.0) -> str | None:
    """Wait for the orchestration to end (finalize returned, lock released) so stats deltas are final:
    the double counts an activity delivery when its answer comes back, after the terminal event."""
    try:
        status = double.wait_for_status(instance_id, timeout=timeout)
    except TimeoutError:
        return None
    found = status.get("runtimeStatus")
    return str(found) if found is not None else None


def check_run(client: OpenAI, run: CrashRun, clean_events: list[Any], *, host_stats: bool = True) -> list[str]:
    """Every broken promise of R2-R4 for a crashed run, as readable strings (empty = all kept).
    ``host_stats=False`` after a whole-host kill: the double's counters started again from zero, so only
    the app's log lines count repeated phases."""
    problems: list[str] = []
    events = run.events
    seqs = [e.sequence_number for e in events]
    if seqs != list(range(len(events))):
        problems.append(f"R2 sequence not 0..N without gap/duplicate: {_gaps(seqs)}")
    kinds = [e.type for e in events]
    if not events or kinds[-1] != "response.completed":
        problems.append(f"run did not complete: last event {kinds[-1] if kinds else None}")
    if sum(k in TERMINAL for k in kinds) != 1:
        problems.append(f"R5 {sum(k in TERMINAL for k in kinds)} terminal events")
    if kinds.count("response.created") != 1:
        problems.append(f"{kinds.count('response.created')} response.created events")
    if run.orchestration != "Completed" and not (run.orchestration == "Failed" and _over_before_the_kill(run)):
        problems.append(f"orchestration ended {run.orchestration!r}, not Completed")
    problems += _check_phase_work(run, host_stats=host_stats)
    resets = _resets(events)
    if len(resets) > run.crashes:
        problems.append(f"R4 {len(resets)} recovery resets for {run.crashes} crash(es)")
    problems += _check_resets(events)
    try:
        final = client.responses.retrieve(run.response_id)
    except openai.APIError as error:
        return with_evidence([*problems, f"GET /responses/{{id}} failed: {error!r}"], run)
    if final.status != "completed":
        problems.append(f"final status {final.status}")
    clean_final = clean_events[-1].response
    if texts(final.output) != texts(clean_final.output):
        problems.append("R3 final output texts differ from the fault-free run")
    try:
        rebuilt = [(i["id"], i["text"]) for i in rebuild(events)]
    except (AssertionError, KeyError) as error:
        problems.append(f"R4 stream cannot be rebuilt: {error!r}")
    else:
        if rebuilt != [(o.id, o.content[0].text) for o in final.output]:
            problems.append("R4 output rebuilt from the stream differs from GET /responses/{id}")
    if events and events[-1].type == "response.completed" and texts(events[-1].response.output) != texts(
            final.output):
        problems.append("terminal event's response.output differs from GET /responses/{id}")
    return with_evidence(problems, run)


def with_evidence(problems: list[str], run: CrashRun) -> list[str]:
    """``problems`` plus, when there are any, the run's log excerpt (a failing check is its own report)."""
    return [*problems, f"log excerpt:\n{run.log_excerpt}"] if problems else problems


def _check_phase_work(run: CrashRun, *, host_stats: bool = True) -> list[str]:
    """R3: at most one phase repeated per kill, counted two ways.

    The host's side (double stats): a ``run_phase`` the host failed because its worker exited is a phase
    the orchestrator calls again; nothing is re-delivered unless the host recycles. Every ``run_phase``
    delivery is one of the plan's phases, one of those retries, a call sent again, a work item a stopping
    host left behind, or (after a repair restarted the orchestration) a call for a finished phase that only
    returns its checkpoint. The app's side (its log lines): a phase that streamed
    to its end more than once, or an attempt that started by resetting a partial phase, is a repeat."""
    problems: list[str] = []
    repeated = run.app.recovering + max(0, run.app.phases_done - PHASES)
    if repeated > run.crashes:
        problems.append(f"R3 {repeated} phases repeated for {run.crashes} crash(es) (app log: "
                        f"{run.app.phases_done} 'phase done', {run.app.recovering} 'recovering phase')")
    if not host_stats:
        return problems
    failed = run.delta("activity_failures_worker_exit", "run_phase")
    if failed > run.crashes:
        problems.append(f"R3 {failed} run_phase failed by a worker exit for {run.crashes} crash(es)")
    # A worker's crash fails its activity (the orchestrator calls it again); nothing is re-delivered. Only a
    # host that stops (a recycle at the restart limit) makes a run_phase reappear after its visibility
    # timeout: one it had taken but not started (a late first start), or one whose result it had sent but
    # whose work item it had not yet deleted when it stopped (DTFx sends the result, then deletes the item),
    # which runs again and finds its phase's checkpoint. Either way the app's log counts the repeats.
    redelivered = run.delta("activity_redeliveries", "run_phase")
    recycles = int(run.stats_after.get("host_recycles", 0)) - int(run.stats_before.get("host_recycles", 0))
    if redelivered > recycles:
        problems.append(f"{redelivered} run_phase re-deliveries for {recycles} host recycle(s): a worker crash "
                        "fails its activity, it is never re-delivered")
    deliveries = run.delta("activity_deliveries", "run_phase")
    # An episode that sent a run_phase and then failed to checkpoint (a storage error, a lost race) is run
    # again and sends it again (DTFx sends before it checkpoints): a second delivery of the same call, which
    # finds the first one's checkpoint or is fenced off by it.
    resent = run.delta("activity_sends_before_a_failed_checkpoint", "run_phase")
    low = PHASES + failed
    high = low + PHASES * run.app.repairs + resent + min(redelivered, recycles)
    if not low <= deliveries <= high:
        problems.append(f"R3 {deliveries} run_phase deliveries, expected {low}..{high} ({failed} failed by a "
                        f"worker exit, {run.app.repairs} repair(s), {resent} sent again after a failed "
                        f"checkpoint, {redelivered} re-delivered after {recycles} host recycle(s))")
    return problems


def _over_before_the_kill(run: CrashRun) -> bool:
    """The run was over before the (last) kill: a kill in the orchestrator's episode after finalize leaves
    a Failed orchestration of a completed response, which the repair path rightly leaves alone (a chain
    lock it still held is freed by the next turn on the chain). Over means the client had the terminal
    event before the kill, or the app had logged the run's end before the worker died (the client read the
    event just before the terminal one and the kill came while the terminal one was on its way)."""
    last_kill = max(run.kill_after, default=-1)
    seen = any(e.type in TERMINAL and e.sequence_number <= last_kill for e in run.events)
    return seen or run.ended_before_episode_died


def _resets(events: list[Any]) -> list[int]:
    """Positions of recovery resets: a ``response.in_progress`` after the first one."""
    positions = [i for i, e in enumerate(events) if e.type == "response.in_progress"]
    return positions[1:]


def _check_resets(events: list[Any]) -> list[str]:
    """R4: each reset carries the snapshot as of the last checkpoint: every item in it is one the stream
    finished (same id and text), and it holds every finished item before the one being repeated."""
    problems: list[str] = []
    for position in _resets(events):
        done: dict[int, tuple[str, str]] = {}
        for e in events[:position]:
            if e.type == "response.in_progress":
                done = {i: (o.id, texts([o])[0]) for i, o in enumerate(e.response.output)}
            elif e.type == "response.output_item.done":
                done[e.output_index] = (e.item.id, e.item.content[0].text)
        snapshot = [(o.id, texts([o])[0]) for o in events[position].response.output]
        if any(done.get(i) != item for i, item in enumerate(snapshot)):
            problems.append(f"R4 reset at seq {events[position].sequence_number} carries an unfinished item")
        if len(done) - len(snapshot) > 1:
            problems.append(f"R4 reset at seq {events[position].sequence_number} drops {len(done) - len(snapshot)} "
                            "finished items (more than one phase repeated)")
    return problems


def _gaps(seqs: list[int]) -> str:
    odd = [(i, s) for i, s in enumerate(seqs) if s != i][:5]
    return f"first mismatches (position, seq) {odd}, length {len(seqs)}"
