"""A reconnect (``GET …?stream=true&starting_after=N``) reads the log while the row is checked: two storage
calls before the first event, and none for a request that fails its checks before storage. Against Azurite."""

from __future__ import annotations

import json
from typing import Any

import pytest

from resilient.agents.research import ResearchAgent
from resilient.engine.activities import Engine
from resilient.http.service import ResponsesService
from resilient.protocol.errors import ApiError
from resilient.protocol.sse import parse_frame
from resilient.settings import Settings
from resilient.storage.factory import Storage, build_storage

pytestmark = pytest.mark.azurite


class _Runtime:
    async def start(self, instance_id: str, payload: dict[str, Any]) -> None:
        return None

    async def raise_event(self, instance_id: str, name: str, data: Any) -> None:
        return None


async def _finished_run(storage: Storage, settings: Settings) -> str:
    body = {"model": "m", "input": "Reconnect, please.", "background": True,
            "metadata": {"research_phases": "2", "words_per_phase": "5", "delta_delay_ms": "0"}}
    created = await ResponsesService(storage, _Runtime(), settings).create(json.dumps(body).encode())
    rid = str(created.body["id"])
    engine = Engine(storage, ResearchAgent(settings), settings)
    plan = await engine.plan(rid)
    for index in range(plan["phases"]):
        await engine.run_phase(rid, index)
    await engine.finalize(rid, {"status": "completed"})
    return rid


def _calls(storage: Storage) -> int:
    return storage.responses.storage_calls + storage.events.storage_calls  # type: ignore[attr-defined,no-any-return]


async def test_a_reconnect_costs_two_storage_calls_before_its_first_event(storage: Storage,
                                                                         settings: Settings) -> None:
    rid = await _finished_run(storage, settings)
    fresh = build_storage(storage.clients)  # a process that did not drive the run (no kept writer, no feed)
    service = ResponsesService(fresh, _Runtime(), settings)
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
    fresh = build_storage(storage.clients)
    with pytest.raises(ApiError) as raised:
        await ResponsesService(fresh, _Runtime(), settings).retrieve(response_id, query, {})
    assert raised.value.status == status
    assert fresh.events.storage_calls == 0  # type: ignore[attr-defined]


async def test_a_bad_starting_after_on_a_real_response_is_400_without_a_log_read(storage: Storage,
                                                                                 settings: Settings) -> None:
    rid = await _finished_run(storage, settings)
    fresh = build_storage(storage.clients)
    with pytest.raises(ApiError) as raised:
        await ResponsesService(fresh, _Runtime(), settings).retrieve(rid, {"stream": "true", "starting_after": "x"}, {})
    assert raised.value.status == 400 and raised.value.param == "starting_after"
    assert fresh.events.storage_calls == 0  # type: ignore[attr-defined]
