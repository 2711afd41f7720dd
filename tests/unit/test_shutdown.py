"""The shutdown signal: running phases are counted, and the process ends once none runs (or after the grace)."""

from __future__ import annotations

import asyncio

from resilient.engine.run import shutdown as sd
from resilient.engine.run.shutdown import Shutdown


async def test_the_end_waits_for_running_phases_then_comes_soon_after_the_last() -> None:
    ended: list[float] = []
    loop = asyncio.get_running_loop()
    signal = Shutdown()
    signal.enter()
    signal.request(lambda: ended.append(loop.time()))
    await asyncio.sleep(0.05)
    assert signal.requested and ended == []  # a phase still runs: it closes its item first
    signal.leave()
    await asyncio.sleep(sd.SETTLE_SECONDS + 0.1)
    assert len(ended) == 1  # once, though the grace timer fires later too


async def test_with_nothing_running_the_end_comes_at_once() -> None:
    ended: list[bool] = []
    signal = Shutdown()
    signal.request(lambda: ended.append(True))
    await asyncio.sleep(0.01)
    assert ended == [True]


async def test_off_the_main_thread_no_handler_is_installed() -> None:
    def install_elsewhere() -> bool:
        other = asyncio.new_event_loop()
        try:
            return Shutdown().install(other)
        finally:
            other.close()

    assert await asyncio.to_thread(install_elsewhere) is False
