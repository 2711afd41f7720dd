"""A reconnect (``GET …?stream=true&starting_after=N``) reads the log while the row is checked: one row read
and one ranged read of the log before the first event (counted on the wire), and no storage call for a
request that fails its checks before storage. In the process that wrote the log, the log comes from memory
and only the row is read. Against Azurite."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
from azure.core.pipeline.transport import AioHttpTransport

from resilient.agents.research import ResearchAgent
from resilient.engine.activities import Engine
from resilient.http.service import ResponsesService
from resilient.protocol.errors import ApiError
from resilient.protocol.sse import parse_frame
from resilient.settings import Settings
from resilient.storage.factory import Storage
from tests.integration.conftest import NoDurable, rebuilt

pytestmark = pytest.mark.azurite


async def _finished_run(storage: Storage, settings: Settings, *, phases: int = 2, words: int = 5) -> str:
    body = {"model": "m", "input": "Reconnect, please.", "background": True,
            "metadata": {"research_phases": str(phases), "words_per_phase": str(words), "delta_delay_ms": "0"}}
    created = await ResponsesService(storage, NoDurable(), settings).create(json.dumps(body).encode())
    rid = str(created.body["id"])
    engine = Engine(storage, ResearchAgent(settings), settings)
    plan = await engine.plan(rid)
    for index in range(plan["phases"]):
        await engine.run_phase(rid, index)
    await engine.finalize(rid, {"status": "completed"})
    return rid


def _calls(storage: Storage) -> int:
    return storage.responses.storage_calls + storage.events.reader.storage_calls  # type: ignore[attr-defined,no-any-return]


async def test_a_reconnect_costs_two_storage_calls_before_its_first_event(storage: Storage,
                                                                         settings: Settings) -> None:
    rid = await _finished_run(storage, settings)
    storage.feed.forget_log(rid)  # as in a process that did not drive the run ...
    fresh = rebuilt(storage)  # ... (no kept writer, no feed)
    service = ResponsesService(fresh, NoDurable(), settings)
    result = await service.retrieve(rid, {"stream": "true", "starting_after": "3"}, {})
    assert result.stream is not None
    chunks = [chunk async for chunk in result.stream]
    assert _calls(fresh) == 2  # the row and one read of the log, at the same time
    frames = b"".join(chunks).split(b"\n\n")[:-1]
    seqs = [parse_frame(frame + b"\n\n")[0] for frame in frames]
    assert seqs[0] == 4 and seqs == list(range(4, 4 + len(seqs)))
    assert parse_frame(frames[-1] + b"\n\n")[1] == "response.completed"


@pytest.mark.parametrize(("response_id", "query", "status"), [
    ("resp_../../x", {"stream": "true"}, 404),
    ("resp_ok", {"stream": "true", "starting_after": "abc"}, 400),  # query parameters are checked before the id
])
async def test_a_malformed_reconnect_reads_no_log(storage: Storage, settings: Settings, response_id: str,
                                                  query: dict[str, str], status: int) -> None:
    fresh = rebuilt(storage)
    with pytest.raises(ApiError) as raised:
        await ResponsesService(fresh, NoDurable(), settings).retrieve(response_id, query, {})
    assert raised.value.status == status
    assert fresh.events.reader.storage_calls == 0  # type: ignore[attr-defined]


async def test_a_bad_starting_after_on_a_real_response_is_400_without_a_log_read(storage: Storage,
                                                                                 settings: Settings) -> None:
    rid = await _finished_run(storage, settings)
    fresh = rebuilt(storage)
    with pytest.raises(ApiError) as raised:
        await ResponsesService(fresh, NoDurable(), settings).retrieve(rid, {"stream": "true", "starting_after": "x"},
                                                                      {})
    assert raised.value.status == 400 and raised.value.param == "starting_after"
    assert fresh.events.reader.storage_calls == 0  # type: ignore[attr-defined]


async def _reconnect(service: ResponsesService, rid: str, after: int) -> list[bytes]:
    result = await service.retrieve(rid, {"stream": "true", "starting_after": str(after)}, {})
    assert result.stream is not None
    return b"".join([chunk async for chunk in result.stream]).split(b"\n\n")[:-1]


async def test_a_reconnect_to_the_process_that_wrote_the_log_reads_only_the_row(storage: Storage,
                                                                                settings: Settings) -> None:
    rid = await _finished_run(storage, settings)
    here = rebuilt(storage)  # same process: the feed remembers the log it published
    from_memory = await _reconnect(ResponsesService(here, NoDurable(), settings), rid, 3)
    assert here.responses.storage_calls == 1 and here.events.reader.storage_calls == 0  # type: ignore[attr-defined]
    storage.feed.forget_log(rid)
    elsewhere = rebuilt(storage)
    from_storage = await _reconnect(ResponsesService(elsewhere, NoDurable(), settings), rid, 3)
    assert elsewhere.events.reader.storage_calls == 1  # type: ignore[attr-defined]
    assert from_memory == from_storage  # byte for byte what storage holds
    assert parse_frame(from_memory[0] + b"\n\n")[0] == 4


async def test_a_log_remembered_here_is_not_served_once_its_response_is_deleted(storage: Storage,
                                                                                settings: Settings) -> None:
    deleted_elsewhere = await _finished_run(storage, settings)
    deleted_here = await _finished_run(storage, settings)
    other_process = ResponsesService(rebuilt(storage), NoDurable(), settings)
    await storage.responses.delete(deleted_elsewhere)  # only the row: the log is still remembered here
    assert storage.feed.recent(deleted_elsewhere, -1) is not None
    service = ResponsesService(rebuilt(storage), NoDurable(), settings)
    with pytest.raises(ApiError) as raised:
        await service.retrieve(deleted_elsewhere, {"stream": "true"}, {})
    assert raised.value.status == 404  # the row is checked on every reconnect
    assert (await service.delete(deleted_here)).status == 200
    assert storage.feed.recent(deleted_here, -1) is None
    with pytest.raises(ApiError) as raised:
        await other_process.retrieve(deleted_here, {"stream": "true"}, {})
    assert raised.value.status == 404


@dataclass
class _Wire:
    """Every HTTP request this process sends to storage, named by what it does (a counting transport)."""

    requests: list[str] = field(default_factory=list)

    def note(self, method: str, url: str, headers: Any) -> None:
        path = unquote(urlsplit(url).path)
        if "(PartitionKey=" in path and method == "GET":
            self.requests.append("row read")
        elif "comp=list" in url:
            self.requests.append("blob list")
        elif method == "GET" and ("x-ms-range" in headers or "Range" in headers):
            self.requests.append("blob range read")
        else:
            self.requests.append(f"{method} {path}")


@pytest.fixture
def wire(monkeypatch: pytest.MonkeyPatch) -> _Wire:
    seen = _Wire()
    send = AioHttpTransport.send

    async def counting_send(self: AioHttpTransport, request: Any, **kwargs: Any) -> Any:
        seen.note(request.method, request.url, request.headers)
        return await send(self, request, **kwargs)

    monkeypatch.setattr(AioHttpTransport, "send", counting_send)
    return seen


async def _first_event_calls(stream: AsyncIterator[bytes], wire: _Wire, start: int) -> tuple[list[str], list[int]]:
    """The storage requests made before the stream's first chunk, and every sequence number it delivers."""
    before_first: list[str] | None = None
    chunks = []
    async for chunk in stream:
        if before_first is None:
            before_first = wire.requests[start:]
        chunks.append(chunk)
    frames = b"".join(chunks).split(b"\n\n")[:-1]
    return before_first or [], [parse_frame(frame + b"\n\n")[0] for frame in frames]


async def test_a_reconnect_makes_one_row_read_and_one_range_read_before_its_first_event(
        storage: Storage, settings: Settings, wire: _Wire) -> None:
    """Over the wire, in a process that did not write the log: a log longer than the head window (so the first
    read does not see its end), reconnects near its start and in its head, and every event after N arrives
    once and in order, the terminal one last."""
    rid = await _finished_run(storage, settings, phases=3, words=150)
    storage.feed.forget_log(rid)
    fresh = rebuilt(storage)
    last = (await fresh.events.read_after(rid, -1)).cursor.last_sequence_number
    assert (await fresh.events.read_after(rid, -1)).cursor.offset > fresh.events.reader.tail_window  # type: ignore[attr-defined]
    for after in (-1, 3, 100):
        start = len(wire.requests)
        result = await ResponsesService(fresh, NoDurable(), settings).retrieve(
            rid, {"stream": "true", "starting_after": str(after)}, {})
        assert result.stream is not None
        before_first, seqs = await _first_event_calls(result.stream, wire, start)
        assert sorted(before_first) == ["blob range read", "row read"], (after, before_first)
        assert seqs == list(range(after + 1, last + 1)), after
    # Past the head window the log's end is found by a listing first (docs/PERFORMANCE.md, "Reconnect").
    start = len(wire.requests)
    result = await ResponsesService(fresh, NoDurable(), settings).retrieve(
        rid, {"stream": "true", "starting_after": str(last - 5)}, {})
    assert result.stream is not None
    before_first, seqs = await _first_event_calls(result.stream, wire, start)
    assert sorted(before_first) == ["blob list", "blob range read", "row read"], before_first
    assert seqs == list(range(last - 4, last + 1))
