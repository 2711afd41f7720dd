"""Every endpoint through the official openai client, against the host double and real Azurite."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from tests.scenario.conftest import knobs, rebuild, wait_until

pytestmark = pytest.mark.azurite


def _seqs(events: list[Any]) -> list[int]:
    return [e.sequence_number for e in events]


def test_stream_disconnect_and_reconnect_misses_nothing(client: OpenAI) -> None:
    stream = client.responses.create(model="m", input="Why do phases help?", stream=True, background=True,
                                     metadata=knobs(phases=3, words=12, delay_ms=5))
    first: list[Any] = []
    for event in stream:
        first.append(event)
        if len(first) == 9:
            break
    stream.close()  # the client drops
    response_id = first[0].response.id
    rest = list(client.responses.retrieve(response_id, stream=True, starting_after=first[-1].sequence_number))
    events = first + rest
    assert _seqs(events) == list(range(len(events)))
    assert [e.type for e in events].count("response.created") == 1
    assert events[-1].type == "response.completed"
    final = client.responses.retrieve(response_id)
    assert final.status == "completed"
    assert [(i["id"], i["text"]) for i in rebuild(events)] == [(o.id, o.content[0].text) for o in final.output]
    # A replay from the start is the same events again, byte-for-byte in content.
    replay = list(client.responses.retrieve(response_id, stream=True, starting_after=-1))
    assert [e.model_dump() for e in replay] == [e.model_dump() for e in events]


def test_last_event_id_header_resumes_like_starting_after(client: OpenAI, http: httpx.Client) -> None:
    response = client.responses.create(model="m", input="q", background=True, metadata=knobs(phases=1, words=4))
    wait_until(lambda: client.responses.retrieve(response.id).status == "completed")
    raw = http.get(f"/responses/{response.id}", params={"stream": "true"}, headers={"Last-Event-ID": "3"})
    assert raw.status_code == 200 and raw.headers["content-type"].startswith("text/event-stream")
    ids = [int(line[4:]) for line in raw.text.splitlines() if line.startswith("id: ")]
    assert ids[0] == 4 and ids == list(range(4, ids[-1] + 1))


def test_background_poll_to_terminal(client: OpenAI) -> None:
    created = client.responses.create(model="m", input="poll me", background=True, metadata=knobs(phases=2))
    assert created.status in ("queued", "in_progress") and created.background is True
    assert created.id.startswith("resp_") and len(created.id) >= 5 + 32
    done = wait_until(lambda: (r := client.responses.retrieve(created.id)).status == "completed" and r)
    assert len(done.output) == 2 and done.usage is not None and done.usage.output_tokens > 0
    assert done.completed_at is not None


def test_synchronous_request_returns_the_finished_response(client: OpenAI) -> None:
    response = client.responses.create(model="m", input="sync", metadata=knobs(phases=2, words=3))
    assert response.status == "completed" and len(response.output) == 2
    assert response.output_text.startswith("[scope]")
    assert client.responses.retrieve(response.id).output_text == response.output_text


def test_non_background_stream_then_replay_is_refused(client: OpenAI) -> None:
    events = list(client.responses.create(model="m", input="live", stream=True, metadata=knobs(phases=1)))
    assert events[-1].type == "response.completed" and _seqs(events) == list(range(len(events)))
    with pytest.raises(openai.BadRequestError) as info:
        list(client.responses.retrieve(events[0].response.id, stream=True, starting_after=0))
    assert info.value.body["param"] == "stream"  # type: ignore[index]
    assert info.value.body["code"] == "background_required"  # type: ignore[index]


def test_store_false_streams_and_then_is_gone(client: OpenAI) -> None:
    events = list(client.responses.create(model="m", input="ephemeral", stream=True, store=False,
                                          metadata=knobs(phases=1)))
    assert events[-1].type == "response.completed"
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(events[0].response.id)


def test_cancel_background_keeps_partial_output_and_is_idempotent(client: OpenAI) -> None:
    created = client.responses.create(model="m", input="long", background=True,
                                      metadata=knobs(phases=3, words=400, delay_ms=10))
    wait_until(lambda: client.responses.retrieve(created.id).status == "in_progress")
    cancelled = client.responses.cancel(created.id)
    assert cancelled.status == "cancelled"
    events = list(client.responses.retrieve(created.id, stream=True, starting_after=-1))
    assert events[-1].type == "response.failed" and events[-1].response.status == "cancelled"
    assert _seqs(events) == list(range(len(events)))
    again = client.responses.cancel(created.id)
    assert again.status == "cancelled"
    final = client.responses.retrieve(created.id)
    assert final.status == "cancelled" and len(final.output) <= 1


def test_cancel_errors(client: OpenAI) -> None:
    sync = client.responses.create(model="m", input="x", metadata=knobs(phases=1, words=2))
    with pytest.raises(openai.BadRequestError) as info:  # 400, as the OpenAI API answers
        client.responses.cancel(sync.id)  # not a background response
    assert info.value.body["code"] == "background_required"  # type: ignore[index]
    done = client.responses.create(model="m", input="x", background=True, metadata=knobs(phases=1, words=2))
    wait_until(lambda: client.responses.retrieve(done.id).status == "completed")
    with pytest.raises(openai.ConflictError) as info:
        client.responses.cancel(done.id)  # already finished
    assert info.value.body["code"] == "response_already_finished"  # type: ignore[index]


def test_delete_in_flight_is_refused_then_delete_gives_404(client: OpenAI) -> None:
    created = client.responses.create(model="m", input="x", background=True,
                                      metadata=knobs(phases=2, words=100, delay_ms=10))
    with pytest.raises(openai.ConflictError) as info:
        client.responses.delete(created.id)
    assert info.value.body["code"] == "response_in_progress"  # type: ignore[index]
    client.responses.cancel(created.id)
    wait_until(lambda: _terminal_event_seen(client, created.id))
    client.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.input_items.list(created.id)


def _terminal_event_seen(client: OpenAI, response_id: str) -> bool:
    events = list(client.responses.retrieve(response_id, stream=True, starting_after=-1))
    return events[-1].type in ("response.completed", "response.failed", "response.incomplete")


def test_delete_returns_the_deleted_object(http: httpx.Client, client: OpenAI) -> None:
    done = client.responses.create(model="m", input="x", metadata=knobs(phases=1, words=2))
    answer = http.delete(f"/responses/{done.id}")
    assert answer.status_code == 200
    assert answer.json() == {"id": done.id, "object": "response.deleted", "deleted": True}


def test_input_items_paging(client: OpenAI) -> None:
    messages = [{"role": "user", "content": f"message {i}"} for i in range(5)]
    done = client.responses.create(model="m", input=messages, metadata=knobs(phases=1, words=2))  # type: ignore[arg-type]
    page = client.responses.input_items.list(done.id, limit=2, order="asc")
    assert [item.content[0].text for item in page.data] == ["message 0", "message 1"]  # type: ignore[union-attr]
    assert page.has_more is True and page.first_id == page.data[0].id and page.last_id == page.data[-1].id
    after = client.responses.input_items.list(done.id, limit=2, order="asc", after=page.last_id)
    assert [item.content[0].text for item in after.data] == ["message 2", "message 3"]  # type: ignore[union-attr]
    newest = client.responses.input_items.list(done.id)  # default order desc, limit 20
    assert [i.content[0].text for i in newest.data] == [f"message {i}" for i in range(4, -1, -1)]  # type: ignore[union-attr]
    assert newest.has_more is False
    every = [i.id for i in client.responses.input_items.list(done.id, limit=1, order="asc")]  # auto-paging
    assert len(every) == 5 and len(set(every)) == 5


def test_previous_response_id_chains_history(client: OpenAI) -> None:
    first = client.responses.create(model="m", input="first turn", metadata=knobs(phases=1, words=2))
    second = client.responses.create(model="m", input="second turn", previous_response_id=first.id,
                                     metadata=knobs(phases=1, words=2))
    assert second.status == "completed" and second.previous_response_id == first.id


def test_conversation_is_echoed(client: OpenAI) -> None:
    conversation = client.conversations.create().id
    response = client.responses.create(model="m", input="x", conversation=conversation,
                                       metadata=knobs(phases=1, words=2))
    assert response.conversation is not None and response.conversation.id == conversation


def test_cancel_is_atomic_to_readers(client: OpenAI, http: httpx.Client) -> None:
    """The cancelled status and the partial output become visible together: the cancel's answer and the
    first read right after it carry the stopped phase's partial item, and a reader polling throughout
    never sees ``cancelled`` with fewer items than the final response."""
    created = client.responses.create(model="m", input="long", background=True,
                                      metadata=knobs(phases=3, words=400, delay_ms=10))
    for event in client.responses.retrieve(created.id, stream=True, starting_after=-1):
        if event.type == "response.output_text.delta" and event.output_index == 1:
            break  # phase 1 is streaming: phase 0 is checkpointed, phase 1 is partial
    seen: list[tuple[str, int]] = []
    stop = threading.Event()

    def poll() -> None:
        with httpx.Client(base_url=str(http.base_url), timeout=30.0) as reader:
            while not stop.is_set():
                body = reader.get(f"/responses/{created.id}").json()
                seen.append((body["status"], len(body["output"])))

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        wait_until(lambda: seen)  # the poller reads before, during and after the cancel
        cancelled = client.responses.cancel(created.id)
        first_read = client.responses.retrieve(created.id)
    finally:
        stop.set()
        poller.join()
    for answer in (cancelled, first_read):
        assert answer.status == "cancelled"
        assert [item.status for item in answer.output] == ["completed", "incomplete"]  # type: ignore[union-attr]
        assert answer.output_text
    assert first_read.output == cancelled.output
    assert seen[0][0] == "in_progress"
    assert all(count == 2 for status, count in seen if status == "cancelled"), seen
