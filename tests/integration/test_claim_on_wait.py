"""A phase's first append (its claim of the log) goes out when the agent first waits, with every output it
had ready; an agent that never waits makes its phase one append.

The real orchestrator runs over the real activities (:class:`tests.durable_standin.Durable`). The agent
below yields a burst of ready words, then waits on an event the test holds: the burst must be in the log
(readable by anyone) while the agent waits, before its next output exists.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from resilient.agents.base import PhaseContext, PhaseOutput
from resilient.agents.research import ResearchAgent
from resilient.engine.activities import Engine, Tuning
from resilient.http.service import ResponsesService
from resilient.protocol import events as ev
from resilient.settings import Settings
from resilient.storage.factory import Storage
from resilient.storage.ports import CommittedBlock, JsonDict
from tests.durable_standin import Durable

STORAGE_ADAPTERS = ("memory", "azurite")

BURST = ["one", " two", " three", " four"]
AFTER = [" five", " six"]
WAIT_S = 30.0


class BurstThenWait(ResearchAgent):
    """One phase: a burst of ready words, a wait (as for a model's next chunk), then the rest."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.waiting = asyncio.Event()
        self.go_on = asyncio.Event()

    async def run_phase(self, context: PhaseContext) -> AsyncIterator[PhaseOutput]:
        for word in BURST:
            yield word
        self.waiting.set()
        await self.go_on.wait()
        for word in AFTER:
            yield word


async def _events(storage: Storage, rid: str) -> list[JsonDict]:
    return [event.json() for event in (await storage.events.read_after(rid, -1)).events]


def _deltas(events: list[JsonDict]) -> list[str]:
    return [str(e["delta"]) for e in events if e["type"] == ev.OUTPUT_TEXT_DELTA]


async def _run(storage: Storage, settings: Settings, agent: ResearchAgent) -> tuple[Durable, str]:
    # a window far longer than the test: an append that is not the claim or the finish would wait for it
    durable = Durable(Engine(storage, agent, settings, Tuning(flush_interval_s=30.0)), timer_scale=0.01)
    service = ResponsesService(storage, durable, settings)
    body = {"model": "m", "input": "Bursts", "background": True,
            "metadata": {"research_phases": "1", "words_per_phase": "6", "delta_delay_ms": "0"}}
    result = await service.create(json.dumps(body).encode())
    assert result.status == 200, result.body
    return durable, str(result.body["id"])


async def test_the_ready_burst_is_in_the_log_while_the_agent_waits(
        storage: Storage, settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = record_blocks(storage, monkeypatch)
    agent = BurstThenWait(settings)
    durable, rid = await _run(storage, settings, agent)
    await asyncio.wait_for(agent.waiting.wait(), WAIT_S)
    for _ in range(200):  # the claim is one append, under way while the agent waits
        if _deltas(await _events(storage, rid)) == BURST:
            break
        await asyncio.sleep(0.01)
    events = await _events(storage, rid)
    assert _deltas(events) == BURST  # the whole burst, in one append, before the agent's next output
    assert [e["type"] for e in events][-len(BURST) - 2:-len(BURST)] == [
        ev.OUTPUT_ITEM_ADDED, ev.CONTENT_PART_ADDED]  # the item's opening events came with it
    agent.go_on.set()
    assert await durable.wait(rid, WAIT_S) == {"status": "completed"}
    assert _deltas(await _events(storage, rid)) == BURST + AFTER
    claim, rest = [b for b in blocks[rid] if ev.OUTPUT_TEXT_DELTA in b]  # two appends in all for the phase
    assert claim.count(ev.OUTPUT_TEXT_DELTA) == len(BURST) and claim[0] == ev.OUTPUT_ITEM_ADDED
    assert rest.count(ev.OUTPUT_TEXT_DELTA) == len(AFTER) and rest[-1] == ev.OUTPUT_ITEM_DONE


def record_blocks(storage: Storage, monkeypatch: pytest.MonkeyPatch) -> dict[str, list[list[str]]]:
    """The event types of every block the process's writers commit, by response (each append publishes its
    block to the feed once storage accepted it)."""
    blocks: dict[str, list[list[str]]] = {}
    publish = storage.feed.publish

    def recording(response_id: str, block: CommittedBlock | None) -> None:
        if block is not None:
            blocks.setdefault(response_id, []).append([e.type for e in block.events])
        publish(response_id, block)

    monkeypatch.setattr(storage.feed, "publish", recording)
    return blocks


async def test_an_agent_that_never_waits_streams_its_phase_in_one_append(
        storage: Storage, settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = record_blocks(storage, monkeypatch)
    durable, rid = await _run(storage, settings, ResearchAgent(settings))
    assert await durable.wait(rid, WAIT_S) == {"status": "completed"}
    [phase] = [b for b in blocks[rid] if ev.OUTPUT_TEXT_DELTA in b]
    assert phase[0] == ev.OUTPUT_ITEM_ADDED and phase[-1] == ev.OUTPUT_ITEM_DONE
    assert phase.count(ev.OUTPUT_TEXT_DELTA) == 6  # opening events, every delta and the closing events
