"""Control-queue messages this host takes in: queued on their instance's session, claimed when they
become visible, kept invisible while worked on (``RenewUntil``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import timedelta

from .core import RuntimeCore, Session
from .messaging import Delivery, MessageGone, renew_period_s


class Intake(RuntimeCore):
    """Control-queue messages this host takes in: queued on their instance's session, claimed when they
    become visible, kept invisible while worked on (``RenewUntil``)."""

    async def _on_control(self, deliveries: list[Delivery]) -> None:
        for delivery in deliveries:
            self._accept(delivery)

    def _accept(self, delivery: Delivery) -> None:
        """A control-queue message this host now holds: queue it on its instance's session."""
        instance_id = delivery.envelope.instance_id
        partition = self.names.partition_of(instance_id)
        if partition not in self.owned or self._stopping:
            return  # not ours (any more): it reappears after its visibility timeout
        session = self.sessions.get(instance_id)
        if session is None:
            session = self.sessions[instance_id] = Session(instance_id, partition)
        held = session.held.get(delivery.message_id)
        if held is not None:  # the same message again (re-dequeued): keep the newest pop receipt
            held.pop_receipt, held.visible_at = delivery.pop_receipt, delivery.visible_at
            held.dequeue_count = delivery.dequeue_count
            return
        session.held[delivery.message_id] = delivery
        session.pending.append(delivery)
        if session.task is None:
            session.task = self._spawn(self._session_loop(session))

    def _claim_later(self, delivery: Delivery, kind: str) -> None:
        """Claim a message of ours when it becomes visible (a timer, an abandoned message) and dispatch it.

        The claim is an ``update_message`` with the pop receipt we got when sending: if anyone dequeued
        the message meanwhile (our own poller included), the receipt is stale and the claim does nothing.
        """

        async def claim() -> None:
            await asyncio.sleep(max(0.0, delivery.visible_at - time.time()))
            if self._stopping:
                return
            if kind == "control":
                if self.names.partition_of(delivery.envelope.instance_id) not in self.owned:
                    return
                visibility = self.config.control_visibility
            else:
                if len(self.running_activities) >= self.max_activities:
                    return  # the work-item poller takes it when a slot frees up
                visibility = self.config.work_item_visibility
            try:
                await self.queues.update(delivery, visibility.total_seconds())
            except MessageGone:
                return
            except Exception as error:
                self.log(f"claim of a {kind} message failed ({type(error).__name__}); the poller will find it")
                return
            delivery.dequeue_count += 1
            if kind == "control":
                self._accept(delivery)
            else:
                self._start_activity(delivery)

        self._spawn(claim())

    async def _renew(self, deliveries: Callable[[], list[Delivery]], visibility: timedelta) -> None:
        """Keep held messages invisible while we work on them (``RenewUntil``)."""
        period = renew_period_s(visibility)
        while True:
            await asyncio.sleep(period)
            for delivery in deliveries():
                try:
                    await self.queues.update(delivery, visibility.total_seconds())
                except MessageGone:
                    pass
                except Exception as error:
                    self.log(f"renewing a message failed ({type(error).__name__})")
