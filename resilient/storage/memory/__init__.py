"""An in-memory storage adapter: every port of :mod:`resilient.storage.ports` without Azure.

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
index), ``items`` and ``events``. Build a ``Storage`` with
:func:`resilient.storage.factory.build_storage` over a :class:`MemoryBackend`.
"""

from resilient.storage.memory.backend import MemoryBackend

__all__ = ["MemoryBackend"]
