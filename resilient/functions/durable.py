"""Durable bindings: the orchestrator, the activities and the chain-lock entity, as a blueprint.

Each function is a thin adapter from the Functions trigger to :mod:`resilient.engine`; nothing here is
worth unit-testing on its own except through replay (orchestrator) and the host double (the rest).
"""

from __future__ import annotations

import json
from collections.abc import Generator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from resilient.engine.chain import chainlock
from resilient.engine.heal import unstored
from resilient.engine.orchestration import orchestrator
from resilient.engine.orchestration import terms as terms
from resilient.functions.client import repairer
from resilient.functions.durable_bindings import DurableBlueprint, DurableClient
from resilient.functions.history import ClientHistory
from resilient.functions.runtime import ProcessRuntime
from resilient.telemetry.spans import TRACE_PARENT_KEY, activity_span

if TYPE_CHECKING:
    import azure.durable_functions as df


def _args(payload: Any) -> dict[str, Any]:
    """Activity inputs arrive decoded by the Durable converter; tolerate a JSON string too."""
    if isinstance(payload, str):
        decoded: dict[str, Any] = json.loads(payload)
        return decoded
    return dict(payload)


def durable_blueprint(process: ProcessRuntime) -> DurableBlueprint:
    """The orchestrator, its activities and the chain-lock entity, over ``process``'s workers (built once by
    ``function_app.py``)."""
    bp = DurableBlueprint()

    @bp.orchestration_trigger(context_name="context", orchestration=terms.ORCHESTRATOR)
    def responses_orchestrator(context: df.DurableOrchestrationContext) -> Generator[Any, Any, Any]:
        return (yield from orchestrator.response_orchestrator(context))

    @bp.activity_trigger(input_name="payload", activity=terms.RUN_PHASE)
    async def run_phase(payload: Any) -> dict[str, Any]:
        args = _args(payload)
        return await (await process.engine()).run_phase(str(args["response_id"]), int(args["index"]),
                                                        finalize=bool(args.get("finalize", False)),
                                                        plan=bool(args.get("plan", False)),
                                                        position=_position(args),
                                                        traceparent=args.get(TRACE_PARENT_KEY))

    @bp.activity_trigger(input_name="payload", activity=terms.FINALIZE)
    async def finalize_response(payload: Any) -> dict[str, Any]:
        args = _args(payload)
        traceparent = args.pop(TRACE_PARENT_KEY, None)
        return await (await process.engine()).finalize(str(args["response_id"]), args, traceparent=traceparent)

    @bp.activity_trigger(input_name="payload", activity=terms.MARK_QUEUED)
    async def mark_queued(payload: Any) -> dict[str, Any]:
        args = _args(payload)
        with _span(terms.MARK_QUEUED, args):
            return await (await process.engine()).mark_queued(str(args["response_id"]))

    @bp.activity_trigger(input_name="payload", activity=terms.INSPECT)
    @bp.durable_client_input(client_name="client")
    async def inspect_response(payload: Any, client: str) -> dict[str, Any]:
        """Whether a response's run is over. If it is not, the repair path also checks (throttled) that its
        orchestration is alive: a queued turn inspecting the lock holder thus restarts a dead holder."""
        args = _args(payload)
        with _span(terms.INSPECT, args):
            engine = await process.engine()
            verdict = await engine.inspect(str(args["response_id"]))
            if not verdict.get("over"):
                await repairer(DurableClient(client), engine).nudge(str(args["response_id"]))
            return verdict

    @bp.activity_trigger(input_name="payload", activity=terms.WAKE_NEXT)
    @bp.durable_client_input(client_name="client")
    async def wake_next_turn(payload: Any, client: str) -> dict[str, Any]:
        args = _args(payload)
        next_id = str(args["response_id"])
        with _span(terms.WAKE_NEXT, args):
            await DurableClient(client).get().raise_event(next_id, terms.LOCK_GRANTED_EVENT, {"granted": True})
        return {"woken": next_id}

    @bp.activity_trigger(input_name="payload", activity=terms.FORGET)
    @bp.durable_client_input(client_name="client")
    async def forget_response(payload: Any, client: str) -> dict[str, Any]:
        """store=false: delete the response's data now, and this orchestration's history once it ends."""
        args = _args(payload)
        response_id = str(args["response_id"])
        with _span(terms.FORGET, args):
            engine = await process.engine()
            await unstored.forget(engine.storage, response_id)
        history = ClientHistory(DurableClient(client))
        engine.worker.detached.start(unstored.purge_history_when_done(history, response_id), "history purge")
        return {"forgotten": True}

    @bp.entity_trigger(context_name="context", entity_name=terms.CHAIN_LOCK_ENTITY)
    def chain_lock(context: df.DurableEntityContext) -> None:
        state = chainlock.coerce_state(context.get_state(), context.entity_key)  # None: the initial state
        new_state, answer = chainlock.apply(context.operation_name or "", state, context.get_input())
        context.set_state(new_state)
        context.set_result(answer)

    return bp


def _span(name: str, args: dict[str, Any]) -> AbstractContextManager[Any]:
    """The span of a small activity, in its run's trace when its input carries one."""
    return activity_span(name, str(args["response_id"]), args.get(TRACE_PARENT_KEY))


def _position(args: dict[str, Any]) -> int | None:
    """Where an open plan's step puts its first output item (absent for fixed plans: the phase's index)."""
    found = args.get("position")
    return int(found) if found is not None else None
