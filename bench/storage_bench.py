"""Event-log benchmark against Azurite: storage calls per delta, append rate, tail-replay cost.

Run: ``.venv/bin/python bench/storage_bench.py [--events 10000] [--batch 32] [--repeats 5]``

Per repeat it writes a 10,000-event log (``response.created`` then ``output_text.delta`` events, appended
``--batch`` at a time as a streaming phase would) and a separate 100-event log, then compares, side
by side, replaying the last 100 events of the big log (``starting_after=9899``) with reading the small
log from the start. Goals: ≤ 0.1 storage calls per delta event; last-100-of-10k ≤ 2× a 100-event log.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import statistics
import string
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from resilient.ids import new_response_id
from resilient.settings import Settings
from resilient.storage.controls import ControlBoard
from resilient.storage.eventlog import BlobEventLog
from resilient.storage.factory import Storage, open_storage
from resilient.storage.feed import CommittedFeed

READ_REPS = 15


def created(rid: str) -> dict[str, Any]:
    return {"type": "response.created", "response": {"id": rid, "object": "response", "status": "queued"}}


def delta(n: int) -> dict[str, Any]:
    return {
        "type": "response.output_text.delta",
        "item_id": "msg_" + "0" * 48,
        "output_index": 0,
        "content_index": 0,
        "delta": f"word{n % 97} ",
        "logprobs": [],
        "obfuscation": "aBcD",
    }


async def write_log(log: BlobEventLog, total: int, batch: int) -> tuple[str, int, float]:
    """Write ``total`` events; return (response id, writer storage calls, seconds spent appending)."""
    rid = new_response_id()
    writer = await log.create(rid, [created(rid)])
    n = 1
    started = time.perf_counter()
    while n < total:
        size = min(batch, total - n)
        await writer.append([delta(n + i) for i in range(size)])
        n += size
    return rid, writer.storage_calls, time.perf_counter() - started


async def timed_read(log: BlobEventLog, rid: str, starting_after: int, expect: int) -> tuple[float, int]:
    """Median seconds over READ_REPS reads, and storage calls per read."""
    times: list[float] = []
    calls = 0
    for _ in range(READ_REPS):
        before = log.storage_calls
        started = time.perf_counter()
        result = await log.read_after(rid, starting_after)
        times.append(time.perf_counter() - started)
        calls = log.storage_calls - before
        if len(result.events) != expect:
            raise SystemExit(f"read_after({starting_after}) returned {len(result.events)} events, wanted {expect}")
    return statistics.median(times), calls


async def cleanup(storage: Storage) -> None:
    clients = storage.clients
    for table in (clients.responses_table_name, clients.items_table_name):
        await clients.tables.delete_table(table)
    for container in (clients.events_container_name, clients.spill_container_name):
        await clients.blobs.delete_container(container)


async def main(total: int, batch: int, repeats: int) -> None:
    prefix = "b" + "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))
    conn = os.environ.get("AzureWebJobsStorage") or "UseDevelopmentStorage=true"
    settings = Settings.from_env({"AzureWebJobsStorage": conn, "RESILIENT_STORAGE_PREFIX": prefix})
    storage = await open_storage(settings, feed=CommittedFeed(), controls=ControlBoard())
    log = storage.events
    assert isinstance(log, BlobEventLog)
    rows: list[dict[str, float]] = []
    try:
        for repeat in range(repeats):
            big, big_calls, append_s = await write_log(log, total, batch)
            small, _, _ = await write_log(log, 100, batch)
            tail_s, tail_calls = await timed_read(log, big, total - 101, 100)
            small_s, small_calls = await timed_read(log, small, -1, 100)
            full_s, full_calls = await timed_read(log, big, -1, total)
            row = {
                "calls_per_event": big_calls / total,
                "append_eps": (total - 1) / append_s,
                "tail_ms": tail_s * 1000,
                "small_ms": small_s * 1000,
                "ratio": tail_s / small_s,
                "full_ms": full_s * 1000,
                "tail_calls": tail_calls,
                "small_calls": small_calls,
                "full_calls": full_calls,
                "writer_calls": big_calls,
            }
            rows.append(row)
            print(
                f"repeat {repeat + 1}: {row['calls_per_event']:.4f} calls/event, {row['append_eps']:,.0f} ev/s append, "
                f"last-100-of-{total} {row['tail_ms']:.2f} ms ({tail_calls} calls) vs 100-event log "
                f"{row['small_ms']:.2f} ms ({small_calls} calls), ratio {row['ratio']:.2f}"
            )
    finally:
        await cleanup(storage)
        await storage.close()

    def med(key: str) -> float:
        return statistics.median(r[key] for r in rows)

    print()
    print(f"medians over {repeats} repeats ({total} events, appended {batch} per call; reads: median of {READ_REPS})")
    print(f"  writer storage calls           : {med('writer_calls'):.0f} for {total} events")
    print(f"  storage calls per event        : {med('calls_per_event'):.4f}   (goal <= 0.1)")
    print(f"  append throughput              : {med('append_eps'):,.0f} events/s")
    print(
        f"  replay starting_after={total - 101:<6}: {med('tail_ms'):.2f} ms, "
        f"{100 / (med('tail_ms') / 1000):,.0f} events/s, {med('tail_calls'):.0f} storage calls"
    )
    print(
        f"  replay 100-event log from -1   : {med('small_ms'):.2f} ms, "
        f"{100 / (med('small_ms') / 1000):,.0f} events/s, {med('small_calls'):.0f} storage calls"
    )
    print(f"  ratio last-100 / 100-event log : {med('ratio'):.2f}   (goal <= 2.0)")
    print(
        f"  (context) full replay of {total}: {med('full_ms'):.1f} ms, "
        f"{total / (med('full_ms') / 1000):,.0f} events/s, {med('full_calls'):.0f} storage calls"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.events, args.batch, args.repeats))
