"""Timers log only when they act, and a worker that finds unfinished runs says once when they resume."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import azure.functions as func
import pytest

from resilient.engine.heal import resume_notice
from resilient.engine.heal.repair import Verdict
from resilient.functions import maintenance
from resilient.storage.ports import ActiveEntry


def _timers(engine: Any) -> dict[str, Any]:
    """The maintenance timers over a process whose every worker has ``engine``."""

    async def the_engine() -> Any:
        return engine

    app = func.FunctionApp()
    app.register_functions(maintenance.maintenance_blueprint(SimpleNamespace(engine=the_engine)))  # type: ignore[arg-type]
    return {f.get_function_name(): f.get_user_function() for f in app.get_functions()}


def _ours(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The app's info-or-louder messages, without the context the app's log setup appends (`` | k=v``)."""
    return [str(r.msg).split(" | ")[0] for r in caplog.records
            if r.levelno >= logging.INFO and r.name.startswith("resilient")]


class _Repairer:
    def __init__(self, verdicts: list[Verdict]) -> None:
        self.verdicts = verdicts

    async def sweep(self) -> list[Verdict]:
        return self.verdicts


@pytest.mark.parametrize(("actions", "logged"), [([], False), (["healthy", "finished"], False),
                                                 (["healthy", "restarted"], True)])
async def test_the_repair_timer_logs_only_when_it_repaired(monkeypatch: pytest.MonkeyPatch,
                                                           caplog: pytest.LogCaptureFixture,
                                                           actions: list[str], logged: bool) -> None:
    engine = SimpleNamespace(settings=None, storage=None)

    verdicts = [Verdict(f"resp_{i}", action) for i, action in enumerate(actions)]
    monkeypatch.setattr(maintenance, "repairer", lambda client, eng: _Repairer(verdicts))
    with caplog.at_level(logging.INFO):
        await _timers(engine)["repair_stuck_runs"](SimpleNamespace(past_due=False), "{}")
    assert _ours(caplog) == (["repair_stuck_runs ran"] if logged else [])


@pytest.mark.parametrize(("purged", "forgotten", "logged"), [([], [], False), (["resp_1"], [], True),
                                                            ([], ["resp_2"], True)])
async def test_the_cleanup_timer_logs_only_when_it_removed_something(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, purged: list[str],
        forgotten: list[str], logged: bool) -> None:
    engine = SimpleNamespace(settings=SimpleNamespace(replay_retention_minutes=60, unstored_grace_seconds=120),
                             storage=None)

    async def fake_purge(*args: Any, **kwargs: Any) -> list[str]:
        return purged

    async def fake_sweep(*args: Any, **kwargs: Any) -> list[str]:
        return forgotten

    monkeypatch.setattr(maintenance, "purge_expired", fake_purge)
    monkeypatch.setattr(maintenance.unstored, "sweep", fake_sweep)
    with caplog.at_level(logging.INFO):
        await _timers(engine)["cleanup_expired"](SimpleNamespace(past_due=False), "{}")
    assert _ours(caplog) == (["cleanup_expired ran"] if logged else [])


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def test_the_resume_notice_says_how_many_and_by_when() -> None:
    now = _epoch("2026-12-04T05:00:10")
    assert resume_notice.notice([], now, 60.0) is None
    entries = [ActiveEntry("resp_a", _epoch("2026-12-04T04:50:00")),
               ActiveEntry("resp_b", _epoch("2026-12-04T04:59:50"))]
    line = resume_notice.notice(entries, now, 60.0)
    assert line is not None
    assert line.startswith("2 unfinished runs (oldest created 04:50:00 UTC) will resume")
    # the newest is 60 s old at 05:00:50; the first sweep after that runs at 05:01:30
    assert "by about 05:01:30 UTC" in line
    assert resume_notice.next_sweep(_epoch("2026-12-04T05:00:30")) == _epoch("2026-12-04T05:00:30")
    assert resume_notice.next_sweep(_epoch("2026-12-04T05:00:31")) == _epoch("2026-12-04T05:01:30")


async def test_the_resume_notice_is_logged_once_from_storage(caplog: pytest.LogCaptureFixture) -> None:
    class _Active:
        async def list(self, limit: int) -> list[ActiveEntry]:
            return [ActiveEntry("resp_a", 1_000.0)]

    storage: Any = SimpleNamespace(active=_Active())
    settings: Any = SimpleNamespace(repair_grace_seconds=60.0)
    with caplog.at_level(logging.INFO, logger="resilient.repair"):
        line = await resume_notice.announce(storage, settings, now=1_010.0)
    assert line is not None and line.startswith("1 unfinished run ")
    assert [str(r.msg).split(" | ")[0] for r in caplog.records] == [line]
