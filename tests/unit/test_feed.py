"""The in-process feed of committed blocks: delivery, bounds, threads, and the 'phase streams here' flag."""

from __future__ import annotations

import asyncio
import threading

from resilient.storage.feed import CommittedBlock, CommittedFeed
from resilient.storage.ports import ReadCursor, StoredEvent


def block(seq: int, size: int = 10) -> CommittedBlock:
    frame = b"x" * size
    return CommittedBlock((StoredEvent(seq, "response.output_text.delta", frame),), ReadCursor(0, seq * size, seq))


async def test_blocks_reach_every_subscriber_of_that_response_only() -> None:
    feed = CommittedFeed()
    with feed.subscribe("resp_a") as a1, feed.subscribe("resp_a") as a2, feed.subscribe("resp_b") as b:
        feed.publish("resp_a", block(1))
        feed.publish("resp_a", block(2))
        assert await a1.wait(1.0) and await a2.wait(1.0)
        assert [x.cursor.last_sequence_number for x in a1.drain()[0]] == [1, 2]
        assert [x.cursor.last_sequence_number for x in a2.drain()[0]] == [1, 2]
        assert not await b.wait(0.01)
        assert b.drain() == ([], False)
    feed.publish("resp_a", block(3))  # nobody listens any more: dropped, no error


async def test_a_subscriber_that_falls_behind_drops_its_blocks_and_is_told() -> None:
    feed = CommittedFeed(max_pending_bytes=25)
    with feed.subscribe("resp_a") as sub:
        feed.publish("resp_a", block(1))
        feed.publish("resp_a", block(2))
        assert sub.drain() == ([block(1), block(2)], False)
        for seq in range(3, 6):
            feed.publish("resp_a", block(seq))  # 30 bytes pending > 25: everything pending is dropped
        feed.publish("resp_a", block(6))
        blocks, overflowed = sub.drain()
        assert overflowed and [x.cursor.last_sequence_number for x in blocks] == [6]
        assert sub.drain() == ([], False)


async def test_a_block_published_from_another_thread_wakes_the_subscriber() -> None:
    feed = CommittedFeed()
    with feed.subscribe("resp_a") as sub:
        thread = threading.Thread(target=feed.publish, args=("resp_a", block(7)))
        thread.start()
        assert await sub.wait(2.0)
        thread.join()
        await asyncio.sleep(0)
        assert [x.cursor.last_sequence_number for x in sub.drain()[0]] == [7]


async def test_writing_marks_the_response_and_wakes_readers_when_it_ends() -> None:
    feed = CommittedFeed()
    with feed.subscribe("resp_a") as sub:
        assert not feed.writing_here("resp_a")
        with feed.writing("resp_a"):
            with feed.writing("resp_a"):
                assert feed.writing_here("resp_a")
            assert feed.writing_here("resp_a")  # still one phase streaming here
            assert not await sub.wait(0.01)
        assert not feed.writing_here("resp_a")
        assert await sub.wait(0.01)  # readers wake to poll storage: the next phase may run elsewhere
        assert sub.drain() == ([], False)


async def test_an_expected_run_is_known_until_it_expires_or_is_forgotten() -> None:
    feed = CommittedFeed()
    with feed.subscribe("resp_a") as sub:
        feed.expect("resp_a", 0.05)
        assert feed.expected_here("resp_a") and not feed.writing_here("resp_a")
        await asyncio.sleep(0.1)
        assert not feed.expected_here("resp_a")  # expired
        feed.expect("resp_a", 30.0)
        assert feed.expected_here("resp_a")
        feed.expect("resp_a", 0)
        assert not feed.expected_here("resp_a")
        assert await sub.wait(0.01)  # forgetting wakes readers: they poll storage again at once


async def test_the_feed_remembers_what_was_published_here() -> None:
    feed = CommittedFeed()
    assert feed.published_through("resp_a") == -1
    feed.publish("resp_a", block(4))  # nobody subscribed: still remembered
    feed.publish("resp_a", None)
    assert feed.published_through("resp_a") == 4 and feed.published_through("resp_b") == -1
