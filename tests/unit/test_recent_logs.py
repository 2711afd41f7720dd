"""What a process remembers of the logs it wrote: only true prefixes from event 0, bounded, for a while."""

from __future__ import annotations

import pytest

from resilient.storage.feed import CommittedFeed
from resilient.storage.ports import CommittedBlock, ReadCursor, StoredEvent
from resilient.storage.recent import RecentLogs


def block(first: int, last: int, size: int = 10) -> CommittedBlock:
    events = tuple(StoredEvent(seq, "response.output_text.delta", b"x" * size) for seq in range(first, last + 1))
    return CommittedBlock(events, ReadCursor(0, (last + 1) * size, last))


def seqs(found: CommittedBlock | None) -> list[int]:
    assert found is not None
    return [event.sequence_number for event in found.events]


def test_a_log_committed_here_from_its_first_event_is_served_after_any_position() -> None:
    logs = RecentLogs()
    logs.add("resp_a", block(0, 2))
    logs.add("resp_a", block(3, 5))
    assert seqs(logs.after("resp_a", -1)) == [0, 1, 2, 3, 4, 5]
    found = logs.after("resp_a", 3)
    assert seqs(found) == [4, 5]
    assert found is not None and found.cursor == ReadCursor(0, 60, 5)  # the storage position after the prefix
    assert logs.after("resp_a", 5) is None  # nothing new remembered: the reader asks storage
    assert logs.after("resp_b", -1) is None


def test_a_log_whose_start_was_written_elsewhere_is_not_remembered() -> None:
    logs = RecentLogs()
    logs.add("resp_a", block(4, 6))
    assert logs.after("resp_a", -1) is None and logs.size == 0


def test_a_block_written_elsewhere_in_between_forgets_the_log() -> None:
    logs = RecentLogs()
    logs.add("resp_a", block(0, 2))
    logs.add("resp_a", block(5, 6))  # events 3-4 were committed by another instance
    assert logs.after("resp_a", -1) is None and logs.size == 0
    logs.add("resp_a", block(7, 8))  # and it stays forgotten
    assert logs.after("resp_a", -1) is None


def test_memory_is_bounded_per_log_and_in_total_oldest_first() -> None:
    logs = RecentLogs(max_bytes=100, max_log_bytes=60)
    logs.add("resp_big", block(0, 4))
    logs.add("resp_big", block(5, 6))  # 70 bytes > 60: not remembered
    assert logs.after("resp_big", -1) is None
    logs.add("resp_a", block(0, 4))  # 50
    logs.add("resp_b", block(0, 4))  # 100
    logs.add("resp_c", block(0, 0))  # 110 > 100: resp_a goes
    assert logs.after("resp_a", -1) is None
    assert seqs(logs.after("resp_b", -1)) == [0, 1, 2, 3, 4] and seqs(logs.after("resp_c", -1)) == [0]
    assert logs.size == 60


def test_an_old_log_is_read_from_storage_again(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr("resilient.storage.recent.time.monotonic", lambda: now[0])
    logs = RecentLogs(keep_seconds=120)
    logs.add("resp_a", block(0, 1))
    now[0] += 119
    assert seqs(logs.after("resp_a", -1)) == [0, 1]
    now[0] += 2
    assert logs.after("resp_a", -1) is None and logs.size == 0


def test_the_feed_remembers_what_it_publishes_and_forgets_a_deleted_log() -> None:
    feed = CommittedFeed()
    feed.publish("resp_a", block(0, 1))
    feed.publish("resp_a", None)  # a wake-up carries nothing to remember
    feed.publish("resp_a", block(2, 2))
    assert seqs(feed.recent("resp_a", 0)) == [1, 2]
    feed.forget_log("resp_a")
    assert feed.recent("resp_a", -1) is None
