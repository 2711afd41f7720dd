"""The on-blob layout of an event log: names, segment markers, index records, frame scanning.

Layout per response in container ``<prefix>-events``:

* ``<response_id>/seg-000000``, ``seg-000001``, … — append blobs holding SSE frames exactly as a
  client receives them (``event:``/``id:``/``data:`` + blank line), so replay is a byte copy. When a
  segment is full its last frame is the SSE comment ``: next-segment <n>``.
* ``<response_id>/index`` — a sparse, append-only offset index of fixed-width text records
  ``"{first_seq:012d} {segment:06d} {offset:015d}\\n"``: the event ``first_seq`` starts at ``offset`` of
  ``segment``. Every record is true when written; missing records only make a read longer.

Why text: a frame never contains ``\\n\\n`` inside (compact JSON escapes newlines), so a reader can split
on it and read ``id:``/``event:`` without parsing JSON.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from resilient.protocol.sse import parse_frame
from resilient.storage.ports import StoredEvent

FRAME_END = b"\n\n"
MARKER_PREFIX = b": next-segment "
INDEX_RECORD_LEN = 36
_SEGMENT_NAME = re.compile(r"^seg-(\d{6})$")


def segment_blob(response_id: str, segment: int) -> str:
    return f"{response_id}/seg-{segment:06d}"


def index_blob(response_id: str) -> str:
    return f"{response_id}/index"


def log_prefix(response_id: str) -> str:
    """The name prefix of every blob of one log (the trailing slash keeps ``a`` apart from ``ab``)."""
    return f"{response_id}/"


def segment_number(blob_name: str, response_id: str) -> int | None:
    """The segment number of ``<response_id>/seg-NNNNNN``, else None."""
    match = _SEGMENT_NAME.fullmatch(blob_name.removeprefix(log_prefix(response_id)))
    return int(match.group(1)) if match else None


def marker_frame(next_segment: int) -> bytes:
    """The comment frame that ends a full segment and names the next one."""
    return MARKER_PREFIX + str(next_segment).encode() + FRAME_END


def index_record(first_seq: int, segment: int, offset: int) -> bytes:
    return f"{first_seq:012d} {segment:06d} {offset:015d}\n".encode()


@dataclass(frozen=True, order=True)
class IndexEntry:
    first_seq: int
    segment: int
    offset: int


def parse_index(data: bytes) -> list[IndexEntry]:
    """All well-formed records (a torn or foreign line is skipped: the index is only a hint)."""
    entries: list[IndexEntry] = []
    for line in data.split(b"\n"):
        parts = line.split(b" ")
        if len(parts) == 3 and all(p.isdigit() for p in parts):
            entries.append(IndexEntry(int(parts[0]), int(parts[1]), int(parts[2])))
    return entries


def best_entry(entries: list[IndexEntry], starting_after: int) -> IndexEntry:
    """The latest position from which every event with ``seq > starting_after`` can be read."""
    target = starting_after + 1
    candidates = [e for e in entries if e.first_seq <= target]
    return max(candidates) if candidates else IndexEntry(0, 0, 0)


@dataclass
class Scan:
    """What :func:`scan_frames` found in one chunk of a segment."""

    events: list[StoredEvent] = field(default_factory=list)
    consumed: int = 0  # bytes up to and including the last complete frame
    last_seq: int = -1  # highest sequence number seen (returned or skipped)
    next_segment: int | None = None  # set when the chunk ends with a next-segment marker


def scan_frames(data: bytes, skip_through: int) -> Scan:
    """Split ``data`` into complete frames; keep events with ``seq > skip_through``, note a marker.

    Only the ``event:``/``id:`` header lines are read; an incomplete trailing frame is left unconsumed.
    """
    scan = Scan(last_seq=skip_through)
    end = data.rfind(FRAME_END)
    if end < 0:
        return scan
    body = data[: end + len(FRAME_END)]
    for piece in body.split(FRAME_END)[:-1]:
        frame = piece + FRAME_END
        if piece.startswith(b":"):
            if piece.startswith(MARKER_PREFIX):
                scan.next_segment = int(piece[len(MARKER_PREFIX) :])
            continue
        seq, event_type, _ = parse_frame(frame)
        if seq > scan.last_seq:
            scan.events.append(StoredEvent(seq, event_type, frame))
            scan.last_seq = seq
    scan.consumed = len(body)
    return scan


def first_frame_start(data: bytes, at_segment_start: bool) -> int | None:
    """Offset in ``data`` of its first whole frame (``data`` may begin mid-frame unless at the start)."""
    if at_segment_start:
        return 0
    boundary = data.find(FRAME_END)
    return None if boundary < 0 else boundary + len(FRAME_END)


def first_event_seq(data: bytes) -> int | None:
    """Sequence number of the first event frame in ``data`` (which starts on a frame), else None."""
    pos = 0
    while (end := data.find(FRAME_END, pos)) >= 0:
        if not data.startswith(b":", pos):
            return parse_frame(data[pos : end + len(FRAME_END)])[0]
        pos = end + len(FRAME_END)
    return None


@dataclass(frozen=True)
class Tail:
    """The end of a segment as :func:`scan_tail` sees it."""

    last_frame: bytes | None  # the last event frame, when one is fully inside the window
    next_segment: int | None  # set when the segment ends with a next-segment marker


def scan_tail(data: bytes, window_starts_at_zero: bool) -> Tail:
    """Find the last complete event frame in the tail window of a segment (which ends on a frame)."""
    pieces = data.split(FRAME_END)[:-1]
    if not window_starts_at_zero and pieces:
        pieces = pieces[1:]  # may start mid-frame
    next_segment: int | None = None
    if pieces and pieces[-1].startswith(MARKER_PREFIX):
        next_segment = int(pieces[-1][len(MARKER_PREFIX) :])
    for piece in reversed(pieces):
        if not piece.startswith(b":"):
            return Tail(piece + FRAME_END, next_segment)
    return Tail(None, next_segment)
