"""Storage: Azure Tables (responses, items, checkpoints) and append blobs (the event log).

The engine and the HTTP layer depend only on the Protocols in :mod:`resilient.storage.ports`;
the Azure SDK types stay inside this package.
"""
