"""One session per instance: its work items run one after another; consumed messages are deleted,
the rest given back with the abandon back-off."""

from __future__ import annotations

import asyncio

from .core import RuntimeCore, Session
from .episode import Execution
from .messaging import Delivery


class Sessions(RuntimeCore):
    """One session per instance: its work items run one after another; consumed messages are deleted,
    the rest given back with the abandon back-off."""

    async def _session_loop(self, session: Session) -> None:
        renewer = self._spawn(self._renew(lambda: list(session.held.values()), self.config.control_visibility))
        try:
            while session.pending and not self._stopping:
                batch, session.pending = session.pending, []
                try:
                    if session.is_entity:
                        await self._entity_batch(session, batch)
                    else:
                        await self._orchestration_batch(session, batch)
                except asyncio.CancelledError:
                    raise
                except Exception as error:
                    self.log(f"instance {session.instance_id}: work item aborted ({type(error).__name__}: "
                             f"{error}); its messages come back after the abandon back-off")
                    self._unsettle(session)
                    session.history = session.entity = None
                    await self._abandon(session, batch)
        finally:
            renewer.cancel()
            session.task = None
            if not session.held and not session.pending and not self._keep_cached(session):
                self.sessions.pop(session.instance_id, None)

    def _unsettle(self, session: Session) -> None:
        """The episode is abandoned after it sent activities: count them (a re-run sends them again)."""
        self.counters.activity_sends_before_a_failed_checkpoint.update(session.sent_unsettled)
        session.sent_unsettled.clear()

    @staticmethod
    def _keep_cached(session: Session) -> bool:
        if session.is_entity:
            return True
        history = session.history
        if history is None or history.execution_id is None:
            return False
        return Execution(session.instance_id, history.execution_id, history.events, history.state).active

    async def _finish(self, session: Session, deliveries: list[Delivery]) -> None:
        """Delete messages whose effect is committed (or that are dropped)."""
        await asyncio.gather(*(self.queues.delete(d) for d in deliveries), return_exceptions=True)
        for delivery in deliveries:
            session.held.pop(delivery.message_id, None)

    async def _abandon(self, session: Session, deliveries: list[Delivery]) -> None:
        """Give messages back with the abandon back-off; claim them again ourselves when they reappear."""
        for delivery in deliveries:
            session.held.pop(delivery.message_id, None)
            try:
                await self.queues.abandon(delivery)
            except Exception as error:
                self.log(f"abandon failed ({type(error).__name__}); the message reappears after its visibility")
                continue
            if not self._stopping:
                self._claim_later(delivery, "control")
