"""The sample agent's model path makes one client span per chat call, child of the phase's span, with the
model's token counts; a failing call ends its span as an error. Against the fake model server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace

from resilient.agents.base import AgentError, AgentRequest, PhaseContext
from resilient.agents.research import BASE_PLAN, ResearchAgent
from resilient.settings import Settings
from tests.fakemodel.server import Behaviour, FakeModel
from tests.telemetry_kit import memory


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeModel]:
    with FakeModel() as server:
        yield server


def _context(rid: str) -> PhaseContext:
    request = AgentRequest(rid, "m", None, [{"type": "message", "role": "user", "content": "hi"}], [], {})
    return PhaseContext(request=request, plan=list(BASE_PLAN), phase_index=0, is_recovery=False, output_so_far=[])


async def _phase(fake: FakeModel, rid: str) -> list[object]:
    agent = ResearchAgent(Settings.from_env({
        "AZURE_OPENAI_ENDPOINT": fake.base + "/v1", "AZURE_OPENAI_DEPLOYMENT": "dep",
        "AZURE_OPENAI_API_KEY": "test-key", "RESILIENT_MODEL_MAX_RETRIES": "0"}))
    tracer = trace.get_tracer("test")
    outputs: list[object] = []
    with tracer.start_as_current_span("run_phase", attributes={"response_id": rid}):
        try:
            async for output in agent.run_phase(_context(rid)):
                outputs.append(output)
        finally:
            await agent._model().close()
    return outputs


async def test_each_chat_call_is_a_client_span_under_its_phase(fake: FakeModel) -> None:
    spans, _ = memory()
    await _phase(fake, "resp_model_span")
    [phase] = [s for s in spans.get_finished_spans() if (s.attributes or {}).get("response_id") == "resp_model_span"]
    assert phase.context is not None
    [chat] = [s for s in spans.get_finished_spans()
              if s.parent is not None and s.parent.span_id == phase.context.span_id and s.name == "chat dep"]
    assert chat.kind.name == "CLIENT" and chat.status.status_code.name != "ERROR"
    assert chat.attributes is not None
    assert chat.attributes["gen_ai.operation.name"] == "chat" and chat.attributes["gen_ai.request.model"] == "dep"
    assert chat.attributes["gen_ai.provider.name"] == "openai"
    assert chat.attributes["gen_ai.usage.output_tokens"] > 0


async def test_a_failed_chat_call_ends_its_span_as_an_error(fake: FakeModel) -> None:
    spans, _ = memory()
    fake.script.append(Behaviour(kind="status", status=401, message="nope"))
    with pytest.raises(AgentError):
        await _phase(fake, "resp_model_fail")
    [phase] = [s for s in spans.get_finished_spans() if (s.attributes or {}).get("response_id") == "resp_model_fail"]
    assert phase.context is not None
    [chat] = [s for s in spans.get_finished_spans()
              if s.parent is not None and s.parent.span_id == phase.context.span_id and s.name == "chat dep"]
    assert chat.status.status_code.name == "ERROR"
    assert [e.name for e in chat.events] == ["exception"]
