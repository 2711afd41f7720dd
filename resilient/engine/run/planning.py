"""Planning a turn: persist its plan once and move it to ``in_progress``; queue a turn behind its chain.

``plan`` (run by the first phase's activity before its phase) persists the plan once and appends
``response.in_progress`` only if it is not there yet, so a re-delivered activity changes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from resilient.agents.base import Agent, Phase
from resilient.engine.chain.snapshot import response_object
from resilient.engine.run.agent_request import agent_request
from resilient.engine.run.conclude import ESTIMATED_USAGE_KEY
from resilient.engine.run.phase_record import OPEN_PLAN_KEY
from resilient.engine.run.runmemo import RunMemo
from resilient.engine.worker_state import WorkerState
from resilient.protocol import events as ev
from resilient.storage.errors import InvalidTransition
from resilient.storage.logend import append_at_end
from resilient.storage.ports import ACTIVE_STATUSES, TERMINAL_STATUSES, JsonDict, ResponseRecord

if TYPE_CHECKING:
    from resilient.storage.factory import Storage

log = logging.getLogger("resilient.engine")

MAX_PHASES = 50

SettleCancel = Callable[[str], Awaitable[None]]


async def plan(storage: Storage, agent: Agent, worker: WorkerState, response_id: str,
               settle_cancel: SettleCancel) -> JsonDict:
    """Persist the plan (once) and move the response to ``in_progress``. Returns ``{"phases": n}``."""
    responses = storage.responses
    memo = worker.runs.pop(response_id)
    # The row carries the cancel flag too. A remembered one (the create in this process) may be stale:
    # then its CAS below loses, and the row the transition returns has the flag.
    record = memo.record if memo is not None else await responses.get(response_id)
    if record.status in TERMINAL_STATUSES:
        return {"stop": "cancelled" if record.status == "cancelled" else "failed"}
    if record.cancel_requested:
        await settle_cancel(response_id)
        return {"stop": "cancelled"}
    request = memo.request if memo is not None else None
    kept = ("plan", "phase_offset", "agent_metadata", OPEN_PLAN_KEY, ESTIMATED_USAGE_KEY)
    changes: JsonDict = {key: record.doc[key] for key in kept if key in record.doc}
    if "plan" not in changes:
        changes = await resumed_plan(storage, record) if record.doc.get("resume") else {}
    if "plan" not in changes:
        request = request or await agent_request(storage, record)
        phases = list(await agent.plan(request))
        if not 1 <= len(phases) <= MAX_PHASES:
            raise ValueError(f"an agent plan must have 1..{MAX_PHASES} phases, got {len(phases)}")
        changes = {"plan": [p.to_json() for p in phases], "phase_offset": 0}
        if getattr(agent, "open_plan", False):
            changes[OPEN_PLAN_KEY] = True
        if getattr(agent, "estimates_usage", False):
            changes[ESTIMATED_USAGE_KEY] = True
    planned = changes["plan"][int(changes.get("phase_offset", 0)):]
    try:
        record = await responses.transition(
            response_id, "in_progress", allowed_from=ACTIVE_STATUSES, doc_changes=changes, current=record
        )
    except InvalidTransition:
        return {"stop": "cancelled"}
    if record.cancel_requested:  # raised between the create and this CAS
        await settle_cancel(response_id)
        return {"stop": "cancelled"}
    in_progress = [ev.response_in_progress(response_object(record, []))]

    def opening(last: JsonDict | None) -> list[JsonDict]:
        return in_progress if (last or {}).get("type") in ("response.created", "response.queued") else []

    storage.events.keep_writer(await append_at_end(storage.events, response_id, opening))
    if request is not None and not record.doc.get("agent_metadata"):
        worker.runs.remember(RunMemo(record, request, []))
        worker.expect_next_activity(response_id)
    log.info("planned", extra={"response_id": response_id, "phases": len(planned)})
    return {"phases": len(planned)}


async def resumed_plan(storage: Storage, record: ResponseRecord) -> JsonDict:
    """The plan of a turn that answers an approval request: approved, the paused plan from the paused
    phase on (earlier phases are not run again); denied, one phase that only says so. The paused
    turn's metadata carries over (this turn's own metadata wins), so its knobs still apply."""
    resume = record.doc["resume"]
    paused = await storage.responses.get(str(resume["from"]))
    pause = paused.doc.get("paused") or {}
    metadata = {**(paused.doc.get("agent_metadata") or paused.doc.get("metadata") or {}),
                **(record.doc.get("metadata") or {})}
    if paused.doc.get(ESTIMATED_USAGE_KEY):
        metadata_only: JsonDict = {ESTIMATED_USAGE_KEY: True}
    else:
        metadata_only = {}
    if resume.get("approve"):
        resumed: JsonDict = {**metadata_only, "plan": paused.doc["plan"], "phase_offset": int(pause["phase"]),
                             "agent_metadata": metadata}
        if paused.doc.get(OPEN_PLAN_KEY):  # the steps go on from the paused one, numbered from 0 in this turn
            resumed.update({OPEN_PLAN_KEY: True, "phase_offset": 0})
        return resumed
    denied = Phase("not-approved", f"Say that {pause.get('name', 'the step')} was not approved.")
    return {**metadata_only, "plan": [denied.to_json()], "phase_offset": 0, "agent_metadata": metadata}


async def mark_queued(storage: Storage, response_id: str) -> JsonDict:
    """Append ``response.queued`` (once) for a turn that waits for its chain's lock."""
    record = await storage.responses.get(response_id)
    queued = [ev.response_queued(response_object(record, []))]

    def after_created(last: JsonDict | None) -> list[JsonDict]:
        return queued if (last or {}).get("type") == "response.created" else []

    storage.events.keep_writer(await append_at_end(storage.events, response_id, after_created))
    return {"queued": True}
