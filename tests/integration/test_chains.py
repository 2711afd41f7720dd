"""Conversation chains at the service + engine level, on real Azurite: fork and lock conflicts (S3),
steering counts (S2), queued-cancel (S4) and the history a queued turn sees."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from resilient.agents.base import AgentRequest, Phase, PhaseContext
from resilient.agents.research import ResearchAgent
from resilient.engine.activities import Engine
from resilient.engine.orchestration import orchestrator as orch
from resilient.http.service import ResponsesService
from resilient.ids import APPROVAL_REQUEST_PREFIX, item_id
from resilient.protocol.errors import ApiError
from resilient.protocol.items import text_of
from resilient.settings import Settings
from resilient.storage.factory import Storage
from tests.integration.conftest import new_conversation

pytestmark = pytest.mark.azurite
STORAGE_ADAPTERS = ("azurite", "memory")  # also the chain/deletion contract of both adapters


class _Runtime:
    def __init__(self) -> None:
        self.started: dict[str, dict[str, Any]] = {}
        self.events: list[tuple[str, str]] = []

    async def start(self, instance_id: str, payload: dict[str, Any]) -> None:
        self.started[instance_id] = payload

    async def raise_event(self, instance_id: str, name: str, data: Any) -> None:
        self.events.append((instance_id, name))


def _service(storage: Storage, settings: Settings, *, steerable: bool = True) -> tuple[ResponsesService, _Runtime]:
    runtime = _Runtime()
    tuned = dataclasses.replace(settings, steerable_conversations=steerable)
    return ResponsesService(storage, runtime, tuned), runtime


async def _post(service: ResponsesService, **body: Any) -> dict[str, Any]:
    body.setdefault("model", "m")
    body.setdefault("background", True)
    body.setdefault("metadata", {"research_phases": "2", "words_per_phase": "3"})
    result = await service.create(json.dumps(body).encode())
    assert result.status == 200
    answer: dict[str, Any] = result.body
    return answer





async def test_every_stored_turn_takes_its_chain_lock(storage: Storage, settings: Settings) -> None:
    service, runtime = _service(storage, settings)
    root = await _post(service, input="root")
    assert runtime.started[root["id"]]["chain_id"] == root["id"]
    assert runtime.started[root["id"]][orch.OWNS_LOCK_KEY] is True  # its chain's lock starts out held by it
    follow = await _post(service, input="next", previous_response_id=root["id"])
    assert runtime.started[follow["id"]]["chain_id"] == root["id"]
    conv = await new_conversation(storage)
    turn = await _post(service, input="c", conversation=conv)
    assert runtime.started[turn["id"]]["chain_id"] == conv
    for later in (follow, turn):  # a later turn, and a conversation's first turn, ask the entity
        assert orch.OWNS_LOCK_KEY not in runtime.started[later["id"]]


async def test_steering_off_busy_chain_is_409_conversation_locked(storage: Storage, settings: Settings) -> None:
    service, _ = _service(storage, settings, steerable=False)
    conv = await new_conversation(storage)
    await _post(service, input="first", conversation=conv)  # still queued: nothing runs it here
    with pytest.raises(ApiError) as info:
        await _post(service, input="second", conversation=conv)
    assert (info.value.status, info.value.code) == (409, "conversation_locked")
    assert info.value.headers().get("x-should-retry") == "false"


async def test_fork_is_409_and_latest_is_accepted(storage: Storage, settings: Settings) -> None:
    service, _ = _service(storage, settings)
    root = await _post(service, input="root")
    second = await _post(service, input="two", previous_response_id=root["id"])
    with pytest.raises(ApiError) as info:
        await _post(service, input="fork", previous_response_id=root["id"])
    assert (info.value.status, info.value.code, info.value.param) == (
        409, "conversation_fork_not_supported", "previous_response_id")
    third = await _post(service, input="three", previous_response_id=second["id"])
    assert third["previous_response_id"] == second["id"]


async def test_each_turn_sees_the_count_queued_behind_it_and_a_queued_cancel_undoes_it(
    storage: Storage, settings: Settings
) -> None:
    service, runtime = _service(storage, settings)
    conv = await new_conversation(storage)
    a = await _post(service, input="a", conversation=conv)
    b = await _post(service, input="b", conversation=conv)
    c = await _post(service, input="c", conversation=conv)
    counts = [(await storage.responses.get_control(x["id"])).pending_input_count for x in (a, b, c)]
    assert counts == [2, 1, 0]
    assert b["status"] == "queued" and c["status"] == "queued"
    await service.cancel(b["id"])
    assert (b["id"], "cancel") in runtime.events
    counts = [(await storage.responses.get_control(x["id"])).pending_input_count for x in (a, c)]
    assert counts == [1, 0]


async def test_queued_turn_history_includes_the_steered_turns_partial_output(storage: Storage,
                                                                             settings: Settings) -> None:
    seen: list[AgentRequest] = []

    class Recorder(ResearchAgent):
        async def plan(self, request: AgentRequest) -> list[Phase]:
            seen.append(request)
            return [Phase("only")]

        async def run_phase(self, context: PhaseContext) -> AsyncIterator[str]:
            for word in ("partial", " answer", " that", " never", " finishes"):
                if context.should_stop:
                    return
                yield word

    service, _ = _service(storage, settings)
    engine = Engine(storage, Recorder(settings), settings)
    conv = await new_conversation(storage)
    a = await _post(service, input="first question", conversation=conv)
    await engine.plan(a["id"])
    b = await _post(service, input="second question", conversation=conv)  # steers a before its phase
    summary = await engine.run_phase(a["id"], 0)
    assert summary["stop"] == "steered"
    await engine.finalize(a["id"], {"status": "completed", "steered": True})
    await engine.plan(b["id"])
    history = seen[-1].history
    assert [text_of(i) for i in history] == ["first question"]  # a was steered before writing output
    assert seen[-1].question() == "second question"
    await engine.run_phase(b["id"], 0)
    await engine.finalize(b["id"], {"status": "completed"})
    c = await _post(service, input="third", conversation=conv)
    await engine.plan(c["id"])
    assert [text_of(i) for i in seen[-1].history] == [
        "first question", "second question", "partial answer that never finishes"]


async def test_two_answers_to_one_stored_approval_request_race_and_one_wins(storage: Storage,
                                                                         settings: Settings) -> None:
    """Answers without ``previous_response_id`` (the history resent) join the paused response's chain; two
    at once both pass the check for a newer turn, the chain's compare-and-swap orders them, and the loser
    is refused as a late answer is (400 ``approval_request_not_found``), not as a fork."""
    service, runtime = _service(storage, settings)
    paused = await _post(service, input="root")
    request = {"type": "mcp_approval_request", "id": item_id(APPROVAL_REQUEST_PREFIX, paused["id"]),
               "server_label": "research-agent", "name": "sources", "arguments": "{}"}
    await storage.items.put_output_items(paused["id"], 0, [request])
    answer = [{"type": "mcp_approval_response", "approval_request_id": request["id"], "approve": True}]
    results = await asyncio.gather(_post(service, input=answer), _post(service, input=answer),
                                   return_exceptions=True)
    won = [r for r in results if isinstance(r, dict)]
    lost = [r for r in results if isinstance(r, ApiError)]
    assert len(won) == 1 and len(lost) == 1, results
    assert (lost[0].status, lost[0].code, lost[0].param) == (400, "approval_request_not_found",
                                                             "input[0].approval_request_id")
    assert won[0]["previous_response_id"] is None
    assert runtime.started[won[0]["id"]]["chain_id"] == paused["id"]  # on the paused response's chain
