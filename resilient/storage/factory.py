"""One call from settings to the three stores: :func:`open_storage` returns a :class:`Storage`.

Why a bundle: the engine and the HTTP layer need all three stores over the same clients (one
transport, one credential); whoever opens it closes it. The tables and containers are created at
most once per process and storage location, not on every open (cold-start cost, and a create per
request would be a wasted round trip): the caller passes the set of locations created so far (the
process's, kept by :mod:`resilient.functions.runtime`), or none to create them now.

:func:`build_storage` wires the stores over clients opened elsewhere. The tests keep an in-memory adapter of
the same ports (``tests/memory_storage``), which builds a :class:`Storage` of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import TracebackType
from typing import Protocol, Self

from resilient.settings import Settings
from resilient.storage.active import TableActiveIndex
from resilient.storage.chains import TableChainStore
from resilient.storage.connection import RetryConfig, StorageClients
from resilient.storage.controls import ControlBoard
from resilient.storage.conversations import TableConversationStore
from resilient.storage.eventlog import BlobEventLog
from resilient.storage.feed import CommittedFeed
from resilient.storage.items import TableItemStore
from resilient.storage.kept import KeptWriters
from resilient.storage.ports import ActiveIndex, ChainStore, ConversationStore, EventLog, ItemStore, ResponseStore
from resilient.storage.responses import TableResponseStore
from resilient.storage.spill import JsonSpill

CreatedLocations = set[tuple[str, str]]


class SharedClients(Protocol):
    """What the stores of one :class:`Storage` share and close together: the Azure clients
    (:class:`StorageClients`), or a test adapter's stand-in for the storage account."""

    async def close(self) -> None: ...


@dataclass
class Storage:
    """The stores the engine and the HTTP layer program against, plus the clients they share, and the
    process-local feed and control board the stores report to (the worker's, see
    :class:`~resilient.engine.worker_state.WorkerState`)."""

    responses: ResponseStore
    items: ItemStore
    events: EventLog
    chains: ChainStore
    active: ActiveIndex
    conversations: ConversationStore
    clients: SharedClients = field(repr=False)
    feed: CommittedFeed = field(repr=False)
    controls: ControlBoard = field(repr=False)

    async def close(self) -> None:
        await self.clients.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


def build_storage(clients: StorageClients, *, feed: CommittedFeed, controls: ControlBoard,
                  kept: KeptWriters | None = None) -> Storage:
    """Wire the Azure-backed stores over ``clients`` (no I/O), reporting to this process's caches: the feed
    readers here follow, the control board running phases here watch, and the kept writers."""
    spill = JsonSpill(clients.container(clients.spill_container_name))
    return Storage(
        responses=TableResponseStore(clients.table(clients.responses_table_name), spill, controls=controls),
        items=TableItemStore(clients.table(clients.items_table_name), spill),
        events=BlobEventLog(clients.container(clients.events_container_name), feed=feed, kept=kept),
        chains=TableChainStore(clients.table(clients.chains_table_name)),
        active=TableActiveIndex(clients.table(clients.active_table_name)),
        conversations=TableConversationStore(clients.table(clients.chains_table_name)),
        clients=clients,
        feed=feed,
        controls=controls,
    )


def _location(settings: Settings) -> tuple[str, str]:
    where = (
        settings.storage_connection_string
        or settings.blob_service_uri
        or settings.table_service_uri
        or settings.storage_account_name
        or ""
    )
    return where, settings.storage_prefix


async def open_storage(settings: Settings, *, feed: CommittedFeed, controls: ControlBoard,
                       retry: RetryConfig | None = None, kept: KeptWriters | None = None,
                       created: CreatedLocations | None = None) -> Storage:
    """Open clients for ``settings``, create the tables and containers unless ``created`` (the locations
    created in this process so far) names this one, and return the stores (over the process-local caches
    given, see :func:`build_storage`).

    The caller owns the result (``await storage.close()`` or ``async with``); clients are bound to
    the running event loop, so open one per loop.
    """
    clients = StorageClients(settings, retry=retry)
    key = _location(settings)
    try:
        if created is None or key not in created:  # two racing first opens both create: harmless (idempotent)
            await clients.ensure_created()
            if created is not None:
                created.add(key)
    except BaseException:
        await clients.close()
        raise
    return build_storage(clients, feed=feed, controls=controls, kept=kept)
