"""The SDK's history timestamps parsed by the standard library: the same values as ``dateutil``, and the
same replay, action by action, when the real SDK replays a history with crash timers either way."""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from dateutil.parser import parse as dateutil_parse
from hypothesis import given
from hypothesis import strategies as st

from resilient.functions import durable_timestamps
from resilient.functions.durable_timestamps import SDK_MODULES, install, parse_timestamp

DATETIME_STRING_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"  # how the SDK writes a timer's fireAt


def _same(ours: datetime, theirs: datetime) -> None:
    assert ours == theirs
    assert (ours.tzinfo is None) == (theirs.tzinfo is None)
    assert ours.utcoffset() == theirs.utcoffset()
    assert ours.replace(tzinfo=None) == theirs.replace(tzinfo=None)  # same wall time, not only the instant
    assert ours.strftime(DATETIME_STRING_FORMAT) == theirs.strftime(DATETIME_STRING_FORMAT)


@given(moment=st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)),
       digits=st.integers(min_value=0, max_value=9), extra=st.integers(min_value=0, max_value=999),
       suffix=st.sampled_from(["Z", "", "+00:00", "-00:00", "+05:30", "-08:00", "+14:00"]))
def test_round_trip_timestamps_parse_to_what_dateutil_gives(moment: datetime, digits: int, extra: int,
                                                            suffix: str) -> None:
    fraction = f"{moment.microsecond:06d}{extra:03d}"[:digits]
    text = moment.replace(microsecond=0).isoformat() + (f".{fraction}" if digits else "") + suffix
    assert durable_timestamps.ROUND_TRIP.fullmatch(text)
    _same(parse_timestamp(text), dateutil_parse(text))


@pytest.mark.parametrize("text", [
    "2026-12-01T23:18:26.1234567Z",  # .NET "o" format, as the host sends history timestamps
    "2026-12-01T23:18:26.9999999Z",  # truncated to microseconds by both, not rounded into the next second
    "0001-01-01T00:00:00",  # DateTime.MinValue, as a status payload may carry it
])
def test_the_hosts_forms(text: str) -> None:
    _same(parse_timestamp(text), dateutil_parse(text))


@pytest.mark.parametrize("text", ["Dec 1 2026 23:18:26", "2026-12-01 23:18:26", "20261201T231826Z",
                                  "2026-12-01T23:18:26 UTC"])
def test_other_text_is_left_to_dateutil(text: str) -> None:
    assert not durable_timestamps.ROUND_TRIP.fullmatch(text)
    _same(parse_timestamp(text), dateutil_parse(text))


def test_parser_options_are_left_to_dateutil() -> None:
    assert parse_timestamp("01/02/2026", dayfirst=True) == datetime(2026, 2, 1)


@pytest.fixture
def sdk_parsers() -> Iterator[list[Any]]:
    """The SDK modules whose parser install() replaces, restored afterwards."""
    modules = [importlib.import_module(name) for name in SDK_MODULES]
    before = [module.dt_parse for module in modules]
    yield modules
    for module, parser in zip(modules, before, strict=True):
        module.dt_parse = parser


def test_install_reaches_the_sdks_history_events_and_status(sdk_parsers: list[Any]) -> None:
    from azure.durable_functions.models.DurableOrchestrationStatus import DurableOrchestrationStatus
    from azure.durable_functions.models.history.HistoryEvent import HistoryEvent

    for module in sdk_parsers:
        module.dt_parse = dateutil_parse
    install()
    assert all(module.dt_parse is parse_timestamp for module in sdk_parsers)
    event = HistoryEvent(EventType=12, EventId=-1, IsPlayed=False, Timestamp="2026-12-01T23:18:26.1234567Z")
    assert event.timestamp == datetime(2026, 12, 1, 23, 18, 26, 123456, tzinfo=UTC)
    status = DurableOrchestrationStatus(createdTime="2026-12-01T23:18:26Z", lastUpdatedTime="2026-12-01T23:18:27Z")
    assert status.created_time == datetime(2026, 12, 1, 23, 18, 26, tzinfo=UTC)


def test_the_first_episode_installs_it(sdk_parsers: list[Any]) -> None:
    for module in sdk_parsers:
        module.dt_parse = dateutil_parse
    from tests.fresh_app import fresh_app
    from tests.replay.harness import Replay, orchestrator_handle

    Replay(orchestrator_handle(fresh_app(), "responses_orchestrator"), {"response_id": "resp_ts"}).run()
    assert all(module.dt_parse is parse_timestamp for module in sdk_parsers)


def _replay_with_crash_timers(history_timestamps: str) -> list[tuple[Any, ...]]:
    """A run whose first phase's worker dies twice (two crash timers), replayed to the end by the SDK."""
    from tests.fresh_app import fresh_app
    from tests.replay.harness import Replay, drive, orchestrator_handle
    from tests.replay.test_orchestrator_healing import WORKER_EXIT, Script

    class NetTimestamps(Replay):  # the host's 7-digit .NET form, not Python's isoformat
        def _event(self, event_type: int, event_id: int = -1, **fields: Any) -> dict[str, Any]:
            event = super()._event(event_type, event_id, **fields)
            if history_timestamps == "net":
                event["Timestamp"] = self.now.strftime("%Y-%m-%dT%H:%M:%S.%f") + "3Z"
            return event

    replay = NetTimestamps(orchestrator_handle(fresh_app(), "responses_orchestrator"), {"response_id": "resp_ts"},
                           now=datetime(2026, 12, 1, 23, 59, 59, 999000, tzinfo=timezone(timedelta(0))))
    episode = drive(replay, Script(phases=2, failures={"run_phase:0": [WORKER_EXIT] * 2}))
    assert episode.is_done and episode.error is None
    return [(a["actionType"], a.get("functionName"), a.get("fireAt"), a.get("input")) for a in episode.actions] + [
        ("delays", json.dumps(replay.timer_delays()), None, None)]


@pytest.mark.parametrize("form", ["python", "net"])
def test_a_replay_is_the_same_with_either_parser(sdk_parsers: list[Any], form: str) -> None:
    install()
    fast = _replay_with_crash_timers(form)
    for module in sdk_parsers:
        module.dt_parse = dateutil_parse
    # The first episode would install the fast parser again: keep dateutil for this replay.
    original_install = durable_timestamps.install
    durable_timestamps.install = lambda: None
    try:
        slow = _replay_with_crash_timers(form)
        assert all(module.dt_parse is dateutil_parse for module in sdk_parsers)
    finally:
        durable_timestamps.install = original_install
    assert fast == slow
    assert sum(1 for action in fast if action[2] is not None) == 2  # both crash timers' fireAt compared
