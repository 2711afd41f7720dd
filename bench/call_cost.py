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
* ``host double: transaction (2 upserts)``: the same transaction as the host double sends its Durable
  history batches (``tests/hostdouble/durable/batch.py``: the SDK's operations and pipeline, the
  multipart envelope written without the ``email`` package);
* ``host double: upsert`` / ``point read``, ``queue send + delete`` (SDK and host double) and ``empty queue
  receive`` (the SDK's ``receive_messages`` over the double's trimmed pipeline, and the double's): the double's
  single Durable calls (``tests/hostdouble/durable/lean.py``: the SDK's request builders and the pipeline
  policies that change a request, not its per-call wrappers and observing policies), beside the same calls
  through the SDKs' public methods. All ``host double`` rows use the double's own (trimmed) clients, whose
  table and queue calls go through its lean HTTP transport (``tests/hostdouble/durable/transport.py``).

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
from azure.data.tables.aio import TableClient, TableServiceClient
from azure.storage.queue.aio import QueueClient, QueueServiceClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from resilient.ids import new_response_id
from resilient.settings import Settings
from resilient.storage.controls import ControlBoard
from resilient.storage.factory import open_storage
from resilient.storage.feed import CommittedFeed
from tests.hostdouble.durable import lean
from tests.hostdouble.durable.batch import use_lean_transactions

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
    # The double's clients: only the pipeline policies that change a request (lean.trim_*_service).
    double_tables = lean.trim_table_service(
        TableServiceClient.from_connection_string(connection, use_env_settings=False))
    double_table = use_lean_transactions(double_tables.get_table_client(clients.items_table_name))
    double_queues = lean.trim_queue_service(
        QueueServiceClient.from_connection_string(connection, use_env_settings=False))
    double_queue = double_queues.get_queue_client(queue_name)

    async def transaction(client: TableClient = table) -> None:
        pk = f"bench{next(counter)}"
        await client.submit_transaction([
            (TransactionOperation.UPSERT, {"PartitionKey": pk, "RowKey": "i-000000", "body": BODY},
             {"mode": UpdateMode.REPLACE}),
            (TransactionOperation.UPSERT, {"PartitionKey": pk, "RowKey": "n", "count": 1},
             {"mode": UpdateMode.REPLACE})])

    async def lean_transaction() -> None:
        await transaction(double_table)

    async def upsert() -> None:
        await table.upsert_entity({"PartitionKey": f"bench{next(counter)}", "RowKey": "i-000000", "body": BODY},
                                  mode=UpdateMode.REPLACE)

    async def point_read() -> None:
        await table.get_entity("bench0", "i-000000")

    async def append() -> None:
        await blob.append_block(b"x" * 500)

    async def lean_upsert() -> None:
        await lean.write_entity(double_table, {"PartitionKey": f"bench{next(counter)}", "RowKey": "i-000000",
                                               "body": BODY}, mode=UpdateMode.REPLACE)

    async def lean_point_read() -> None:
        await lean.get_entity(double_table, "bench0", "i-000000")

    async def queue_pair() -> None:
        sent = await queue.send_message(BODY, visibility_timeout=30)
        await queue.delete_message(sent.id, sent.pop_receipt)

    async def lean_queue_pair() -> None:
        message_id, receipt = await lean.send_message(double_queue, BODY, 30)
        await lean.delete_message(double_queue, message_id, receipt)

    async def empty_receive() -> None:  # the SDK's public method, over the double's trimmed pipeline
        assert [m async for m in double_queue.receive_messages(max_messages=32, visibility_timeout=30)] == []

    async def lean_empty_receive() -> None:
        assert await lean.receive_messages(double_queue, 32, 30) == []

    async def put_one() -> None:
        await storage.items.put_input_items(new_response_id(), [_item(0)])

    async def put_two() -> None:
        await storage.items.put_input_items(new_response_id(), [_item(0), _item(1)])

    kinds: dict[str, Callable[[], Awaitable[None]]] = {
        "table transaction (2 upserts)": transaction, "table upsert": upsert, "table point read": point_read,
        "blob append (500 B)": append, "put_input_items, 1 item": put_one, "put_input_items, 2 items": put_two,
        "host double: transaction (2 upserts)": lean_transaction,
        "host double: upsert": lean_upsert, "host double: point read": lean_point_read,
        "queue send + delete": queue_pair, "host double: queue send + delete": lean_queue_pair,
        "trimmed SDK: empty queue receive": empty_receive, "host double: empty queue receive": lean_empty_receive,
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
        await asyncio.gather(queue.close(), double_tables.close(), double_queues.close())
        await storage.close()
    print(f"per call, {args.rounds} rounds of {args.calls} calls each, interleaved (median of rounds; min-max)")
    print(f"{'call':40} {'CPU ms':>22} {'wall ms':>22}")
    for name in kinds:
        c, w = cpu[name], wall[name]
        print(f"{name:40} {statistics.median(c):8.2f} ({min(c):5.2f}-{max(c):5.2f}) "
              f"{statistics.median(w):8.2f} ({min(w):5.2f}-{max(w):5.2f})")


if __name__ == "__main__":
    asyncio.run(main())
