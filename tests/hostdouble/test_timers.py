"""Timer triggers under the double: schedule (NCRONTAB from an app setting), runOnStartup, past-due."""

from __future__ import annotations

import faulthandler
import json
import os
import secrets
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from azure.storage.blob import BlobServiceClient

from tests.hostdouble.api import HOST_ID_SETTING
from tests.hostdouble.testkit import start_double, wait_until

TEST_TIMEOUT = 90
NEVER = "0 0 0 1 1 *"  # once a year


@pytest.fixture(autouse=True)
def _bounded() -> Iterator[None]:
    faulthandler.dump_traceback_later(TEST_TIMEOUT, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


def _ticks(folder: Path, past_due: bool) -> int:
    return len(list(folder.glob(f"tick.{str(past_due).lower()}.*")))


def _counted(double: Any, invocations: int) -> bool:
    """The double counts a timer run once its invocation has answered, a moment after the function wrote
    its tick: a check of the counts waits for that too."""
    return int(double.stats()["timer_runs"]["ticker"]["invocations"]) >= invocations


def test_timer_runs_on_its_schedule(tmp_path: Path) -> None:
    with start_double(env={"FIXTURE_TIMER_SCHEDULE": "*/1 * * * * *", "FIXTURE_TIMER_DIR": str(tmp_path)}) as double:
        wait_until(lambda: _ticks(tmp_path, False) >= 3 and _counted(double, 3), timeout=20)
        runs = double.stats()["timer_runs"]["ticker"]
        assert runs["schedule"] == "*/1 * * * * *" and runs["invocations"] >= 3 and runs["past_due"] == 0
        assert runs["last_outcome"] == "Succeeded"


def test_run_on_startup_runs_once_at_start(tmp_path: Path) -> None:
    env = {"FIXTURE_TIMER_SCHEDULE": NEVER, "FIXTURE_TIMER_DIR": str(tmp_path), "FIXTURE_TIMER_RUN_ON_STARTUP": "true"}
    with start_double(env=env) as double:
        wait_until(lambda: _ticks(tmp_path, False) == 1 and _counted(double, 1), timeout=20)
        assert double.stats()["timer_runs"]["ticker"]["invocations"] == 1


def test_a_timer_whose_next_run_passed_while_no_host_ran_is_past_due(tmp_path: Path) -> None:
    host_id = f"hostdouble-{secrets.token_hex(4)}"
    connection = os.environ.get("AzureWebJobsStorage", "UseDevelopmentStorage=true")
    status = {"Last": (datetime.now(UTC) - timedelta(hours=2)).isoformat(),
              "Next": (datetime.now(UTC) - timedelta(hours=1)).isoformat(),
              "LastUpdated": (datetime.now(UTC) - timedelta(hours=2)).isoformat()}
    with BlobServiceClient.from_connection_string(connection) as blobs:
        container = blobs.get_container_client("azure-webjobs-hosts")
        if not container.exists():
            container.create_container()
        container.upload_blob(f"timers/{host_id}/Host.Functions.ticker/status", json.dumps(status).encode(),
                              overwrite=True)
    env = {"FIXTURE_TIMER_SCHEDULE": NEVER, "FIXTURE_TIMER_DIR": str(tmp_path), HOST_ID_SETTING: host_id}
    with start_double(env=env) as double:
        wait_until(lambda: _ticks(tmp_path, True) == 1 and _counted(double, 1), timeout=20)
        assert double.stats()["timer_runs"]["ticker"]["past_due"] == 1
        assert "timer 'ticker' is past due" in double.log()
        def next_run() -> datetime:
            with BlobServiceClient.from_connection_string(connection) as blobs:
                stored = json.loads(blobs.get_blob_client("azure-webjobs-hosts",
                                                          f"timers/{host_id}/Host.Functions.ticker/status")
                                    .download_blob().readall())
            return datetime.fromisoformat(stored["Next"].replace("Z", "+00:00"))

        wait_until(lambda: next_run() > datetime.now(UTC), timeout=10)  # the monitor records the next run
    assert _ticks(tmp_path, False) == 0
