"""One run is one connected trace, and the counters count: the REAL orchestrator (in the Durable stand-in)
over the engine and the service, against Azurite, with the OpenTelemetry SDK's in-memory exporter.

The stand-in runs each activity the way the bindings do (``resilient/functions/durable.py``: the input's
``traceparent`` goes to the engine) and, as on a real host, without the request's context around it: the
activity spans join the run's trace only through the propagated ``traceparent``.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import ReadableSpan

from resilient.agents.base import PhaseContext
from resilient.agents.research import ResearchAgent
from resilient.engine.activities import Engine, Tuning
from resilient.engine.heal.repair import Repairer, RepairPolicy, Throttle
from resilient.engine.orchestration import orchestrator as orch
from resilient.http.service import ResponsesService
from resilient.http.traced import traced
from resilient.settings import Settings
from resilient.storage.controls import ControlBoard
from resilient.storage.factory import Storage, open_storage
from resilient.storage.feed import CommittedFeed
from resilient.telemetry import setup
from tests.durable_standin import Durable
from tests.telemetry_kit import counter, memory, of_run

pytestmark = pytest.mark.azurite

WAIT_S = 60.0


class TracedDurable(Durable):
    """The stand-in, passing each activity's ``traceparent`` on as the bindings do, in a context of its own."""

    async def _run(self, name: str, rid: str, args: dict[str, Any]) -> Any:
        token = otel_context.attach(otel_context.Context())  # another invocation: no ambient span
        try:
            traceparent = args.get(orch.TRACE_PARENT_KEY)
            if name == orch.RUN_PHASE:
                position = args.get("position")
                return await self.engine.run_phase(
                    rid, int(args["index"]), finalize=bool(args.get("finalize", False)),
                    plan=bool(args.get("plan", False)), position=int(position) if position is not None else None,
                    traceparent=traceparent)
            if name == orch.FINALIZE:
                outcome = {k: v for k, v in args.items() if k != orch.TRACE_PARENT_KEY}
                return await self.engine.finalize(rid, outcome, traceparent=traceparent)
            return await super()._run(name, rid, args)
        finally:
            otel_context.detach(token)


class CrashOnce(ResearchAgent):
    """Raises (a simulated crash) after a few deltas of phase 1, the first time only, while it waits (as for
    a model's next chunk): the deltas before it are in the log, so the next attempt is a recovery."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.crashed = False

    async def run_phase(self, context: PhaseContext) -> AsyncIterator[str]:
        n = 0
        async for delta in super().run_phase(context):
            if context.phase_index == 1 and n == 3 and not self.crashed:
                self.crashed = True
                await asyncio.sleep(0.01)
                raise RuntimeError("simulated worker crash")
            n += 1
            yield delta


@pytest.fixture(scope="module")
def settings() -> Settings:
    return Settings.from_env({
        "AzureWebJobsStorage": os.environ.get("AzureWebJobsStorage", "UseDevelopmentStorage=true"),
        "RESILIENT_STORAGE_PREFIX": "o" + secrets.token_hex(4),
        "RESILIENT_AGENT_DELTA_DELAY_MS": "0",
    })


@pytest.fixture(scope="module")
async def storage(settings: Settings) -> AsyncIterator[Storage]:
    memory()
    assert setup.instrument_azure_sdk()  # what configure() does: storage calls become spans
    opened = await open_storage(settings, feed=CommittedFeed(), controls=ControlBoard())
    yield opened
    await opened.clients.delete_all()
    await opened.close()


def _rig(storage: Storage, settings: Settings, agent: ResearchAgent | None = None
         ) -> tuple[TracedDurable, ResponsesService]:
    engine = Engine(storage, agent or ResearchAgent(settings), settings,
                    Tuning(flush_interval_s=0.02, control_interval_s=0.05))
    durable = TracedDurable(engine, timer_scale=0.01)
    return durable, ResponsesService(storage, durable, settings)


async def _create(service: ResponsesService, phases: int = 3, delay_ms: int = 0, words: int = 6) -> str:
    body = {"model": "m", "input": "What does a trace connect?", "background": True,
            "metadata": {"research_phases": str(phases), "words_per_phase": str(words),
                         "delta_delay_ms": str(delay_ms)}}
    result = await traced("POST /responses", service.create(json.dumps(body).encode()))
    assert result.status == 200, result.body
    return str(result.body["id"])


def _trace(rid: str) -> tuple[ReadableSpan, list[ReadableSpan]]:
    """The run's request span and every finished span of its trace."""
    spans, _ = memory()
    [request] = [s for s in of_run(spans, rid) if s.name == "POST /responses"]
    assert request.context is not None
    everything = [s for s in spans.get_finished_spans()
                  if s.context is not None and s.context.trace_id == request.context.trace_id]
    return request, everything


def _reaches(span: ReadableSpan, ancestor: ReadableSpan, by_id: dict[int, ReadableSpan]) -> bool:
    assert ancestor.context is not None
    while span.parent is not None:
        if span.parent.span_id == ancestor.context.span_id:
            return True
        found = by_id.get(span.parent.span_id)
        if found is None:
            return False
        span = found
    return False


def _phases(rid: str) -> list[ReadableSpan]:
    spans, _ = memory()
    return sorted((s for s in of_run(spans, rid) if s.name == "run_phase"), key=lambda s: s.start_time or 0)


async def test_one_run_is_one_connected_trace_from_the_request_to_each_storage_call(
        storage: Storage, settings: Settings) -> None:
    _, reader = memory()
    phases_before = {o: counter(reader, "resilient.phases", outcome=o) for o in ("checkpointed", "completed")}
    finished_before = counter(reader, "resilient.runs.finished", status="completed")
    durable, service = _rig(storage, settings)
    rid = await _create(service)
    assert (await durable.wait(rid, WAIT_S))["status"] == "completed"

    request, trace = _trace(rid)
    by_id = {s.context.span_id: s for s in trace if s.context is not None}
    assert request.parent is None and request.kind.name == "SERVER"
    assert request.attributes is not None and request.attributes["chain_id"] == rid  # a root turn is its chain
    phases = _phases(rid)
    assert [s.attributes["phase.index"] for s in phases if s.attributes] == [0, 1, 2]
    for span in phases:
        assert span.context is not None and request.context is not None
        assert span.context.trace_id == request.context.trace_id
        assert span.parent is not None and span.parent.span_id == request.context.span_id  # via traceparent
        assert span.attributes is not None
        assert span.attributes["chain_id"] == rid and span.attributes["phase.is_recovery"] is False
        assert span.attributes["phase.position"] == span.attributes["phase.index"]
        storage_calls = [s for s in trace if s.kind.name == "CLIENT" and _reaches(s, span, by_id)]
        assert storage_calls, f"no storage span under phase {span.attributes['phase.index']}"
    assert [s.attributes["phase.outcome"] for s in phases if s.attributes] == [
        "checkpointed", "checkpointed", "completed"]  # the last phase concluded the run
    # the request's own storage calls (row, input items, log, index) are its children too: azure-core's span
    # per SDK operation (``TableClient.create_entity``), each over its HTTP call (a client span)
    assert request.context is not None
    operations = {s.name for s in trace if s.parent is not None and s.parent.span_id == request.context.span_id}
    assert {"TableClient.create_entity", "BlobClient.create_append_blob"} <= operations
    # nothing of the run is outside the trace, and every span of the trace hangs off the request
    assert all(s.context is not None and s.context.trace_id == request.context.trace_id
               for s in of_run(memory()[0], rid))
    assert all(s is request or _reaches(s, request, by_id) for s in trace)
    assert counter(reader, "resilient.phases", outcome="checkpointed") - phases_before["checkpointed"] == 2
    assert counter(reader, "resilient.phases", outcome="completed") - phases_before["completed"] == 1
    assert counter(reader, "resilient.runs.finished", status="completed") - finished_before == 1


async def test_a_runs_spans_are_one_per_request_and_activity_however_many_events_it_streams(
        storage: Storage, settings: Settings) -> None:
    durable, service = _rig(storage, settings)
    found: dict[int, tuple[list[str], int]] = {}
    for words in (6, 300):  # 3 phases: a few dozen events against about 900
        rid = await _create(service, words=words)
        assert (await durable.wait(rid, WAIT_S))["status"] == "completed"
        _, trace = _trace(rid)
        ours = sorted(s.name for s in trace if s.instrumentation_scope and s.instrumentation_scope.name == "resilient")
        found[words] = (ours, len(trace) - len(ours))
    assert found[300][0] == found[6][0]  # the app's own spans: the request's and one per activity
    assert found[6][0].count("run_phase") == 3 and found[6][0].count("POST /responses") == 1
    # the storage SDK's spans are per call, and a phase's events go out in few appends: at most a control
    # read or two more for the longer phases, nothing per event
    assert found[300][1] <= found[6][1] + 4, found


async def test_a_recovered_phase_is_marked_and_counted(storage: Storage, settings: Settings) -> None:
    _, reader = memory()
    before = counter(reader, "resilient.recoveries")
    errors_before = counter(reader, "resilient.phases", outcome="error")
    durable, service = _rig(storage, settings, CrashOnce(settings))
    rid = await _create(service)
    assert (await durable.wait(rid, WAIT_S))["status"] == "completed"
    phases = _phases(rid)
    assert [(s.attributes["phase.index"], s.attributes["phase.is_recovery"], s.attributes["phase.outcome"])
            for s in phases if s.attributes] == [
        (0, False, "checkpointed"), (1, False, "error"), (1, True, "checkpointed"), (2, False, "completed")]
    assert phases[1].status.status_code.name == "ERROR"
    request, _ = _trace(rid)
    assert {s.context.trace_id for s in phases if s.context} == {request.context.trace_id if request.context else 0}
    assert counter(reader, "resilient.recoveries") - before == 1
    assert counter(reader, "resilient.phases", outcome="error") - errors_before == 1


async def test_a_repaired_run_is_counted(storage: Storage, settings: Settings) -> None:
    _, reader = memory()
    before = counter(reader, "resilient.repairs", action="restarted")
    durable, service = _rig(storage, settings)
    rid = await _create(service, delay_ms=20)

    deadline = time.monotonic() + WAIT_S
    for _ in iter(lambda: time.monotonic() < deadline, False):  # until phase 0 is done: phase 1 is running
        if any(s.attributes and s.attributes["phase.index"] == 0 for s in _phases(rid)):
            break
        await asyncio.sleep(0.02)
    await durable.kill(rid)  # the orchestration died (Failed) with its running activity
    repairer = Repairer(storage, durable, durable.engine.finalize, RepairPolicy(min_age_seconds=0.0),
                        clock=time.time, throttle=Throttle())
    assert (await repairer.check(rid)).action == "restarted"
    assert (await durable.wait(rid, WAIT_S))["status"] == "completed"
    assert counter(reader, "resilient.repairs", action="restarted") - before == 1
