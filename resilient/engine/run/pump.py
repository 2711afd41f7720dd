"""The output pump of a phase: the agent's outputs into the event log, under the phase deadline."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from resilient.agents.base import AgentError, PhaseContext, PhaseOutput, SaveProgress
from resilient.engine.run.batching import Appender, ControlPoller, Tuning
from resilient.engine.run.claim import Claim
from resilient.engine.run.phase_items import AgentOutputError, PhaseItems
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


async def stream(
    responses: ResponseStore, tuning: Tuning, caches: WorkerState, response_id: str, claim: Claim,
    context: PhaseContext, items: PhaseItems, source: AsyncIterator[PhaseOutput], deadline: float | None = None,
    keep: Callable[[Any], Awaitable[None]] | None = None,
) -> tuple[bool, Exception | None, bool, Appender]:
    """Pump the agent's outputs into the log: the first output claims the log at once, the rest go
    through group-committed appends (:mod:`resilient.engine.run.batching`); the control flags are
    refreshed in the background.

    ``keep`` writes a :class:`SaveProgress` durably; the agent's next output is asked for only after it.

    Returns (stopped early, the agent's error if it failed, ran past ``deadline``, the appender with the
    events still waiting: the caller finishes it with the phase's closing events).
    """
    appender = Appender(claim, tuning, load=caches.feed)
    control = ControlPoller(responses, response_id, context, tuning.control_interval_s, load=caches.feed,
                            controls=caches.controls)
    outputs = aiter(source)
    pending: asyncio.Future[PhaseOutput] | None = None
    stopped = overtime = False
    failure: Exception | None = None
    control.start()
    loop = asyncio.get_running_loop()
    ready_in_a_row = 0
    shutdown = caches.shutdown
    shutdown.enter()
    try:
        while True:
            if shutdown.requested:
                context.shutting_down = True
            if context.should_stop:
                stopped = True
                break
            pending = _start_eagerly(loop, _next_output(outputs))
            if pending.done():  # the output was ready: no event loop turn spent on it
                ready_in_a_row += 1
                if ready_in_a_row % EAGER_OUTPUTS_BEFORE_A_YIELD == 0:
                    await asyncio.sleep(0)
            else:
                ready_in_a_row = 0  # the agent waits: the loop turns anyway
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left > 0:
                    await asyncio.wait({pending}, timeout=left)
                elif left is None:
                    await asyncio.wait({pending})
            if not pending.done():
                overtime = True
                break
            try:
                output = pending.result()
            except StopAsyncIteration:
                pending = None
                stopped = context.should_stop  # the agent saw the flags first and ended the phase early
                break
            except (AgentError, AgentOutputError) as exc:
                pending, failure = None, exc
                break
            pending = None
            control.raise_if_failed()
            try:
                events = items.feed(output)
            except AgentOutputError as exc:
                failure = exc
                break
            if isinstance(output, SaveProgress):
                if keep is not None:
                    await keep(output.value)
                output.saved.set()
            if events and not claim.appended:
                await claim.append(events)  # the first output claims the log at once
            else:
                for event in events:
                    appender.add(event)
            if items.paused:
                break  # an approval request ends the phase: nothing after it runs
            if deadline is not None and time.monotonic() >= deadline:
                overtime = True
                break
    except BaseException:
        appender.cancel()
        raise
    finally:
        shutdown.leave()
        await control.stop()
        if pending is not None:
            # Let a cancelled ``anext`` settle (bounded: an agent may swallow the cancellation), so the
            # generator is no longer running when it is closed; retrieve its outcome (no "exception was
            # never retrieved" noise).
            pending.cancel()
            await asyncio.wait({pending}, timeout=PENDING_SETTLE_S)
            if pending.done() and not pending.cancelled():
                pending.exception()
        closer = getattr(outputs, "aclose", None)
        if closer is not None:
            try:
                await closer()  # runs the agent's finally blocks: a model stream is closed here
            except Exception:  # an agent's cleanup error must not lose the phase
                log.exception("agent generator close failed")
    return stopped, failure, overtime, appender


async def _next_output(outputs: AsyncIterator[PhaseOutput]) -> PhaseOutput:
    """The agent's next output, as a coroutine (what a task runs; ``anext`` may return another awaitable)."""
    return await anext(outputs)
