"""The host↔worker event stream: invocations multiplexed on one pair of pipes, matched by id, and failed
together when the worker's end goes away. (Worker deaths in a real double: test_faults.py, test_double.py.)"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

from tests.hostdouble.eventstream import (
    HostStream,
    StreamClosed,
    WorkerAnsweredError,
    open_pipes,
    serve_worker_stream,
)


async def _pair(handle: Any) -> tuple[HostStream, asyncio.Task[None], asyncio.StreamWriter]:
    """A host end and a worker end in one process, over two real pipes."""
    to_worker_read, to_worker_write = os.pipe()
    from_worker_read, from_worker_write = os.pipe()
    worker_reader, worker_writer = await open_pipes(to_worker_read, from_worker_write)
    host = HostStream(*await open_pipes(from_worker_read, to_worker_write))
    return host, asyncio.create_task(serve_worker_stream(worker_reader, worker_writer, handle)), worker_writer


def test_concurrent_invocations_are_answered_by_id_in_any_order() -> None:
    async def handle(kind: str, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        await asyncio.sleep(body["delay"])  # later calls finish first
        return {"kind": kind, "n": body["n"], "headers": headers}

    async def scenario() -> list[dict[str, Any]]:
        host, worker, _ = await _pair(handle)
        calls = [host.call(f"id-{n}", "activity", {"n": n, "delay": (20 - n) / 1000}, {"k": str(n)})
                 for n in range(20)]
        answers = await asyncio.gather(*calls)
        host.close()
        await asyncio.wait_for(worker, 5)  # the worker's end ends when the host's closes
        return answers

    answers = asyncio.run(scenario())
    assert answers == [{"kind": "activity", "n": n, "headers": {"k": str(n)}} for n in range(20)]


def test_a_message_larger_than_the_pipe_buffer_arrives_whole() -> None:
    big = "x" * (3 * 2**20)

    async def handle(kind: str, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        return {"echo": body["text"] + "!"}

    async def scenario() -> dict[str, Any]:
        host, worker, _ = await _pair(handle)
        try:
            return await host.call("big", "orchestrator", {"text": big}, {})
        finally:
            host.close()
            worker.cancel()

    assert asyncio.run(scenario()) == {"echo": big + "!"}


def test_a_handler_that_cannot_run_the_invocation_is_a_refusal_not_a_lost_worker() -> None:
    async def handle(kind: str, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        raise KeyError(kind)

    async def scenario() -> None:
        host, worker, _ = await _pair(handle)
        try:
            with pytest.raises(WorkerAnsweredError) as refused:
                await host.call("a", "nonsense", {}, {})
            assert refused.value.status == 500 and "KeyError" in refused.value.text
            assert not host.closed  # the stream stays usable
        finally:
            host.close()
            worker.cancel()

    asyncio.run(scenario())


def test_every_waiting_invocation_fails_when_the_workers_end_closes() -> None:
    started: list[str] = []
    all_started = asyncio.Event()

    async def handle(kind: str, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        started.append(kind)
        if len(started) == 3:
            all_started.set()
        await asyncio.sleep(60)
        return {}

    async def scenario() -> None:
        host, worker, worker_writer = await _pair(handle)
        calls = [asyncio.create_task(host.call(f"c{n}", "activity", {}, {})) for n in range(3)]
        await asyncio.wait_for(all_started.wait(), 5)
        worker.cancel()
        worker_writer.close()  # what a dying worker's process does to its end
        results = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), 5)
        assert all(isinstance(result, StreamClosed) for result in results), results
        assert host.closed
        with pytest.raises(StreamClosed):
            await host.call("late", "activity", {}, {})

    asyncio.run(scenario())
