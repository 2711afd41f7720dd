"""Storage errors the engine and the HTTP layer understand, free of Azure SDK types."""

from __future__ import annotations


class StorageError(Exception):
    """Base class."""


class NotFound(StorageError):
    """The response, item or log does not exist (or was deleted)."""


class AlreadyExists(StorageError):
    """Create-if-absent found an existing record."""


class PreconditionFailed(StorageError):
    """An ETag compare-and-swap lost: somebody else changed the record first."""


class InvalidTransition(StorageError):
    """A status transition is not allowed from the record's current status."""

    def __init__(self, current_status: str, wanted: str) -> None:
        self.current_status = current_status
        self.wanted = wanted
        super().__init__(f"cannot move from {current_status!r} to {wanted!r}")


class LostOwnership(StorageError):
    """An event-log writer's expected append position is stale: another writer appended since.

    The writer must stop; it appended nothing in the failed call (fencing, rule R6).
    """


class StorageUnavailable(StorageError):
    """Storage could not be reached after the SDK's retries; the HTTP layer answers 503 + Retry-After."""
