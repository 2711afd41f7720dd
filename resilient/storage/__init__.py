"""Storage: Azure Tables (responses, items, checkpoints) and append blobs (the event log).

The engine and the HTTP layer depend only on the Protocols in :mod:`resilient.storage.ports`;
the Azure SDK types stay inside this package.

Modules: ``ports`` (Protocols, records), ``errors``, ``connection`` (clients from settings, SDK retry
policy, transport-fault mapping), ``spill`` (large JSON to blobs), ``responses`` and ``items`` (Tables),
``logformat``, ``eventwriter``, ``eventreader`` and ``eventlog`` (the append-blob event log), ``cas`` and
``logend`` (the retry loops of a row's compare-and-swap and of an append at the end of a log), ``factory``
(``open_storage``).
The tests keep the same ports in memory (``tests/memory_storage``).
"""
