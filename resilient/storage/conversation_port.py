"""The storage port of conversations (re-exported by :mod:`resilient.storage.ports`).

A conversation is the chain the service keeps for its turns (:class:`~resilient.storage.ports.ChainStore`)
plus its own row: when it was created, its metadata, and what the Conversations API changed besides its
turns (item batches added to it, items deleted from it). Turn items are never copied: a listing reads the
turns' own input and output items, so a conversation costs nothing per turn.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class ConversationRecord:
    """A conversation's own row; its turns are its chain's. ``batches`` counts the item batches added
    through the API so far; ``deleted`` marks a conversation whose deletion has begun (404 from then on)."""

    conversation_id: str
    created_at: int
    metadata: dict[str, str]
    batches: int
    deleted: bool
    etag: str


@dataclass(frozen=True)
class ConversationEdits:
    """What the API changed in a conversation besides its turns: the added item batches (number, and the
    chain's newest turn when it was added, None before any), by number; the ids of items deleted from it."""

    batches: tuple[tuple[int, str | None], ...]
    hidden: frozenset[str]


class ConversationStore(Protocol):
    async def create(self, conversation_id: str, created_at: int, metadata: dict[str, str],
                     batches: int) -> ConversationRecord:
        """Create the row; raise AlreadyExists if it exists."""
        ...

    async def get(self, conversation_id: str) -> ConversationRecord:
        """Raise NotFound if absent (a row marked deleted is returned: callers decide)."""
        ...

    async def replace(self, record: ConversationRecord, *, metadata: dict[str, str] | None = None,
                      batches: int | None = None, deleted: bool | None = None) -> ConversationRecord:
        """Compare-and-swap on ``record.etag``: PreconditionFailed if raced, NotFound if gone."""
        ...

    async def add_batch(self, conversation_id: str, number: int, after_turn: str | None) -> None:
        """Record item batch ``number`` (its items are in the item store); idempotent."""
        ...

    async def hide_item(self, conversation_id: str, item_id: str) -> None:
        """Mark an item as deleted from the conversation; idempotent."""
        ...

    async def edits(self, conversation_id: str) -> ConversationEdits:
        """The batches and hidden items (one partition read)."""
        ...

    async def delete(self, conversation_id: str) -> None:
        """Remove the row, its batches and hidden marks; idempotent."""
        ...
