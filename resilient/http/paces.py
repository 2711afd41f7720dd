"""How often a tail of the event log reads storage, asks whether the run finished, and keeps its connection
alive (:func:`resilient.http.streaming.tail_events`): the paces, and the two sets of them the service uses."""

from __future__ import annotations

from dataclasses import dataclass

POLL_MIN_SECONDS = 0.02
POLL_MAX_SECONDS = 0.5
# While a phase of the response streams in this process its blocks arrive through the feed; storage is then
# polled only this often, for a writer elsewhere (which would have fenced the local one off).
POLL_WHILE_LOCAL_SECONDS = 2.0
# Between activities of a run driven from this process: the next one probably runs here too (and then
# arrives through the feed at once), but may run on another instance; poll at the idle pace, not from
# POLL_MIN, and back off towards POLL_WHILE_LOCAL_SECONDS while nothing comes (under load the hop between
# two activities takes seconds, and a fixed pace would read storage more often per event just then).
POLL_WHILE_EXPECTED_SECONDS = POLL_MAX_SECONDS


@dataclass(frozen=True)
class Paces:
    """How often a tail reads storage, asks whether the run finished, and keeps its connection alive.

    Under load every pace but ``poll_min`` stretches with the process's load factor (``widen``): a run lasts
    longer then, and fixed paces would read storage more often per event just when the process has the least
    CPU to spare; events that flow are still followed at ``poll_min``."""

    poll_min: float = POLL_MIN_SECONDS
    poll_max: float = POLL_MAX_SECONDS  # the idle back-off's ceiling
    poll_while_local: float = POLL_WHILE_LOCAL_SECONDS
    poll_while_expected: float = POLL_WHILE_EXPECTED_SECONDS
    # ``finished`` is asked only after this long without new events, so a client that asked for a
    # ``starting_after`` past the terminal event gets an empty, closed stream instead of an endless one.
    finished_check_seconds: float = 2.0
    keepalive_seconds: float | None = 15.0  # None: no keep-alive frames (nobody reads the bytes)


STREAMED = Paces()
WAITED_FOR = Paces(keepalive_seconds=None)  # a synchronous request's tail: it only waits for the terminal event
