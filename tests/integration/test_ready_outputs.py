"""An agent's outputs that are ready at once cost no event loop turn each, yet never hold the loop for long.

The real orchestrator runs over the real activities (:class:`tests.durable_standin.Durable`) on real
Azurite. The offline agent at ``delta_delay_ms=0`` yields every word without waiting: the phase asks for
each output in a task started eagerly, so such an output is taken at once; after
:data:`~resilient.engine.run.pump.EAGER_OUTPUTS_BEFORE_A_YIELD` of them in a row the phase yields once,
so the process's other tasks (appends, readers, requests) still run during a phase of any length.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from resilient.agents.base import PhaseContext, PhaseOutput
from resilient.agents.research import ResearchAgent
from resilient.engine.activities import Engine, Tuning
from resilient.engine.run.pump import EAGER_OUTPUTS_BEFORE_A_YIELD
from resilient.http.service import ResponsesService
from resilient.protocol.items import text_of
from resilient.settings import Settings
from resilient.storage.factory import Storage
from tests.durable_standin import Durable

STORAGE_ADAPTERS = ("memory",)  # the engine's decisions, not storage: see conftest

WORDS = 300


class Ticker:
    """Counts event loop turns: one per time the loop runs it."""

    def __init__(self) -> None:
        self.turns = 0

    async def run(self) -> None:
        while True:
            await asyncio.sleep(0)
            self.turns += 1


class WatchedAgent(ResearchAgent):
    """The offline agent, noting before each output whether the loop turned since the previous one."""

    def __init__(self, settings: Settings, ticker: Ticker) -> None:
        super().__init__(settings)
        self.ticker = ticker
        self.turned: list[bool] = []  # per output after the first

    async def run_phase(self, context: PhaseContext) -> AsyncIterator[PhaseOutput]:
        seen: int | None = None
        async for output in super().run_phase(context):
            if seen is not None:
                self.turned.append(self.ticker.turns != seen)
            seen = self.ticker.turns
            yield output


async def test_ready_outputs_take_no_loop_turn_each_and_yield_every_few(storage: Storage, settings: Settings) -> None:
    ticker = Ticker()
    ticking = asyncio.create_task(ticker.run())
    agent = WatchedAgent(settings, ticker)
    durable = Durable(Engine(storage, agent, settings, Tuning(flush_interval_s=0.02)), timer_scale=0.01)
    service = ResponsesService(storage, durable, settings)
    try:
        body = {"model": "m", "input": "Ready words", "background": True,
                "metadata": {"research_phases": "1", "words_per_phase": str(WORDS), "delta_delay_ms": "0"}}
        result = await service.create(json.dumps(body).encode())
        rid = str(result.body["id"])
        assert await durable.wait(rid, 60.0) == {"status": "completed"}
    finally:
        ticking.cancel()
    [item] = await storage.items.list_output_items(rid)
    assert len(text_of(item).split(" ")) == WORDS  # every output made it into the checkpoint
    turned = agent.turned
    assert len(turned) == WORDS - 1
    # Most outputs were taken without a loop turn: one every EAGER_OUTPUTS_BEFORE_A_YIELD outputs (a task per
    # output gave one after each); the agent never waits, so no append interrupts it (the phase is one append).
    assert sum(turned) <= 1 + WORDS // EAGER_OUTPUTS_BEFORE_A_YIELD + 1
    # ... and the loop never went more than that many outputs without a turn.
    longest, run = 0, 0
    for moved in turned:
        run = 0 if moved else run + 1
        longest = max(longest, run)
    assert longest < EAGER_OUTPUTS_BEFORE_A_YIELD
