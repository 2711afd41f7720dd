"""Time from a fault to the run resuming, as a reconnecting client sees it.

    .venv/bin/python bench/recovery_time.py                         # every fault, 5 runs each
    .venv/bin/python bench/recovery_time.py --fault terminate --runs 10
    .venv/bin/python bench/recovery_time.py --fault kill-host --runs 3   # about 70 s per run

Faults (each lands mid-phase, after event ``--after`` of a 3-phase run, unless said otherwise):

* ``kill-worker``: SIGKILL the worker process. The double does what the real host does: it restarts the
  worker, fails the activity in flight with the worker's exit (no re-delivery; the orchestrator retries the
  phase after its 3 s crash timer), and recycles the whole host on every third crash within 30 minutes;
* ``kill-episode``: the worker dies inside the next orchestrator episode (the one that takes the
  interrupted phase's result, at the end of that phase): the orchestration is Failed for good and the
  app's repair path starts a new execution. Timed from the moment the kill fired;
* ``kill-host``: SIGKILL the whole host process group (platform, host, worker) and start it again with the
  same command: the messages the dead host held reappear after the queue visibility timeout of host.json
  (1 min);
* ``terminate``: terminate the orchestration through the Durable HTTP API (as an operator would; on the
  real host an orchestrator episode that dies with its worker leaves the orchestration Failed, which the
  repair path treats the same way);
* ``purge``: delete the orchestration's history (the instance is missing; repaired after
  ``RESILIENT_REPAIR_GRACE_SECONDS``, set to 5 here).

The client reconnects with ``starting_after`` right after the fault and keeps reading; "resumed" is the
first event appended by the new attempt (the recovery reset ``response.in_progress``, or the next phase's
opening). Prints per fault: runs, resumed p50 / max seconds, and whether every run completed with a
contiguous log, one terminal event and the fault-free text. Starts its own host double on Azurite
(``AzureWebJobsStorage``, default ``UseDevelopmentStorage=true``; loopback endpoints only).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.crash_matrix import _loopback_only
from tests.hostdouble.api import HostDouble
from tests.reliability.conftest import (
    PHASES,
    QUESTION,
    ROOT,
    TERMINAL,
    WORDS,
    clean_run,
    default_storage,
    double_env,
    follow,
    make_client,
    read_events,
    texts,
)
from tests.scenario.conftest import knobs

FAULTS = ("kill-worker", "kill-episode", "terminate", "purge", "kill-host")
DELAY_MS = 120


def _fault(double: HostDouble, how: str, response_id: str) -> float:
    """Cause the fault; returns when it happened (``time.monotonic()``)."""
    durable = f"{double.base_url}/runtime/webhooks/durabletask"
    at = time.monotonic()
    if how == "kill-worker":
        double.kill_worker()
    elif how == "kill-episode":
        fired = len(double.stats()["kills"])
        double.kill_worker(target="orchestrator", name="responses_orchestrator")
        kill = double.wait_for(lambda s: len(s["kills"]) > fired, timeout=60)["kills"][-1]
        if kill["instance_id"] != response_id:
            raise RuntimeError(f"the episode kill hit another instance: {kill}")
        at = time.monotonic() - (time.time() - float(kill["at"]))
    elif how == "kill-host":
        double.kill_host()
        double.restart()
    elif how == "terminate":
        httpx.post(f"{durable}/instances/{response_id}/terminate?reason=bench", timeout=10).raise_for_status()
    elif how == "purge":
        httpx.delete(f"{durable}/instances/{response_id}", timeout=10).raise_for_status()
    return at


def one_run(double: HostDouble, client: Any, how: str, after: int, clean_texts: list[str]) -> dict[str, Any]:
    stream = client.responses.create(model="m", input=QUESTION, stream=True, background=True,
                                     metadata=knobs(PHASES, WORDS, DELAY_MS))
    with stream:
        events, _ = read_events(stream, lambda event, seen: event.sequence_number >= after)
    response_id = events[0].response.id
    faulted = _fault(double, how, response_id)
    resumed: list[float] = []

    def first_new(event: Any, seen: list[Any]) -> bool:
        if not resumed and event.type in ("response.in_progress", "response.output_item.added"):
            resumed.append(time.monotonic() - faulted)
        return False

    more, notes = follow(client, response_id, events[-1].sequence_number, deadline_s=180.0, stop=first_new,
                         attempts=400)
    events += more
    seqs = [e.sequence_number for e in events]
    kinds = [e.type for e in events]
    ok = (seqs == list(range(len(events))) and sum(k in TERMINAL for k in kinds) == 1
          and kinds[-1] == "response.completed" and texts(events[-1].response.output) == clean_texts)
    return {"resumed": resumed[0] if resumed else None, "ok": ok, "notes": notes}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fault", choices=(*FAULTS, "all"), default="all")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--after", type=int, default=8, help="fault after this event (mid phase 0 by default)")
    args = parser.parse_args()
    storage = default_storage()
    _loopback_only(storage)
    faults = FAULTS if args.fault == "all" else (args.fault,)
    env = {**double_env(storage), "RESILIENT_REPAIR_GRACE_SECONDS": "5"}
    failed = 0
    with HostDouble(ROOT, env=env, settings=None) as double:
        client = make_client(double.base_url)
        clean_texts = texts(clean_run(client)[-1].response.output)
        print(f"{'fault':<12} {'runs':>4} {'resumed p50 s':>14} {'max s':>7}  all correct")
        for how in faults:
            results = [one_run(double, client, how, args.after, clean_texts) for _ in range(args.runs)]
            times = [r["resumed"] for r in results if r["resumed"] is not None]
            good = all(r["ok"] for r in results) and len(times) == len(results)
            failed += not good
            p50 = f"{statistics.median(times):.2f}" if times else "-"
            worst = f"{max(times):.2f}" if times else "-"
            print(f"{how:<12} {len(results):>4} {p50:>14} {worst:>7}  {'yes' if good else 'NO'}")
            for result in results:
                if not result["ok"]:
                    print(f"    broken run: resumed={result['resumed']} notes={result['notes']}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
