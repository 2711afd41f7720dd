"""What one ``POST /responses`` costs the worker: CPU and storage calls of the service's create, against Azurite.

The create is the first thing a burst of new responses does, all at once, on the instance that takes them:
its CPU and its storage calls bound how fast a burst is answered. This runs
:meth:`resilient.http.service.ResponsesService.create` in process (no HTTP layer, no host) for a background
root turn of one input item, with a Durable runtime that starts nothing (the orchestration start is the
Durable backend's work: one instance read, one queue send and one instance insert on the Azure Storage
backend, counted by ``bench/host_faults.py calls``), and prints:

* CPU (``time.process_time``) and wall time per create, one after another and ``--concurrent`` at once,
  interleaved round by round;
* the storage requests one create makes, by operation, counted by a loopback proxy in front of Azurite
  (``bench/counting_proxy.py``) in a separate pass, so the proxy's own CPU is not in the timed rounds.

    AzureWebJobsStorage=UseDevelopmentStorage=true .venv/bin/python bench/create_cost.py --creates 200 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from counting_proxy import CountingProxy

from resilient.engine.worker_state import WorkerState
from resilient.http.service import ResponsesService
from resilient.settings import Settings
from resilient.storage.factory import Storage, open_storage
from tests.integration.conftest import NoDurable

BODY = json.dumps({
    "model": "bench", "input": "Load test question number 3: what keeps a stream complete?", "background": True,
    "metadata": {"research_phases": "3", "words_per_phase": "24", "delta_delay_ms": "20"},
}).encode()


async def _service(connection: str) -> tuple[ResponsesService, Storage]:
    settings = Settings.from_env({"AzureWebJobsStorage": connection,
                                  "RESILIENT_STORAGE_PREFIX": "cc" + secrets.token_hex(3)})
    worker = WorkerState()  # what bootstrap wires for a worker
    storage = await open_storage(settings, feed=worker.feed, controls=worker.controls, kept=worker.kept)
    service = ResponsesService(storage, NoDurable(), settings, worker=worker)  # NoDurable starts nothing (see above)
    return service, storage


async def _timed(service: ResponsesService, creates: int, concurrent: int) -> tuple[float, float]:
    """CPU and wall milliseconds per create, ``concurrent`` creates at a time."""
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(creates // concurrent):
        await asyncio.gather(*(service.create(BODY) for _ in range(concurrent)))
    done = creates // concurrent * concurrent
    return (time.process_time() - cpu) * 1000 / done, (time.perf_counter() - wall) * 1000 / done


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--creates", type=int, default=200, help="creates per round and kind")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrent", type=int, default=50, help="creates at once in the concurrent kind")
    parser.add_argument("--azurite-ports", default="10000,10001,10002", help="blob,queue,table for the proxy")
    args = parser.parse_args()

    connection = Settings.from_env().storage_connection_string or "UseDevelopmentStorage=true"
    service, storage = await _service(connection)
    try:
        for _ in range(20):  # warm: connections, the request models' first build
            await service.create(BODY)
        results: dict[str, list[tuple[float, float]]] = {"one after another": [],
                                                         f"{args.concurrent} at once": []}
        for _ in range(args.rounds):
            results["one after another"].append(await _timed(service, args.creates, 1))
            results[f"{args.concurrent} at once"].append(await _timed(service, args.creates, args.concurrent))
    finally:
        await storage.clients.delete_all()
        await storage.close()

    blob, queue, table = (int(p) for p in args.azurite_ports.split(","))
    proxy = CountingProxy({"blob": blob, "queue": queue, "table": table})
    proxy.start()
    counted_service, counted_storage = await _service(proxy.connection_string())
    try:
        await counted_service.create(BODY)  # warm: the first create's connections are not counted below
        before = proxy.snapshot()
        counted = 20
        for _ in range(counted):
            await counted_service.create(BODY)
        calls = proxy.snapshot() - before
    finally:
        await counted_storage.clients.delete_all()
        await counted_storage.close()
        proxy.stop()

    print(f"one create (background root turn, one input item, no orchestration start), {args.rounds} rounds of "
          f"{args.creates}, interleaved (median of rounds; min-max)")
    print(f"{'':24s}{'CPU ms':>22s}{'wall ms':>22s}")
    for kind, rows in results.items():
        cpu = [r[0] for r in rows]
        wall = [r[1] for r in rows]
        print(f"{kind:24s}{statistics.median(cpu):8.2f} ({min(cpu):5.2f}-{max(cpu):5.2f})"
              f"{statistics.median(wall):10.2f} ({min(wall):5.2f}-{max(wall):5.2f})")
    per_create = {op: n / counted for op, n in sorted(calls.items())}
    print(f"storage requests per create: {sum(per_create.values()):.1f} "
          f"({', '.join(f'{op} {n:g}' for op, n in per_create.items())})")


if __name__ == "__main__":
    asyncio.run(main())
