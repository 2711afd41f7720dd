"""An in-memory storage adapter for the tests: every port of :mod:`resilient.storage.ports` without Azure.

It lives with the tests because nothing in the service runs on it: the app always opens Azure clients
(:func:`resilient.storage.factory.open_storage`).

Why: most engine and service tests exercise the engine's decisions, not storage; over Azurite each of
them pays real round trips. These stores keep the adapters' *semantics* (ETag compare-and-swap with
``PreconditionFailed``, ``NotFound``, create-if-absent, fenced appends raising ``LostOwnership``, the
committed feed, paging with ``after``/``limit``/``order``, idempotent deletes) and the same contract tests
run against them and against Azurite (``tests/integration``). What they do not model: the wire (faults,
latency, SDK retries), spilling, table transaction limits beyond their ``ValueError``, log segments and
the offset index, and round-trip counts beyond one per call.

Every call yields to the event loop once before it acts (as a request would), then acts atomically, so
racing callers interleave as they do against a real service.

Modules: ``backend`` (the shared state, i.e. "the storage account"), ``rows`` (responses, chains, active
index), ``items``, ``conversations`` and ``events``. Build a ``Storage`` with :func:`build_memory_storage`
over a :class:`MemoryBackend`; building twice over one backend plays two processes.
"""

from __future__ import annotations

from resilient.storage.connection import StorageClients
from resilient.storage.controls import ControlBoard
from resilient.storage.factory import Storage, build_storage
from resilient.storage.feed import CommittedFeed
from tests.memory_storage.backend import MemoryBackend
from tests.memory_storage.conversations import MemoryConversationStore
from tests.memory_storage.events import MemoryEventLog
from tests.memory_storage.items import MemoryItemStore
from tests.memory_storage.rows import MemoryActiveIndex, MemoryChainStore, MemoryResponseStore

__all__ = ["MemoryBackend", "build_memory_storage", "storage_over"]


def build_memory_storage(backend: MemoryBackend, *, feed: CommittedFeed, controls: ControlBoard) -> Storage:
    """The in-memory stores over ``backend``, reporting to this "process's" feed and control board. The
    memory event log keeps its own writers: each ``Storage`` built plays one process."""
    return Storage(
        responses=MemoryResponseStore(backend, controls=controls),
        items=MemoryItemStore(backend),
        events=MemoryEventLog(backend, feed=feed),
        chains=MemoryChainStore(backend),
        active=MemoryActiveIndex(backend),
        conversations=MemoryConversationStore(backend),
        clients=backend,
        feed=feed,
        controls=controls,
    )


def storage_over(clients: StorageClients | MemoryBackend, *, feed: CommittedFeed, controls: ControlBoard) -> Storage:
    """Stores over the Azure clients or the memory backend another ``Storage`` was built over."""
    if isinstance(clients, MemoryBackend):
        return build_memory_storage(clients, feed=feed, controls=controls)
    return build_storage(clients, feed=feed, controls=controls)
