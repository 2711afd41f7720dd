"""A reconnect (``GET …?stream=true&starting_after=N``) reads the log while the row is checked: two storage
calls before the first event, and none for a request that fails its checks before storage. In the process
that wrote the log, the log comes from memory and only the row is read. Against Azurite."""

from __future__ import annotations

import json

import pytest

from resilient.agents.research import ResearchAgent
from resilient.engine.activities import Engine
from resilient.http.service import ResponsesService
from resilient.protocol.errors import ApiError
from resilient.protocol.sse import parse_frame
from resilient.settings import Settings
from resilient.storage.factory import Storage
from tests.integration.conftest import NoDurable, rebuilt

pytestmark = pytest.mark.azurite


async def _finished_run(storage: Storage, settings: Settings) -> str:
    body = {"model": "m", "input": "Reconnect, please.", "background": True,
            "metadata": {"research_phases": "2", "words_per_phase": "5", "delta_delay_ms": "0"}}
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
