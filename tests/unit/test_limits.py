"""Time limits below the host's functionTimeout, and the host.json values the recovery time depends on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from resilient.limits import MARGIN_SECONDS, below_timeout, function_timeout_seconds, parse_timespan
from resilient.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
HOST = json.loads((ROOT / "host.json").read_text(encoding="utf-8"))
PROVIDER = HOST["extensions"]["durableTask"]["storageProvider"]
LEASE_SECONDS = 30  # DurableTask.AzureStorage's partition lease; not settable in host.json


@pytest.mark.parametrize(("text", "seconds"), [("00:30:00", 1800.0), ("00:05:00", 300.0), ("1.02:00:00", 93600.0),
                                               ("00:00:45.5", 45.0), ("00:30", 1800.0), ("2", 172800.0),
                                               ("-1", None), ("-00:00:01", None)])
def test_parse_timespan(text: str, seconds: float | None) -> None:
    assert parse_timespan(text) == seconds


@pytest.mark.parametrize("bad", ["30m", "", "00:60", "25:00:00", "-x"])
def test_parse_timespan_refuses_what_the_host_would_not_read(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_timespan(bad)


def test_function_timeout_comes_from_host_json_unless_the_app_setting_overrides_it(tmp_path: Path) -> None:
    assert function_timeout_seconds({}) == parse_timespan(HOST["functionTimeout"])
    assert function_timeout_seconds({"AzureFunctionsJobHost__functionTimeout": "00:10:00"}) == 600.0
    assert function_timeout_seconds({"AzureFunctionsJobHost__functionTimeout": "-1"}) is None
    (tmp_path / "host.json").write_text(json.dumps({"version": "2.0", "functionTimeout": "-1"}))
    assert function_timeout_seconds({"AzureWebJobsScriptRoot": str(tmp_path)}) is None
    (tmp_path / "host.json").write_text(json.dumps({"version": "2.0"}))
    assert function_timeout_seconds({"AzureWebJobsScriptRoot": str(tmp_path)}) == 1800.0  # Flex default


def test_limits_stay_below_the_timeout() -> None:
    assert below_timeout(None, 1800.0) == 1800.0 - MARGIN_SECONDS
    assert below_timeout("600", 1800.0) == 600.0
    assert below_timeout("7200", 1800.0) == 1800.0 - MARGIN_SECONDS  # an explicit value cannot exceed it
    assert below_timeout("0", 1800.0) == 1800.0 - MARGIN_SECONDS
    assert below_timeout(None, 90.0) == 45.0  # a short timeout keeps half of itself as the margin
    assert below_timeout(None, None) is None  # unbounded and nothing asked for
    assert below_timeout("3600", None) == 3600.0


def test_settings_carry_the_limits() -> None:
    settings = Settings.from_env({"AzureFunctionsJobHost__functionTimeout": "00:10:00",
                                  "RESILIENT_STREAM_MAX_SECONDS": "120"})
    assert settings.function_timeout_seconds == 600.0
    assert settings.stream_limit_seconds == 120.0
    assert settings.phase_deadline_seconds == 540.0
    unbounded = Settings.from_env({"AzureFunctionsJobHost__functionTimeout": "-1"})
    assert unbounded.stream_limit_seconds is None and unbounded.phase_deadline_seconds is None


def _seconds(value: str) -> float:
    found = parse_timespan(value)
    assert found is not None
    return found


def test_host_json_passes_the_durable_extensions_own_validation() -> None:
    """AzureStorageOptions.Validate: control-queue visibility 1..60 min, partitions 1..16, polling > 0."""
    assert 60 <= _seconds(PROVIDER["controlQueueVisibilityTimeout"]) <= 3600
    assert PROVIDER["partitionCount"] in range(1, 17)
    assert _seconds(PROVIDER["maxQueuePollingInterval"]) > 0
    assert _seconds(PROVIDER["workItemQueueVisibilityTimeout"]) > 0


def test_work_a_dead_host_had_taken_comes_back_well_within_two_minutes() -> None:
    """After a whole-host kill, dequeued messages reappear when their visibility timeout expires (the new
    host needs the old partition leases to lapse too), and an idle host polls at most every
    maxQueuePollingInterval. Activity and orchestration messages are renewed every ~30 s while they run
    (DurableTask.Core RenewUntil), so a one-minute visibility does not re-deliver a long activity."""
    visible_again = max(_seconds(PROVIDER["controlQueueVisibilityTimeout"]),
                        _seconds(PROVIDER["workItemQueueVisibilityTimeout"]), LEASE_SECONDS)
    assert visible_again + _seconds(PROVIDER["maxQueuePollingInterval"]) <= 75
    assert _seconds(PROVIDER["workItemQueueVisibilityTimeout"]) > 35  # renewal every 30 s keeps a running one


def test_function_timeout_is_bounded_so_the_host_stays_a_watchdog() -> None:
    timeout = parse_timespan(HOST["functionTimeout"])
    assert timeout is not None and timeout > 2 * MARGIN_SECONDS
