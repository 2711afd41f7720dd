"""The output pump of a phase: the agent's outputs into the event log, under the phase deadline."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from resilient.agents.base import AgentError, PhaseContext, PhaseOutput, SaveProgress
from resilient.engine.run.batching import Appender, ControlPoller, Tuning
from resilient.engine.run.claim import Claim
from resilient.engine.run.phase_items import AgentOutputError, PhaseItems
from resilient.engine.run.shutdown import Shutdown
from resilient.engine.worker_state import WorkerState
from resilient.storage.ports import ResponseStore

log = logging.getLogger("resilient.engine")

PENDING_SETTLE_S = 1.0
# The agent's next output is asked for in a task started eagerly (asyncio's eager start: it runs at once up
# to its first wait). Why: a task per output keeps the phase deadline and the outer task's cancellation
# robust against an agent that hangs or swallows a cancellation (the wait for it is bounded, the task is
# abandoned), while an output the agent has ready costs no scheduled task and no event loop turn. After this
# many outputs in a row that came without a wait, the phase yields to the event loop once, so an agent that
# never waits cannot hold off the process's other work (appends, readers, requests).
EAGER_OUTPUTS_BEFORE_A_YIELD = 32
_start_eagerly = asyncio.create_eager_task_factory(asyncio.Task)


@dataclass
class PumpEnd:
    """How the pump stopped: early on the control flags, on the agent's error, or past the deadline (none
    of these: the agent finished, or paused the turn with an approval request)."""

    stopped: bool = False
    failure: Exception | None = None
    overtime: bool = False


async def stream(
    responses: ResponseStore, tuning: Tuning, worker: WorkerState, response_id: str, claim: Claim,
    context: PhaseContext, items: PhaseItems, source: AsyncIterator[PhaseOutput], deadline: float | None = None,
    keep: Callable[[Any], Awaitable[None]] | None = None,
) -> tuple[bool, Exception | None, bool, Appender]:
    """Pump the agent's outputs into the log through an :class:`Appender` over the claim: the outputs the
    agent has ready go into the first append, which claims the log as soon as the agent waits; the rest are
    group-committed (:mod:`resilient.engine.run.batching`). The control flags are refreshed in the
    background.

    ``keep`` writes a :class:`SaveProgress` durably; the agent's next output is asked for only after it.

    Returns (stopped early, the agent's error if it failed, ran past ``deadline``, the appender with the
    events still waiting: the caller finishes it with the phase's closing events, in one append).
    """
    appender = Appender(claim, tuning, load=worker.feed)
    control = ControlPoller(responses, response_id, context, tuning.control_interval_s, load=worker.feed,
                            controls=worker.controls)
    outputs = AgentOutputs(source)
    control.start()
    worker.shutdown.enter()
    try:
        end = await _pump(outputs, appender, control, worker.shutdown, context, items, deadline, keep)
    except BaseException:
        appender.cancel()
        raise
    finally:
        worker.shutdown.leave()
        await control.stop()
        await outputs.close()
    return end.stopped, end.failure, end.overtime, appender


async def _pump(outputs: AgentOutputs, appender: Appender, control: ControlPoller, shutdown: Shutdown,
                context: PhaseContext, items: PhaseItems, deadline: float | None,
                keep: Callable[[Any], Awaitable[None]] | None) -> PumpEnd:
    """The loop: ask for an output, turn it into events, hand them to the appender, until an end."""
    while True:
        if shutdown.requested:
            context.shutting_down = True
        if context.should_stop:
            return PumpEnd(stopped=True)
        if not await outputs.ask() and not appender.opened:
            await appender.open()  # the agent waits: the outputs it had ready claim the log meanwhile
        if not await outputs.wait(deadline):
            return PumpEnd(overtime=True)
        try:
            output = outputs.take()
        except StopAsyncIteration:
            return PumpEnd(stopped=context.should_stop)  # the agent saw the flags first and ended early
        except (AgentError, AgentOutputError) as exc:
            return PumpEnd(failure=exc)
        control.raise_if_failed()
        try:
            appender.add(items.feed(output))
        except AgentOutputError as exc:
            return PumpEnd(failure=exc)
        if isinstance(output, SaveProgress) or (appender.full and not appender.opened):
            # progress is kept only by an attempt that holds the log (its claim landed): one that lost the
            # log to another delivery of the step must not write the step's progress
            await appender.open()
        if isinstance(output, SaveProgress):
            if keep is not None:
                await keep(output.value)
            output.saved.set()
        if items.paused:
            return PumpEnd()  # an approval request ends the phase: nothing after it runs
        if deadline is not None and time.monotonic() >= deadline:
            return PumpEnd(overtime=True)


class AgentOutputs:
    """The agent's outputs, each asked for in a task started eagerly (see
    :data:`EAGER_OUTPUTS_BEFORE_A_YIELD`), waited for within the phase deadline."""

    def __init__(self, source: AsyncIterator[PhaseOutput]) -> None:
        self._outputs = aiter(source)
        self._loop = asyncio.get_running_loop()
        self._pending: asyncio.Future[PhaseOutput] | None = None
        self._ready_in_a_row = 0

    async def ask(self) -> bool:
        """Ask for the next output. True when it was ready at once (no event loop turn spent on it, but
        one every :data:`EAGER_OUTPUTS_BEFORE_A_YIELD` such outputs); False when the agent waits."""
        self._pending = _start_eagerly(self._loop, _next_output(self._outputs))
        if not self._pending.done():
            self._ready_in_a_row = 0
            return False
        self._ready_in_a_row += 1
        if self._ready_in_a_row % EAGER_OUTPUTS_BEFORE_A_YIELD == 0:
            await asyncio.sleep(0)
        return True

    async def wait(self, deadline: float | None) -> bool:
        """Wait for the output asked for until ``deadline``. False when it did not come in time."""
        assert self._pending is not None
        if not self._pending.done():
            left = None if deadline is None else deadline - time.monotonic()
            if left is None:
                await asyncio.wait({self._pending})
            elif left > 0:
                await asyncio.wait({self._pending}, timeout=left)
        return self._pending.done()

    def take(self) -> PhaseOutput:
        """The output that came (or raise what the agent raised: ``StopAsyncIteration`` when it is done)."""
        assert self._pending is not None
        pending, self._pending = self._pending, None
        return pending.result()

    async def close(self) -> None:
        """Abandon an output still asked for, then close the agent's generator."""
        pending = self._pending
        if pending is not None:
            # Let a cancelled ``anext`` settle (bounded: an agent may swallow the cancellation), so the
            # generator is no longer running when it is closed; retrieve its outcome (no "exception was
            # never retrieved" noise).
            pending.cancel()
            await asyncio.wait({pending}, timeout=PENDING_SETTLE_S)
            if pending.done() and not pending.cancelled():
                pending.exception()
        closer = getattr(self._outputs, "aclose", None)
        if closer is not None:
            try:
                await closer()  # runs the agent's finally blocks: a model stream is closed here
            except Exception:  # an agent's cleanup error must not lose the phase
                log.exception("agent generator close failed")


async def _next_output(outputs: AsyncIterator[PhaseOutput]) -> PhaseOutput:
    """The agent's next output, as a coroutine (what a task runs; ``anext`` may return another awaitable)."""
    return await anext(outputs)
