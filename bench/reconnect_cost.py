"""What one reconnect costs the worker: CPU, wall time and storage calls up to its first event, against Azurite.

A reconnect is ``GET /responses/{id}?stream=true&starting_after=N``. This runs it in process through the HTTP
function's body (``resilient/functions/http.py``: span, service, handler, the stream up to its first chunk;
no host, no socket to the client) on a finished response of ``--phases`` × ``--words`` (the offline agent),
``--reconnects`` times one after another, and prints per reconnect:

* CPU (``time.process_time``) and wall time to the first chunk (``--to-end``: to the end of the stream);
* the row reads and the event log's reads this process made by then (the stores' own counters).

``--remembered`` reconnects in the process that wrote the log (the log then comes from memory, as in
``bench/compare.py``); by default the log is forgotten before each reconnect, as on another instance.

    AzureWebJobsStorage=UseDevelopmentStorage=true .venv/bin/python bench/reconnect_cost.py --words 300
    ... bench/reconnect_cost.py --words 300 --app-dir /tmp/base      # another checkout, for an A/B
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import sys
import time
from pathlib import Path

# ``--app-dir``: the checkout whose app is measured (read before the app is imported); default this one.
sys.path.insert(0, str(Path(sys.argv[sys.argv.index("--app-dir") + 1]).resolve() if "--app-dir" in sys.argv[:-1]
                       else Path(__file__).resolve().parents[1]))

from starlette.requests import Request

from resilient.agents.research import ResearchAgent
from resilient.bootstrap import Worker
from resilient.functions import http as http_functions
from resilient.functions.runtime import ProcessRuntime
from tests.integration.conftest import NoDurable

# A Durable client binding that is never used: a reconnect makes no Durable call.
UNUSED_BINDING = json.dumps({"taskHubName": "bench", "creationUrls": {}, "managementUrls": {},
                             "baseUrl": "http://127.0.0.1:1", "requiredQueryStringParameters": ""})


def reconnect_request(response_id: str, after: int) -> Request:
    return Request({"type": "http", "method": "GET", "path": f"/responses/{response_id}", "root_path": "",
                    "path_params": {"response_id": response_id}, "headers": [],
                    "query_string": f"stream=true&starting_after={after}".encode()})


async def finished_response(worker: Worker, phases: int, words: int) -> str:
    body = {"model": "bench", "input": "Reconnect cost.", "background": True,
            "metadata": {"research_phases": str(phases), "words_per_phase": str(words), "delta_delay_ms": "0"}}
    created = await worker.service(NoDurable()).create(json.dumps(body).encode())
    response_id = str(created.body["id"])
    plan = await worker.engine.plan(response_id)
    for index in range(plan["phases"]):
        await worker.engine.run_phase(response_id, index)
    await worker.engine.finalize(response_id, {"status": "completed"})
    return response_id


def storage_calls(worker: Worker) -> tuple[int, int]:
    events = worker.storage.events
    reads = getattr(events, "reader", events)  # the log's reads count on its reader where it has one
    return worker.storage.responses.storage_calls, reads.storage_calls  # type: ignore[attr-defined]


async def reconnect(process: ProcessRuntime, worker: Worker, response_id: str, args: argparse.Namespace) -> None:
    if not args.remembered:
        state = getattr(worker, "state", None) or worker.caches  # type: ignore[attr-defined]  # older checkouts
        state.feed.forget_log(response_id)
    response = await http_functions._operate(process, "retrieve", reconnect_request(response_id, args.after),
                                            UNUSED_BINDING, response_id)
    chunks = response.body_iterator  # type: ignore[attr-defined]
    async for _ in chunks:
        if not args.to_end:
            break
    await chunks.aclose()


async def main(args: argparse.Namespace) -> None:
    process = ProcessRuntime(ResearchAgent)
    worker = await process.worker()
    response_id = await finished_response(worker, args.phases, args.words)
    for _ in range(5):  # warm-up: imports, connections
        await reconnect(process, worker, response_id, args)
    rows, reads = storage_calls(worker)
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(args.reconnects):
        await reconnect(process, worker, response_id, args)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    rows_after, reads_after = storage_calls(worker)
    await worker.storage.close()
    n = args.reconnects
    print(f"{'remembered' if args.remembered else 'elsewhere'}, starting_after={args.after}, "
          f"{args.phases}x{args.words} words, to {'the end' if args.to_end else 'the first event'}: "
          f"CPU {cpu / n * 1000:.2f} ms, wall {wall / n * 1000:.2f} ms, row reads {(rows_after - rows) / n:.2f}, "
          f"log reads {(reads_after - reads) / n:.2f} per reconnect")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reconnects", type=int, default=200)
    parser.add_argument("--after", type=int, default=10, help="starting_after")
    parser.add_argument("--phases", type=int, default=3)
    parser.add_argument("--words", type=int, default=48, help="words per phase (300: a log longer than 64 KiB)")
    parser.add_argument("--remembered", action="store_true", help="reconnect in the process that wrote the log")
    parser.add_argument("--to-end", action="store_true", help="time the whole stream, not just its first event")
    parser.add_argument("--app-dir", help="the app checkout to measure (default: this one)")
    os.environ.setdefault("RESILIENT_STORAGE_PREFIX", "rc" + secrets.token_hex(4))
    asyncio.run(main(parser.parse_args()))
