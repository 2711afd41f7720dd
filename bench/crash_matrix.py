"""Full crash matrix: kill the worker right after the client received event k, for EVERY event index k of
a 3-phase run, and check CONTRACT R2-R4 each time (the same driver and checks as
``tests/reliability/test_crash_matrix.py``, which samples six indices in CI).

    .venv/bin/python bench/crash_matrix.py                     # every index, SIGKILL
    .venv/bin/python bench/crash_matrix.py --how endpoint      # the app's own POST /ops/crash
    .venv/bin/python bench/crash_matrix.py --indices 0,12,34 --repeat 3

Starts its own host double (a fresh storage prefix) on Azurite (``AzureWebJobsStorage``, default
``UseDevelopmentStorage=true``; loopback endpoints only). Prints one line per try: the event k, what the
worker was doing when it died (the activity the host failed with the worker's exit, or ``episode`` when an
orchestrator episode died with it; how many events it had appended after k: ``+n``), and every broken
promise; then ``survived X/Y``. The double runs the real host's crash semantics: nothing is re-delivered,
and every third worker crash within 30 minutes recycles the whole host, as it does on the real host.
Exit code 1 if any try failed.
Bounded: at most ``--repeat`` × (events) tries, and it stops starting new ones after ``--max-seconds``.
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.hostdouble.api import HostDouble
from tests.reliability.conftest import (
    DELAY_MS,
    PHASES,
    ROOT,
    WORDS,
    at_seq,
    check_run,
    clean_run,
    crash_run,
    default_storage,
    double_env,
    make_client,
)

LOOPBACK = re.compile(r"^https?://(127\.0\.0\.1|localhost)(:\d+)?/", re.IGNORECASE)


def _loopback_only(connection: str) -> None:
    if connection.strip().lower().rstrip(";") == "usedevelopmentstorage=true":
        return
    endpoints = re.findall(r"(?:Blob|Queue|Table)Endpoint=([^;]+)", connection, re.IGNORECASE)
    if not endpoints or not all(LOOPBACK.match(e) for e in endpoints):
        raise SystemExit("refusing: the storage connection string must name 127.0.0.1/localhost endpoints only")


def _describe(event: Any) -> str:
    where = f" out={event.output_index}" if hasattr(event, "output_index") else ""
    return f"{event.type.removeprefix('response.')}{where}"


def _landing(run: Any, k: int) -> str:
    """Where the kill landed: the activity the host failed with the worker's exit (the orchestrator calls
    it again), or an orchestrator episode (the orchestration failed; the repair path restarted it), or
    nothing in flight; and the events appended after k before the recovery reset."""
    failed = [name for name in ("run_phase", "finalize_response")
              if run.delta("activity_failures_worker_exit", name) > 0]
    if run.delta_count("episodes_failed_worker_exit") > 0:
        failed.append("episode")
    resets = [e.sequence_number for e in run.events[k + 1:] if e.type == "response.in_progress"]
    overshoot = f"+{resets[0] - k - 1}" if resets else "no reset"
    return f"{'/'.join(failed) or 'nothing in flight'}, {overshoot}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--indices", default="all", help="'all' or comma-separated event indices")
    parser.add_argument("--how", choices=("sigkill", "endpoint"), default="sigkill")
    parser.add_argument("--repeat", type=int, default=1, help="tries per index (1-10)")
    parser.add_argument("--max-seconds", type=float, default=1200.0)
    args = parser.parse_args()
    repeat = max(1, min(10, args.repeat))
    storage = default_storage()
    _loopback_only(storage)

    started = time.monotonic()
    with HostDouble(ROOT, env=double_env(storage), settings=None) as double:
        client = make_client(double.base_url)
        clean = clean_run(client)
        total = len(clean)
        indices = list(range(total)) if args.indices == "all" else [int(x) for x in args.indices.split(",") if x]
        indices = [k for k in indices if 0 <= k < total]
        print(f"run: {PHASES} phases x {WORDS} words, {DELAY_MS} ms/delta -> {total} events (0..{total - 1}); "
              f"kill: {args.how}; tries: {len(indices) * repeat}", flush=True)
        tried = survived = 0
        failures: dict[int, list[str]] = collections.defaultdict(list)
        landings: collections.Counter[str] = collections.Counter()
        for k in indices:
            for _ in range(repeat):
                if time.monotonic() - started > args.max_seconds:
                    print(f"stopping: --max-seconds {args.max_seconds:.0f} reached", flush=True)
                    break
                t0 = time.monotonic()
                tried += 1
                try:
                    run = crash_run(client, double, [at_seq(k)], how=[args.how])
                    problems = check_run(client, run, clean)
                    if run.kill_after != [k]:
                        problems.append(f"kill followed event {run.kill_after}, not {k} ({run.notes})")
                    landing = _landing(run, k)
                except Exception as error:  # a hung or broken try is a failed try, not a crashed bench
                    problems, landing = [f"driver error: {error!r}"], "?"
                landings[landing.split(",")[0]] += 1
                if problems:
                    failures[k] += problems
                else:
                    survived += 1
                status = "ok  " if not problems else "FAIL"
                print(f"k={k:3d} {_describe(clean[k]):28s} {status} {landing:32s} {time.monotonic() - t0:5.1f}s"
                      + "".join(f"\n      - {p}" for p in problems), flush=True)
        print(f"\nin flight at the kill: {dict(landings)}")
        print(f"survived {survived}/{tried}  ({time.monotonic() - started:.0f}s)")
        for k, problems in sorted(failures.items()):
            print(f"  k={k}: " + "; ".join(problems))
    return 0 if survived == tried else 1


if __name__ == "__main__":
    sys.exit(main())
