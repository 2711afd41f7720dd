"""The activities: every piece of I/O the orchestration needs, written to be safely re-delivered.

The Durable runtime delivers activities at least once: a worker that dies mid-activity gets its activity
re-delivered to a new worker, and a worker that was only presumed dead may still be running (a zombie).
Each activity therefore reads the durable state first and decides what is left to do:

* ``plan`` (run by the first phase's activity before its phase): persists the plan once; appends
  ``response.in_progress`` only if it is not there yet.
* ``run_phase``: a phase whose checkpoint exists is returned as is (no second stream). A phase that finds
  events after the last checkpoint is a *recovery* (``recovery.py``): it closes the item left open, appends
  ``response.in_progress`` carrying the snapshot as of the last checkpoint (clients drop their partial
  item, rule R4) and re-runs only this phase, as new items at new stream indexes. Non-background
  responses are not re-run but failed (R8). Every append is fenced by the blob's append position, so a
  zombie's next append fails and it stops (R6). The phase's first append (recovery head, item opening,
  first delta together) waits for the agent's first output: only then is the item's type known.
  Agent errors are answers, not exceptions: a permanent one returns ``{"stop": "failed"}``, a transient
  one ``{"retry_after": s}`` (the orchestrator waits on a durable timer and runs the phase again).
* ``finalize`` (run by the plan's last phase when it ends without a stop, else as its own activity): the
  terminal status is decided by an ETag compare-and-swap (R5: a requested cancel wins
  over the outcome, a terminal status already set stays); the terminal event is appended only if the log
  does not end with one already. Then the response leaves the index of unfinished runs that the repair
  path watches.
* ``inspect``: read-only; tells whether a response's run is over (terminal status *and* terminal event).

On the real Functions host a worker that dies does not get its activity re-delivered: the orchestrator
retries it (a new call with the same input), which is the same situation for the activity. A phase stops
at ``Settings.phase_deadline_seconds`` (a minute below the host's ``functionTimeout``, which would restart
the worker) and its run ends ``failed``.

Cancel is atomic to readers: ``POST .../cancel`` only raises the row's cancel flag while the run is
in progress; the run sets ``cancelled`` itself (:meth:`Engine.settle_cancel`) once the phase it stopped
has checkpointed its partial item, so a reader never sees ``cancelled`` without that item.

Where each piece lives: :mod:`~resilient.engine.run.planning` (plan, resumed plan, queued),
:mod:`~resilient.engine.run.phase` (one phase attempt, top-down; the parts it calls are in
:mod:`~resilient.engine.run.phase_record`, :mod:`~resilient.engine.run.claim`,
:mod:`~resilient.engine.run.agent_request` and :mod:`~resilient.engine.run.pump`) and
:mod:`~resilient.engine.run.conclude` (finalize, settle a cancel, inspect); what this process remembers of its
runs is :mod:`~resilient.engine.run.runmemo`. :class:`Engine` is the facade over them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from resilient.agents.base import Agent
from resilient.engine.run import conclude, planning
from resilient.engine.run.agent_request import previous_turn, request_from
from resilient.engine.run.batching import Tuning
from resilient.engine.run.liveness import Liveness
from resilient.engine.run.phase import run_attempt
from resilient.engine.run.runmemo import RunMemo
from resilient.engine.worker_state import WorkerState
from resilient.settings import Settings
from resilient.storage.ports import JsonDict, ResponseRecord
from resilient.telemetry import metrics, spans

if TYPE_CHECKING:
    from resilient.storage.factory import Storage

__all__ = ["Engine", "Tuning"]

log = logging.getLogger("resilient.engine")


class Engine:
    """Activity logic over storage + an agent. One instance per worker process.

    A thin facade: each activity lives in its own module (planning, phase, conclude); this class holds
    what they share, so the bindings and tests see one object with stable names."""

    def __init__(self, storage: Storage, agent: Agent, settings: Settings, tuning: Tuning | None = None,
                 *, worker: WorkerState | None = None) -> None:
        self.storage = storage
        self.agent = agent
        self.settings = settings
        self.tuning = tuning or Tuning.from_settings(settings)
        self.liveness = Liveness()
        self.worker = worker if worker is not None else WorkerState.sharing(storage)  # this process's memory of runs
        self.runs = self.worker.runs

    def remember_created(self, record: ResponseRecord, input_items: Sequence[JsonDict]) -> None:
        """The HTTP layer created this response in this process: its first phase, if it runs here too, need
        not read the row and the input items back (a stale row only loses its CAS). Only for a turn without
        earlier turns and without a resumed plan, whose agent request is then complete."""
        if previous_turn(record) is not None or record.doc.get("resume"):
            return
        self.runs.remember(RunMemo(record, request_from(record, list(input_items), []), []))

    async def plan(self, response_id: str) -> JsonDict:
        """Persist the plan (once) and move the response to ``in_progress``. Returns ``{"phases": n}``."""
        return await planning.plan(self.storage, self.agent, self.worker, response_id, self.settle_cancel)

    async def mark_queued(self, response_id: str) -> JsonDict:
        """Append ``response.queued`` (once) for a turn that waits for its chain's lock."""
        return await planning.mark_queued(self.storage, response_id)

    async def run_phase(self, response_id: str, index: int, *, finalize: bool = False,
                        plan: bool = False, position: int | None = None, traceparent: str | None = None
                        ) -> JsonDict:
        """Stream one phase into the event log and checkpoint its output item(s). Returns a small summary
        (with ``phases``: how many phases this turn's plan has).

        ``index`` counts the phases of this response; a turn that resumes a paused plan starts at the
        plan's ``phase_offset``, so the agent sees ``phase_offset + index``.

        A phase that stops for a cancel settles the cancel itself, right after its partial checkpoint:
        the ``cancelled`` status and the partial output become visible together, without waiting for
        the orchestrator to schedule ``finalize``.

        ``plan`` (the first phase): run :meth:`plan` first, in the same activity. ``finalize``: when this is
        the plan's last phase and it ends without a stop, conclude the run here as :meth:`finalize` with
        ``completed`` would, and say so in the summary (``final``). Each saves the run a Durable hop (an
        orchestrator episode and an activity). Both are idempotent, so a retry of this activity (its worker
        died) plans and concludes again without effect, and finds the phase's checkpoint if it has one; a
        conclusion that fails here is left to the orchestrator's own ``finalize`` step.

        ``position``: where this step's output items start (open plans, whose steps have any number of
        items; the orchestrator adds up the ``items`` of the steps before). Else the phase's own index.

        ``traceparent``: the run's trace context (from the activity's input): the phase's span joins the
        run's trace (:func:`resilient.telemetry.spans.activity_span`).
        """
        attributes = {"phase.index": index, "phase.position": index if position is None else position,
                      "phase.is_recovery": False}
        with spans.activity_span("run_phase", response_id, traceparent, attributes) as span:
            outcome = "error"
            try:
                summary = await self._run_phase(response_id, index, finalize, plan, position)
                outcome = phase_outcome(summary)
                return summary
            finally:
                span.set_attribute("phase.outcome", outcome)
                metrics.PHASES.add(1, {"outcome": outcome})

    async def _run_phase(self, response_id: str, index: int, finalize: bool, plan: bool,
                         position: int | None) -> JsonDict:
        limit = self.settings.phase_deadline_seconds
        deadline = None if limit is None else time.monotonic() + limit  # the host's timeout counts from here
        try:
            if plan:
                planned = await self.plan(response_id)
                if planned.get("stop"):
                    return {"index": index, **planned}
            written: list[JsonDict] = []
            summary = await run_attempt(self, response_id, index, deadline, written, position)
        except BaseException:
            self.worker.feed.expect(response_id, 0)  # its retry comes after a durable timer, maybe elsewhere
            raise
        if summary.get("stop") == "cancelled":
            await self.settle_cancel(response_id)
        elif finalize and not summary.get("stop") and summary.get("retry_after") is None \
                and summary.get("phases") == index + 1:
            try:
                summary["final"] = await self.finalize(response_id, {"status": "completed"}, output=written or None)
            except Exception as exc:  # the orchestrator's finalize step (with its retries) does it instead
                log.warning("finalize after the last phase failed: %s: %s", type(exc).__name__, exc,
                            extra={"response_id": response_id, "phase": index})
        return summary

    async def finalize(self, response_id: str, outcome: JsonDict,
                       output: Sequence[JsonDict] | None = None, *, traceparent: str | None = None) -> JsonDict:
        """Decide the terminal status (CAS) and append the single terminal event (idempotent); see
        :func:`resilient.engine.run.conclude.finalize`."""
        with spans.activity_span("finalize", response_id, traceparent,
                                 {"outcome.status": str(outcome.get("status", "completed"))}) as span:
            final = await conclude.finalize(self.storage, self.worker, response_id, outcome, output)
            span.set_attribute("status", str(final.get("status")))
            return final

    async def inspect(self, response_id: str) -> JsonDict:
        """Whether a response's run is over (terminal status and terminal event); see
        :func:`resilient.engine.run.conclude.inspect`."""
        return await conclude.inspect(self.storage, response_id)

    async def settle_cancel(self, response_id: str) -> None:
        """Set ``cancelled`` once the run has stopped and its output is checkpointed (no-op when a
        terminal status is already set). Finalize still appends the terminal event."""
        await conclude.settle_cancel(self.storage, response_id)


def phase_outcome(summary: JsonDict) -> str:
    """One word for how a phase activity ended (a span attribute and a counter dimension): its stop word,
    ``retry_after`` (the model asked to wait), ``completed`` (it concluded the run) or ``checkpointed``."""
    if summary.get("stop"):
        return str(summary["stop"])
    if summary.get("retry_after") is not None:
        return "retry_after"
    return "completed" if isinstance(summary.get("final"), dict) else "checkpointed"
