"""Queue messages of the task hub: the envelope, sending, receiving, renewing, abandoning, polling.

Semantics follow DurableTask.AzureStorage (``TaskHubQueue``, ``ControlQueue``, ``WorkItemQueue``,
``BackoffPollingHelper``):

* a received message is invisible for the queue's visibility timeout; whoever holds it renews it while it
  works on it (``RenewUntil``: every ``clamp(visibility - 30 s, 5 s, 30 s)``), deletes it when done, or
  *abandons* it: makes it visible again after ``min(2^DequeueCount, 600)`` s;
* an idle queue is polled with a randomized exponential back-off from 50 ms up to
  ``maxQueuePollingInterval``; finding messages resets it.

One shortcut, documented in the README: a message this host sends to a queue it serves itself is sent
already invisible (for that queue's visibility timeout) and handed to the local dispatcher with its pop
receipt, instead of being sent visible and dequeued by the next poll. That is the same state the real
backend reaches ~50 ms later (it wakes its own poller on every local send), one storage call cheaper;
if this host dies, the message reappears after the visibility timeout exactly like a dequeued one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from azure.core.exceptions import HttpResponseError, ResourceNotFoundError

from .store import Storage

MAX_INLINE_CHARS = 45_000  # a queue message holds 64 KiB; DTFx moves larger payloads to a blob
MAX_VISIBILITY_S = 6 * 24 * 3600.0  # below the queue's 7-day limit (longer timers are re-sent)
MIN_POLL_S = 0.05


class MessageGone(Exception):
    """The message was deleted, or someone else dequeued it since (our pop receipt is stale)."""


@dataclass
class Envelope:
    """What a queue message carries: the history event for one instance (as the SDK wants it)."""

    instance_id: str
    event: dict[str, Any]
    execution_id: str | None = None
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    episode: int | None = None
    held: bool = False  # sent already invisible, held by its sender: that counts as its first dequeue

    def to_json(self) -> str:
        return json.dumps({"id": self.id, "i": self.instance_id, "x": self.execution_id, "e": self.event,
                           "ep": self.episode, "h": self.held}, separators=(",", ":"))

    @staticmethod
    def from_json(text: str) -> Envelope:
        data = json.loads(text)
        return Envelope(instance_id=data["i"], event=data["e"], execution_id=data.get("x"), id=data["id"],
                        episode=data.get("ep"), held=bool(data.get("h")))


@dataclass
class Delivery:
    """A message this host holds: invisible to others until ``visible_at`` (wall clock) unless renewed."""

    queue: str
    message_id: str
    pop_receipt: str
    dequeue_count: int
    envelope: Envelope
    visible_at: float

    @property
    def abandon_delay_s(self) -> float:
        """``TaskHubQueue.AbandonMessageAsync``: ``min(2^DequeueCount, 600)`` seconds."""
        count = max(1, self.dequeue_count)
        return float(600 if count > 30 else min(2 ** count, 600))


def renew_period_s(visibility: timedelta) -> float:
    """How often a held message is renewed (``TaskOrchestrationDispatcher.RenewUntil``)."""
    return min(30.0, max(5.0, visibility.total_seconds() - 30.0))


class Queues:
    """Counted queue operations on the task hub's queues."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.calls = storage.calls
        self._clients: dict[str, Any] = {}

    def _client(self, queue: str) -> Any:
        client = self._clients.get(queue)
        if client is None:
            client = self._clients[queue] = self.storage.queues.get_queue_client(queue)
        return client

    async def _encode(self, envelope: Envelope) -> str:
        text = envelope.to_json()
        if len(text) <= MAX_INLINE_CHARS:
            return text
        blob = await self.storage.put_large(envelope.instance_id, "message", text)
        return json.dumps({"blob": blob})

    async def _decode(self, text: str) -> Envelope:
        data = json.loads(text)
        if "blob" in data:
            return Envelope.from_json(await self.storage.get_large(data["blob"]))
        return Envelope.from_json(text)

    async def send(self, queue: str, envelope: Envelope, visibility_s: float = 0.0, *,
                   held: bool = False) -> Delivery:
        """Send a message that becomes visible after ``visibility_s`` (0: at once).

        The returned delivery carries the pop receipt, so the sender can later claim the message
        (:meth:`update`) without dequeuing it: a timer at its fire time, or (``held``) a message sent to
        ourselves with the queue's visibility timeout, held by us from the start (see the module docstring).
        A held message counts as dequeued once, as it would be on the real backend ~50 ms after sending.
        """
        envelope.held = held
        content = await self._encode(envelope)
        visibility = math.ceil(min(max(0.0, visibility_s), MAX_VISIBILITY_S))
        self.calls.add("queue.send")
        sent = await self._client(queue).send_message(content, visibility_timeout=visibility or None)
        return Delivery(queue, sent.id, sent.pop_receipt, int(held), envelope, time.time() + visibility)

    async def receive(self, queue: str, count: int, visibility: timedelta) -> list[Delivery]:
        self.calls.add("queue.receive")
        seconds = max(1, int(visibility.total_seconds()))
        pages = self._client(queue).receive_messages(messages_per_page=max(1, min(32, count)),
                                                     visibility_timeout=seconds).by_page()
        page = await anext(pages, None)  # the first page only: one GET, as DTFx (an empty queue ends the pager)
        messages = [message async for message in page] if page is not None else []
        deliveries = []
        for message in messages:
            try:
                envelope = await self._decode(message.content)
            except Exception:  # a message the double cannot read: leave it for a later look, like DTFx
                continue
            count = (message.dequeue_count or 1) + int(envelope.held)
            deliveries.append(Delivery(queue, message.id, message.pop_receipt, count, envelope, time.time() + seconds))
        return deliveries

    async def update(self, delivery: Delivery, visibility_s: float) -> None:
        """Renew (or abandon, or claim) a held message: it stays invisible for ``visibility_s`` more."""
        self.calls.add("queue.update")
        try:
            receipt = await self._client(delivery.queue).update_message(
                delivery.message_id, delivery.pop_receipt, visibility_timeout=round(max(0.0, visibility_s)))
        except ResourceNotFoundError as error:
            raise MessageGone(delivery.message_id) from error
        except HttpResponseError as error:
            if error.status_code in (400, 404):  # 400: pop receipt no longer matches
                raise MessageGone(delivery.message_id) from error
            raise
        delivery.pop_receipt = receipt.pop_receipt
        delivery.visible_at = time.time() + visibility_s

    async def delete(self, delivery: Delivery) -> None:
        self.calls.add("queue.delete")
        try:
            await self._client(delivery.queue).delete_message(delivery.message_id, delivery.pop_receipt)
        except ResourceNotFoundError:
            pass
        except HttpResponseError as error:
            if error.status_code not in (400, 404):
                raise

    async def abandon(self, delivery: Delivery) -> float:
        """Make a held message visible again after the abandon back-off; returns that delay."""
        delay = delivery.abandon_delay_s
        with contextlib.suppress(MessageGone):
            await self.update(delivery, delay)
        return delay


class Poller:
    """Polls one queue with DTFx's back-off and hands what it finds to ``handler``.

    ``fetch_limit()`` says how many messages the handler can take now (0 = do not poll: e.g. every
    activity slot is busy).
    """

    def __init__(self, queues: Queues, queue: str, visibility: timedelta, max_interval: timedelta,
                 handler: Callable[[list[Delivery]], Awaitable[None]], log: Callable[[str], None],
                 fetch_limit: Callable[[], int] = lambda: 32) -> None:
        self.queues = queues
        self.queue = queue
        self.visibility = visibility
        self.max_interval = max_interval.total_seconds()
        self.handler = handler
        self.log = log
        self.fetch_limit = fetch_limit
        self._wake = asyncio.Event()
        self.fetching = 0
        self._interval = MIN_POLL_S
        self._exponent = 0
        self._failing = False

    def wake(self) -> None:
        """Poll now (something may have arrived), and restart the back-off from 50 ms."""
        self._wake.set()

    def _grow(self) -> None:
        """``RandomizedExponentialBackoffStrategy.UpdateDelay(false)``."""
        if self._interval >= self.max_interval:
            return
        increment = random.uniform(0.8, 1.2) * (2 ** max(0, self._exponent - 1)) * MIN_POLL_S
        candidate = MIN_POLL_S + (increment if self._exponent > 0 else 0.0)
        if candidate < self.max_interval:
            self._interval = candidate
            self._exponent += 1
        else:
            self._interval = self.max_interval

    async def _wait(self) -> None:
        delay = self._interval
        if delay >= self.max_interval:
            # At the ceiling, wake on a wall-clock grid of that interval: every idle queue of this host is
            # polled in the same instant, one after the other, which halves the CPU per call (measured:
            # ~1 ms instead of ~2 ms for calls spread out), and no queue waits longer than the interval.
            delay = self.max_interval - (time.time() % self.max_interval)
        try:
            await asyncio.wait_for(self._wake.wait(), delay)
            signaled = True
        except TimeoutError:
            signaled = False
        self._wake.clear()
        if signaled:
            self._interval, self._exponent = MIN_POLL_S, 1
        else:
            self._grow()

    async def run(self) -> None:
        while True:
            limit = self.fetch_limit()
            if limit <= 0:
                await self._wait()
                continue
            self.fetching = min(32, limit)  # the slots this fetch may fill (see DurableRuntime._send)
            try:
                found = await self.queues.receive(self.queue, limit, self.visibility)
                if self._failing:
                    self.log(f"queue {self.queue}: reachable again")
                    self._failing = False
            except asyncio.CancelledError:
                raise
            except Exception as error:  # storage down: keep polling with the back-off, like DTFx
                if not self._failing:
                    self.log(f"queue {self.queue}: polling failed ({type(error).__name__}); backing off")
                    self._failing = True
                found = []
            finally:
                self.fetching = 0
            if not found:
                await self._wait()
                continue
            self._interval, self._exponent = MIN_POLL_S, 1
            await self.handler(found)
