"""Server-sent-event framing.

A frame is exactly ``event: <type>\\nid: <sequence_number>\\ndata: <compact json>\\n\\n``. The ``id`` line
makes a browser's or client's ``Last-Event-ID`` equal to the last sequence number it saw, so a
reconnect resumes exactly after it (R2). The JSON is compact and single-line (``json.dumps`` escapes
every CR and LF inside strings), so the three-line layout is fixed and :func:`parse_frame` can read the
header lines without parsing the JSON: replay can filter stored frames by sequence number cheaply.
"""

from __future__ import annotations

import json
from typing import Any

from resilient.protocol.errors import ApiError

# A comment line WITHOUT the usual blank line after it. The ``openai`` client's SSEDecoder keeps the last
# ``id`` across events (as the spec says) and therefore dispatches an empty event on *any* blank line once
# an id has been seen; ``json.loads("")`` then kills the client's stream. ``: keep-alive\n\n`` after the
# first frame crashes ``client.responses.create(stream=True)``; a bare comment line is ignored by every
# SSE parser and still puts bytes on the wire for idle-timeout proxies.
KEEPALIVE = b": keep-alive\n"

_EVENT = b"event: "
_ID = b"id: "
_DATA = b"data: "
_END = b"\n\n"


# One encoder for every frame: ``json.dumps`` with options builds a new encoder on every call, a large
# share of a frame's cost (docs/PERFORMANCE.md, "What makes the hot path cheap").
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def compact_json(value: Any) -> str:
    """Compact, single-line JSON (non-ASCII kept as is): SSE frames, and what storage keeps."""
    return _ENCODER.encode(value)


def encode_frame(event: dict[str, Any]) -> bytes:
    """Frame a stamped event. Raises ValueError if ``type`` or ``sequence_number`` is missing."""
    event_type = event.get("type")
    seq = event.get("sequence_number")
    if not isinstance(event_type, str) or not event_type or "\n" in event_type or "\r" in event_type:
        raise ValueError(f"event needs a one-line string 'type', got {event_type!r}")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        raise ValueError(f"event needs a non-negative int 'sequence_number', got {seq!r}")
    return f"event: {event_type}\nid: {seq}\ndata: {compact_json(event)}\n\n".encode()


def stamped_frame(event: dict[str, Any], sequence_number: int) -> bytes:
    """The frame of ``event`` stamped with ``sequence_number``: byte for byte :func:`encode_frame` of
    ``{**event, "sequence_number": n}``, without copying or changing the event (the number is written into
    the JSON text as its last member). Raises ValueError as :func:`encode_frame` does."""
    if not event or "sequence_number" in event:
        return encode_frame({**event, "sequence_number": sequence_number})
    event_type = event.get("type")
    if not isinstance(event_type, str) or not event_type or "\n" in event_type or "\r" in event_type:
        raise ValueError(f"event needs a one-line string 'type', got {event_type!r}")
    if not isinstance(sequence_number, int) or isinstance(sequence_number, bool) or sequence_number < 0:
        raise ValueError(f"event needs a non-negative int 'sequence_number', got {sequence_number!r}")
    body = _ENCODER.encode(event)  # a JSON object: ends with "}"
    return (f"event: {event_type}\nid: {sequence_number}\ndata: {body[:-1]},"
            f"\"sequence_number\":{sequence_number}}}\n\n").encode()


def parse_frame(frame: bytes) -> tuple[int, str, bytes]:
    """``(sequence_number, type, data json bytes)`` of a frame made by :func:`encode_frame`.

    Only the two header lines are inspected; the JSON payload is returned as-is. Raises ValueError on
    anything that is not such a frame (a keep-alive comment included).
    """
    parts = frame.split(b"\n", 2)
    if (
        len(parts) != 3
        or not parts[0].startswith(_EVENT)
        or not parts[1].startswith(_ID)
        or not parts[2].startswith(_DATA)
        or not parts[2].endswith(_END)
    ):
        raise ValueError("not an event frame")
    id_text = parts[1][len(_ID) :]
    if not id_text.isdigit():
        raise ValueError(f"bad frame id {id_text[:32]!r}")
    data = parts[2][len(_DATA) : -len(_END)]
    if b"\n" in data:
        raise ValueError("frame data spans several lines")
    return int(id_text), parts[0][len(_EVENT) :].decode(), data


def error_frame(api_error: ApiError, sequence_number: int) -> bytes:
    """An in-stream ``error`` event (``ResponseErrorEvent``) for a failure after the 200 was sent.

    There is deliberately no ``id:`` line: the error is not part of the stored log, so it must not move
    the client's ``Last-Event-ID`` (a reconnect must resume after the last *stored* event).
    ``sequence_number`` is still required by the client type; pass the next unused number.
    """
    data = {
        "type": "error",
        "code": api_error.code,
        "message": api_error.message,
        "param": api_error.param,
        "sequence_number": sequence_number,
    }
    return f"event: error\ndata: {compact_json(data)}\n\n".encode()
