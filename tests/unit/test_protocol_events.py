"""Every event builder yields an event the client validates strictly as the exact expected class."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from openai._models import validate_type
from openai._types import omit
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import (
    ResponseCompletedEvent,
    ResponseContentPartAddedEvent,
    ResponseContentPartDoneEvent,
    ResponseCreatedEvent,
    ResponseFailedEvent,
    ResponseIncompleteEvent,
    ResponseInProgressEvent,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseQueuedEvent,
    ResponseStreamEvent,
    ResponseTextDeltaEvent,
    ResponseTextDoneEvent,
)
from pydantic import BaseModel, TypeAdapter

from resilient.protocol import events as ev
from resilient.protocol._strict import unexpected_fields
from resilient.protocol.items import output_message, output_text_part
from resilient.protocol.response import build_response, usage_for

ADAPTER: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)


def response(status: str, output: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "response_id": "resp_1",
        "created_at": 100,
        "model": "m",
        "status": status,
        "output": output or [],
        "background": True,
        "store": True,
        "instructions": None,
        "metadata": None,
        "previous_response_id": None,
        "conversation_id": None,
        "error": None,
        "incomplete_details": None,
        "usage": None,
        "completed_at": None,
    }
    fields.update(extra)
    return build_response(**fields)


FINAL = [output_message("msg_1", "done")]

BUILDERS: list[tuple[str, Callable[[], dict[str, Any]], type[BaseModel]]] = [
    ("created", lambda: ev.response_created(response("queued")), ResponseCreatedEvent),
    ("created in_progress", lambda: ev.response_created(response("in_progress")), ResponseCreatedEvent),
    ("queued", lambda: ev.response_queued(response("queued")), ResponseQueuedEvent),
    ("in_progress", lambda: ev.response_in_progress(response("in_progress", FINAL)), ResponseInProgressEvent),
    (
        "completed",
        lambda: ev.response_completed(response("completed", FINAL, usage=usage_for(1, 1), completed_at=101)),
        ResponseCompletedEvent,
    ),
    (
        "failed",
        lambda: ev.response_failed(response("failed", error={"code": "server_error", "message": "boom"})),
        ResponseFailedEvent,
    ),
    ("cancelled", lambda: ev.response_failed(response("cancelled")), ResponseFailedEvent),
    (
        "incomplete",
        lambda: ev.response_incomplete(
            response("incomplete", incomplete_details={"reason": "max_output_tokens"})
        ),
        ResponseIncompleteEvent,
    ),
    (
        "item added",
        lambda: ev.output_item_added(0, output_message("msg_1", "", status="in_progress")),
        ResponseOutputItemAddedEvent,
    ),
    ("item done", lambda: ev.output_item_done(2, output_message("msg_1", "x")), ResponseOutputItemDoneEvent),
    (
        "part added",
        lambda: ev.content_part_added("msg_1", 0, 0, output_text_part("")),
        ResponseContentPartAddedEvent,
    ),
    (
        "part done",
        lambda: ev.content_part_done("msg_1", 0, 0, output_text_part("x")),
        ResponseContentPartDoneEvent,
    ),
    ("delta", lambda: ev.output_text_delta("msg_1", 1, 0, 'héllo\n"x"'), ResponseTextDeltaEvent),
    ("text done", lambda: ev.output_text_done("msg_1", 1, 0, "full text"), ResponseTextDoneEvent),
    ("opening[0]", lambda: ev.phase_opening_events(3, "msg_9")[0], ResponseOutputItemAddedEvent),
    ("opening[1]", lambda: ev.phase_opening_events(3, "msg_9")[1], ResponseContentPartAddedEvent),
    ("closing[0]", lambda: ev.phase_closing_events(3, "msg_9", "t", "completed")[0], ResponseTextDoneEvent),
    (
        "closing[1]",
        lambda: ev.phase_closing_events(3, "msg_9", "t", "completed")[1],
        ResponseContentPartDoneEvent,
    ),
    (
        "closing[2]",
        lambda: ev.phase_closing_events(3, "msg_9", "t", "incomplete")[2],
        ResponseOutputItemDoneEvent,
    ),
]


@pytest.mark.parametrize(("build", "cls"), [b[1:] for b in BUILDERS], ids=[b[0] for b in BUILDERS])
def test_builder_validates_strictly_as_its_class(
    build: Callable[[], dict[str, Any]], cls: type[BaseModel]
) -> None:
    event = build()
    assert "sequence_number" not in event, "the event-log writer stamps sequence numbers"
    event["sequence_number"] = 7
    model = ADAPTER.validate_python(event)
    assert type(model) is cls
    assert model.model_dump(exclude_unset=True) == event  # nothing silently dropped
    assert unexpected_fields(model) == []
    client_model: object = validate_type(type_=ResponseStreamEvent, value=event)  # type: ignore[arg-type]
    assert type(client_model) is cls
    ev.validate_event(event)


def test_phase_events_follow_the_openai_order_and_shapes() -> None:
    opening = ev.phase_opening_events(1, "msg_a")
    closing = ev.phase_closing_events(1, "msg_a", "all text", "completed")
    assert [e["type"] for e in opening + closing] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
    assert opening[0]["item"] == {
        "id": "msg_a",
        "type": "message",
        "role": "assistant",
        "status": "in_progress",
        "content": [],
    }
    assert opening[1]["part"] == output_text_part("")
    assert all(e["output_index"] == 1 for e in opening + closing)
    assert all(e["item_id"] == "msg_a" and e["content_index"] == 0 for e in opening[1:] + closing[:2])
    assert closing[0]["text"] == "all text" and closing[1]["part"]["text"] == "all text"
    assert closing[2]["item"] == output_message("msg_a", "all text", status="completed")
    assert ev.phase_closing_events(1, "msg_a", "cut", "incomplete")[2]["item"]["status"] == "incomplete"


def test_client_stream_accumulator_rebuilds_the_text() -> None:
    """Run a whole two-phase run through the client's own ``ResponseStreamState``."""
    final = [output_message("msg_1", "Hello world"), output_message("msg_2", "Bye")]
    events = [ev.response_created(response("queued")), ev.response_in_progress(response("in_progress"))]
    for index, (item_id, chunks) in enumerate([("msg_1", ["Hello", " world"]), ("msg_2", ["Bye"])]):
        events += ev.phase_opening_events(index, item_id)
        events += [ev.output_text_delta(item_id, index, 0, chunk) for chunk in chunks]
        events += ev.phase_closing_events(index, item_id, "".join(chunks), "completed")
    events.append(
        ev.response_completed(response("completed", final, usage=usage_for(2, 3), completed_at=105))
    )
    state: ResponseStreamState[Any] = ResponseStreamState(input_tools=omit, text_format=omit)
    seen: list[Any] = []
    for seq, event in enumerate(events):
        event["sequence_number"] = seq
        ev.validate_event(event)
        seen += state.handle_event(ADAPTER.validate_python(event))
    deltas = [e for e in seen if e.type == "response.output_text.delta"]
    assert [d.snapshot for d in deltas] == ["Hello", "Hello world", "Bye"]
    assert seen[-1].type == "response.completed"
    assert seen[-1].response.output_text == "Hello worldBye"


def test_events_do_not_alias_the_callers_objects() -> None:
    resp = response("in_progress")
    item = output_message("msg_1", "a")
    part = output_text_part("a")
    created, added, part_added = (
        ev.response_created(resp),
        ev.output_item_added(0, item),
        ev.content_part_added("msg_1", 0, 0, part),
    )
    resp["status"] = "completed"
    resp["output"].append(item)
    item["content"][0]["text"] = "changed"
    part["text"] = "changed"
    assert created["response"]["status"] == "in_progress" and created["response"]["output"] == []
    assert added["item"]["content"][0]["text"] == "a"
    assert part_added["part"]["text"] == "a"


@pytest.mark.parametrize(
    ("builder", "status"),
    [
        (ev.response_completed, "failed"),
        (ev.response_completed, "in_progress"),
        (ev.response_failed, "completed"),
        (ev.response_incomplete, "completed"),
    ],
)
def test_terminal_builders_refuse_a_mismatched_status(builder: Callable[..., Any], status: str) -> None:
    with pytest.raises(ValueError, match=status):
        builder(response(status))


def test_terminal_event_types() -> None:
    expected = {"response.completed", "response.failed", "response.incomplete"}
    assert expected == ev.TERMINAL_EVENT_TYPES
    assert "response.cancelled" not in ev.event_classes()
    assert set(ev.TERMINAL_EVENT_TYPES) <= set(ev.event_classes())


def _stamped(event: dict[str, Any]) -> dict[str, Any]:
    return {**event, "sequence_number": 0}


def test_validate_event_rejects_missing_fields() -> None:
    delta = _stamped(ev.output_text_delta("msg_1", 0, 0, "x"))
    for field in ("delta", "logprobs", "item_id", "sequence_number", "output_index"):
        broken = {k: v for k, v in delta.items() if k != field}
        with pytest.raises(ValueError):
            ev.validate_event(broken)


def test_validate_event_rejects_unknown_type_extras_and_wrong_types() -> None:
    with pytest.raises(ValueError, match="unknown event type"):
        ev.validate_event(
            {"type": "response.cancelled", "sequence_number": 0, "response": response("cancelled")}
        )
    with pytest.raises(ValueError, match="unknown event type"):
        ev.validate_event({"sequence_number": 0})
    with pytest.raises(ValueError, match="output_idx"):
        ev.validate_event({**_stamped(ev.output_text_delta("msg_1", 0, 0, "x")), "output_idx": 0})
    with pytest.raises(ValueError):
        ev.validate_event({**_stamped(ev.output_text_delta("msg_1", 0, 0, "x")), "output_index": "0"})
    # a text.done body labelled as a delta: the required ``delta`` is missing
    done_as_delta = {
        **_stamped(ev.output_text_done("msg_1", 0, 0, "x")),
        "type": "response.output_text.delta",
    }
    with pytest.raises(ValueError):
        ev.validate_event(done_as_delta)
    bad_item = _stamped(ev.output_item_added(0, output_message("msg_1", "x")))
    bad_item = copy.deepcopy(bad_item)
    bad_item["item"]["status"] = "finished"
    with pytest.raises(ValueError):
        ev.validate_event(bad_item)
