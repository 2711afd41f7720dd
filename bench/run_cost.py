"""The app's own cost of one run, without the host double: CPU per run and storage calls per run.

Runs the real engine, the service and the real orchestrator in one process (the Durable stand-in of the
tests, ``tests/durable_standin.py``) against Azurite, with the offline agent (``--phases`` × ``--words``, no
delay: the workload of ``compare.py``), one background run after the other. Prints the process's CPU time
per run (``time.process_time``: this process only, so no double, no host, no HTTP serving) and the storage
requests per run by method and resource, counted at the storage SDKs' aiohttp session.

    AzureWebJobsStorage=<Azurite connection string> .venv/bin/python bench/run_cost.py --runs 30
    ... bench/run_cost.py --runs 30 --app-dir /tmp/older-checkout     # another commit's app, same script

Compare two commits by alternating them (``--app-dir`` a ``git worktree`` of the older one): CPU figures
move with the machine's load, storage counts do not.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import re
import secrets
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parents[1]

CALLS: collections.Counter[str] = collections.Counter()
_request = aiohttp.ClientSession._request


async def _counted(self: aiohttp.ClientSession, method: str, url: Any, *args: Any, **kwargs: Any) -> Any:
    """Count one storage request as ``METHOD resource [comp]`` (ids and the account elided)."""
    path, _, query = str(url).partition("?")
    resource = re.sub(r"\(.*", "", path.split("/", 4)[-1])
    resource = re.sub(r"resp_[0-9a-f]+", "<id>", resource)
    comp = re.findall(r"comp=(\w+)", query)
    CALLS[f"{method} {resource}{' ' + comp[0] if comp else ''}"] += 1
    return await _request(self, method, url, *args, **kwargs)


async def main(args: argparse.Namespace) -> None:
    from resilient.agents.research import ResearchAgent
    from resilient.engine.activities import Engine, Tuning
    from resilient.http.service import ResponsesService
    from resilient.settings import Settings
    from resilient.storage.controls import ControlBoard
    from resilient.storage.factory import open_storage
    from resilient.storage.feed import CommittedFeed
    from tests.durable_standin import Durable

    settings = Settings.from_env({"AzureWebJobsStorage": os.environ["AzureWebJobsStorage"],
                                  "RESILIENT_STORAGE_PREFIX": "rc" + secrets.token_hex(4)})
    storage = await open_storage(settings, feed=CommittedFeed(), controls=ControlBoard())
    durable = Durable(Engine(storage, ResearchAgent(settings), settings, Tuning()), timer_scale=0.01)
    service = ResponsesService(storage, durable, settings)
    body = json.dumps({"model": "m", "input": "What makes a streaming service crash resilient?", "background": True,
                       "metadata": {"research_phases": str(args.phases), "words_per_phase": str(args.words),
                                    "delta_delay_ms": "0"}}).encode()

    async def run() -> None:
        result = await service.create(body)
        assert result.status == 200, result.body
        assert (await durable.wait(str(result.body["id"]), 60.0))["status"] == "completed"

    try:
        for _ in range(args.warmup):
            await run()
        CALLS.clear()
        started = time.process_time()
        for _ in range(args.runs):
            await run()
        cpu_ms = (time.process_time() - started) * 1000 / args.runs
        counted = dict(CALLS)
    finally:
        await storage.clients.delete_all()
        await storage.close()
    print(f"{args.app_dir}: {args.runs} runs of {args.phases} phases x {args.words} words")
    print(f"  CPU per run {cpu_ms:.2f} ms; storage requests per run {sum(counted.values()) / args.runs:.2f}:")
    for name, count in sorted(counted.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"    {count / args.runs:6.2f}  {name}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--phases", type=int, default=3)
    parser.add_argument("--words", type=int, default=48)
    parser.add_argument("--app-dir", default=str(ROOT), help="the checkout whose app runs (default: this one)")
    parsed = parser.parse_args()
    sys.path.insert(0, str(Path(parsed.app_dir).resolve()))  # its ``resilient`` and ``tests`` are imported
    aiohttp.ClientSession._request = _counted  # type: ignore[method-assign]
    asyncio.run(main(parsed))
