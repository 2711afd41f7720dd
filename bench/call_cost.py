"""CPU and wall time per storage call, as the app's own clients make them, against Azurite.

Every storage call costs the calling process CPU in the Azure SDK's pipeline and aiohttp, and a table
transaction costs much more than a single entity write: the SDK builds its multipart request and parses
the multipart answer with the standard library's ``email`` package. This prints, per kind of call, the
CPU (``time.process_time``) and wall time per call, the kinds interleaved round by round so the machine's
noise hits all of them alike:

* ``table transaction (2 upserts)``, ``table upsert``, ``table point read``, ``blob append (500 B)``: the
  raw calls, through the clients ``resilient.storage.connection.StorageClients`` builds;
* ``put_input_items, 1 item`` and ``…, 2 items``: the item store's write of a turn's input, the first
  call of every create (one item: one entity write; more: a transaction with the count row);
* ``queue send + delete`` and ``empty queue receive``: the queue calls the host double makes for every
  Durable message, through the SDK's public methods.

    AzureWebJobsStorage=UseDevelopmentStorage=true .venv/bin/python bench/call_cost.py --calls 100 --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from azure.data.tables import TransactionOperation, UpdateMode
from azure.data.tables.aio import TableClient
from azure.storage.queue.aio import QueueClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from resilient.ids import new_response_id
from resilient.settings import Settings
from resilient.storage.controls import ControlBoard
from resilient.storage.factory import open_storage
from resilient.storage.feed import CommittedFeed

BODY = "x" * 300


def _item(n: int) -> dict[str, object]:
    return {"id": f"msg_bench{n:06d}", "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "What does a crash cost a durable run?"}]}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=100, help="calls of each kind per round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    settings = Settings.from_env()
    storage = await open_storage(settings, feed=CommittedFeed(), controls=ControlBoard())
    clients = storage.clients
    table = clients.table(clients.items_table_name)
    container = clients.container(clients.events_container_name)
    blob = container.get_blob_client(f"bench-call-cost-{time.time_ns()}")
    await blob.create_append_blob()
    counter = iter(range(10**9))
    connection = settings.storage_connection_string or "UseDevelopmentStorage=true"
    queue_name = f"bench-call-cost-{time.time_ns()}"
    queue = QueueClient.from_connection_string(connection, queue_name, use_env_settings=False)
    await queue.create_queue()
    async def transaction(client: TableClient = table) -> None:
        pk = f"bench{next(counter)}"
        await client.submit_transaction([
            (TransactionOperation.UPSERT, {"PartitionKey": pk, "RowKey": "i-000000", "body": BODY},
             {"mode": UpdateMode.REPLACE}),
            (TransactionOperation.UPSERT, {"PartitionKey": pk, "RowKey": "n", "count": 1},
             {"mode": UpdateMode.REPLACE})])

    async def upsert() -> None:
        await table.upsert_entity({"PartitionKey": f"bench{next(counter)}", "RowKey": "i-000000", "body": BODY},
                                  mode=UpdateMode.REPLACE)

    async def point_read() -> None:
        await table.get_entity("bench0", "i-000000")

    async def append() -> None:
        await blob.append_block(b"x" * 500)

    async def queue_pair() -> None:
        sent = await queue.send_message(BODY, visibility_timeout=30)
        await queue.delete_message(sent.id, sent.pop_receipt)

    async def empty_receive() -> None:
        assert [m async for m in queue.receive_messages(max_messages=32, visibility_timeout=30)] == []

    async def put_one() -> None:
        await storage.items.put_input_items(new_response_id(), [_item(0)])

    async def put_two() -> None:
        await storage.items.put_input_items(new_response_id(), [_item(0), _item(1)])

    kinds: dict[str, Callable[[], Awaitable[None]]] = {
        "table transaction (2 upserts)": transaction, "table upsert": upsert, "table point read": point_read,
        "blob append (500 B)": append, "put_input_items, 1 item": put_one, "put_input_items, 2 items": put_two,
        "queue send + delete": queue_pair, "empty queue receive": empty_receive,
    }
    await upsert()  # bench0 exists for the point reads
    for call in kinds.values():  # warm the connections and the code paths
        for _ in range(5):
            await call()
    cpu: dict[str, list[float]] = {name: [] for name in kinds}
    wall: dict[str, list[float]] = {name: [] for name in kinds}
    try:
        for _ in range(args.rounds):
            for name, call in kinds.items():
                c0, w0 = time.process_time(), time.perf_counter()
                for _ in range(args.calls):
                    await call()
                cpu[name].append((time.process_time() - c0) * 1000 / args.calls)
                wall[name].append((time.perf_counter() - w0) * 1000 / args.calls)
    finally:
        await blob.delete_blob()
        await queue.delete_queue()
        await queue.close()
        await storage.close()
    print(f"per call, {args.rounds} rounds of {args.calls} calls each, interleaved (median of rounds; min-max)")
    print(f"{'call':40} {'CPU ms':>22} {'wall ms':>22}")
    for name in kinds:
        c, w = cpu[name], wall[name]
        print(f"{name:40} {statistics.median(c):8.2f} ({min(c):5.2f}-{max(c):5.2f}) "
              f"{statistics.median(w):8.2f} ({min(w):5.2f}-{max(w):5.2f})")


if __name__ == "__main__":
    asyncio.run(main())
