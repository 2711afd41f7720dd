"""SSE framing: exact bytes, cheap header parsing, and decoding by the client's own SSE parser."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai._streaming import SSEDecoder
from openai.types.responses import ResponseErrorEvent

from resilient.protocol import events as ev
from resilient.protocol.errors import invalid_request, service_unavailable
from resilient.protocol.sse import KEEPALIVE, encode_frame, error_frame, parse_frame, stamped_frame


def stamped(event: dict[str, Any], seq: int) -> dict[str, Any]:
    return {**event, "sequence_number": seq}


def test_encode_frame_exact_bytes() -> None:
    event = stamped(ev.output_text_delta("msg_1", 0, 0, 'é\n"'), 12)
    frame = encode_frame(event)
    assert frame == (
        b"event: response.output_text.delta\n"
        b"id: 12\n"
        b'data: {"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,'
        b'"delta":"\xc3\xa9\\n\\"","logprobs":[],"sequence_number":12}\n\n'
    )
    assert frame.count(b"\n") == 4, "a JSON newline must be escaped, never split the data line"


@pytest.mark.parametrize("event", [
    ev.output_text_delta("msg_1", 0, 0, 'é\n"}'),
    {"type": "response.created", "response": {"id": "resp_1", "output": [{"content": [{"text": "}"}]}]}},
    {"type": "x", "sequence_number": 3},  # already stamped: the number given wins, as with a copy
])
def test_stamped_frame_is_the_frame_of_a_stamped_copy_and_leaves_the_event_as_it_was(event: dict[str, Any]) -> None:
    before = json.dumps(event)
    assert stamped_frame(event, 41) == encode_frame(stamped(event, 41))
    assert json.dumps(event) == before


@pytest.mark.parametrize(("event", "seq"), [({"type": ""}, 0), ({"type": "a\nb"}, 0), ({"delta": "x"}, 0),
                                            ({"type": "x"}, -1), ({"type": "x"}, True), ({}, 0)])
def test_stamped_frame_rejects_what_encode_frame_rejects(event: dict[str, Any], seq: Any) -> None:
    with pytest.raises(ValueError):
        stamped_frame(event, seq)


def test_parse_frame_round_trip() -> None:
    event = stamped(ev.output_text_delta("msg_1", 0, 0, "line1\nline2 ✓ \u2028"), 3)
    seq, event_type, data = parse_frame(encode_frame(event))
    assert (seq, event_type) == (3, "response.output_text.delta")
    assert json.loads(data) == event


@pytest.mark.parametrize(
    "frame",
    [
        KEEPALIVE,
        b"",
        b"event: x\ndata: {}\n\n",
        b"id: 1\nevent: x\ndata: {}\n\n",
        b"event: x\nid: one\ndata: {}\n\n",
        b"event: x\nid: -1\ndata: {}\n\n",
        b"event: x\nid: 1\ndata: {}\n",
        b"event: x\nid: 1\ndata: {}\ndata: {}\n\n",
    ],
)
def test_parse_frame_rejects_non_frames(frame: bytes) -> None:
    with pytest.raises(ValueError):
        parse_frame(frame)


@pytest.mark.parametrize(
    "event",
    [
        {"type": "response.output_text.delta"},
        {"type": "x", "sequence_number": True},
        {"type": "x", "sequence_number": -1},
        {"type": "x", "sequence_number": "1"},
        {"sequence_number": 1},
        {"type": "a\nb", "sequence_number": 1},
    ],
)
def test_encode_frame_rejects_unstamped_or_bad_events(event: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        encode_frame(event)


def _chunks(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


@pytest.mark.parametrize("chunk_size", [1, 7, 64, 1 << 20])
def test_client_sse_decoder_reads_our_frames(chunk_size: int) -> None:
    events = [
        stamped(e, seq)
        for seq, e in enumerate(
            [*ev.phase_opening_events(0, "msg_1"), ev.output_text_delta("msg_1", 0, 0, "naïve ✓\r\nx")]
        )
    ]
    stream = (
        encode_frame(events[0]) + KEEPALIVE + encode_frame(events[1]) + KEEPALIVE + encode_frame(events[2])
    )
    decoded = list(SSEDecoder().iter_bytes(iter(_chunks(stream, chunk_size))))
    assert [(s.event, s.id) for s in decoded] == [
        ("response.output_item.added", "0"),
        ("response.content_part.added", "1"),
        ("response.output_text.delta", "2"),
    ]
    assert [s.json() for s in decoded] == events
    for sse in decoded:
        ev.validate_event(sse.json())


def test_error_frame_is_a_response_error_event_without_an_id() -> None:
    frame = error_frame(invalid_request("bad", param="stream", code="invalid_value"), 9)
    assert frame.startswith(b"event: error\ndata: ")
    assert b"\nid:" not in frame
    (sse,) = SSEDecoder().iter_bytes(iter([frame]))
    assert sse.event == "error" and sse.id is None
    data = sse.json()
    assert data == {
        "type": "error",
        "code": "invalid_value",
        "message": "bad",
        "param": "stream",
        "sequence_number": 9,
    }
    model = ResponseErrorEvent.model_validate(data)
    assert (model.code, model.param, model.sequence_number) == ("invalid_value", "stream", 9)
    ev.validate_event(data)


def test_error_frame_does_not_move_last_event_id() -> None:
    stream = encode_frame(stamped(ev.output_text_delta("msg_1", 0, 0, "x"), 5)) + error_frame(
        service_unavailable(), 6
    )
    decoded = list(SSEDecoder().iter_bytes(iter([stream])))
    assert [(s.event, s.id) for s in decoded] == [("response.output_text.delta", "5"), ("error", "5")]
    assert decoded[1].json()["code"] == "service_unavailable"


def test_keepalive_is_a_bare_comment_line() -> None:
    assert KEEPALIVE == b": keep-alive\n"
    assert list(SSEDecoder().iter_bytes(iter([KEEPALIVE]))) == []


def test_a_blank_line_keepalive_would_break_the_client() -> None:
    """Why KEEPALIVE has no blank line: after a frame with an ``id``, the client's decoder turns a blank
    line into an empty event, which the client then fails to ``json.loads``."""
    first = encode_frame(stamped(ev.output_text_delta("msg_1", 0, 0, "x"), 0))
    decoded = list(SSEDecoder().iter_bytes(iter([first + b": keep-alive\n\n"])))
    assert [(s.event, s.data) for s in decoded] == [
        ("response.output_text.delta", decoded[0].data),
        (None, ""),
    ]
    with pytest.raises(json.JSONDecodeError):
        decoded[1].json()
    decoded = list(SSEDecoder().iter_bytes(iter([first + KEEPALIVE + KEEPALIVE])))
    assert [s.event for s in decoded] == ["response.output_text.delta"]
