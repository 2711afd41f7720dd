"""Unit tests of the double's pure parts: host.json reading, failure texts, queue rules, history rules."""

from __future__ import annotations

import itertools
import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.hostdouble import config
from tests.hostdouble.durable.episode import ACCEPT, DEFER, DROP, EpisodeResult, Execution, fresh_state
from tests.hostdouble.durable.history import (
    CALL_ACTIVITY,
    CREATE_TIMER,
    EXECUTION_STARTED,
    TASK_COMPLETED,
    TASK_FAILED,
    TASK_SCHEDULED,
    TIMER_CREATED,
    TIMER_FIRED,
    new_event,
)
from tests.hostdouble.durable.messaging import MIN_POLL_S, Delivery, Envelope, Poller, renew_period_s
from tests.hostdouble.durable.store import TaskHubNames, escape_key, fnv1a
from tests.hostdouble.failures import (
    Answered,
    TimedOut,
    WorkerExited,
    activity_failure,
    exit_code_of,
    orchestrator_worker_exit,
    user_code_failure,
    worker_exit_message,
)
from tests.hostdouble.supervisor import KillPlan
from tests.hostdouble.timers import next_occurrence


# ----------------------------------------------------------------------------------------------- host.json
@pytest.mark.parametrize(("text", "expected"), [
    ("00:05:00", timedelta(minutes=5)),
    ("1.02:03:04", timedelta(days=1, hours=2, minutes=3, seconds=4)),
    ("00:00:01.5", timedelta(seconds=1.5)),
    ("-1", timedelta(days=-1)),
    ("5", timedelta(days=5)),  # TimeSpan.Parse("5") is five days
    (30, timedelta(seconds=30)),
])
def test_timespans_parse_like_dotnet(text: object, expected: timedelta) -> None:
    assert config.parse_timespan(text, "x") == expected


def test_bad_timespan_names_the_setting() -> None:
    with pytest.raises(config.ConfigError, match="functionTimeout"):
        config.parse_timespan("5 minutes", "functionTimeout")


def test_timespans_format_like_dotnet() -> None:
    assert config.format_timespan(timedelta(minutes=30)) == "00:30:00"
    assert config.format_timespan(timedelta(seconds=3)) == "00:00:03"
    assert config.format_timespan(timedelta(days=1, seconds=1.5)) == "1.00:00:01.5000000"


def test_app_settings_override_host_json_case_insensitively(tmp_path: Path) -> None:
    (tmp_path / "host.json").write_text(json.dumps({"extensions": {"durableTask": {"hubName": "FromFile"}}}))
    env = {"AzureFunctionsJobHost__Extensions__DurableTask__HubName": "FromSetting",
           "AzureFunctionsJobHost__functionTimeout": "00:00:07",
           "AzureFunctionsJobHost__extensions__durableTask__storageProvider__maxQueuePollingInterval": "00:00:03"}
    loaded = config.load(tmp_path, env)
    assert loaded.durable.hub_name == "FromSetting"
    assert loaded.function_timeout == timedelta(seconds=7)
    assert loaded.durable.max_polling_interval == timedelta(seconds=3)
    assert loaded.route_prefix == "api"  # the host's default
    env["AzureFunctionsJobHost__extensions__durableTask__maxConcurrentActivityFunctions"] = "7"
    assert config.load(tmp_path, env).durable.max_activities == 7
    env["AzureFunctionsJobHost__extensions__durableTask__maxConcurrentActivityFunctions"] = "0"
    with pytest.raises(config.ConfigError, match="maxConcurrentActivityFunctions"):
        config.load(tmp_path, env)


def test_hub_name_setting_substitution_defaults_and_validation(tmp_path: Path) -> None:
    (tmp_path / "host.json").write_text(json.dumps({"extensions": {"durableTask": {"hubName": "%MyHub%"}}}))
    assert config.load(tmp_path, {"MyHub": "Resolved1"}).durable.hub_name == "Resolved1"
    with pytest.raises(config.ConfigError, match="not a valid task hub name"):
        config.load(tmp_path, {})  # unresolved: "%MyHub%"
    (tmp_path / "host.json").write_text("{}")
    defaults = config.load(tmp_path, {})
    assert defaults.durable.hub_name == "TestHubName"
    assert (defaults.durable.control_visibility, defaults.durable.work_item_visibility) == (
        timedelta(minutes=5), timedelta(minutes=5))
    assert defaults.durable.max_polling_interval == timedelta(seconds=30)
    assert defaults.durable.partition_count == 4
    assert defaults.durable.max_activities == 10 * (os.cpu_count() or 1)
    assert defaults.function_timeout == timedelta(minutes=30)


def test_function_timeout_unbounded_and_minimum(tmp_path: Path) -> None:
    (tmp_path / "host.json").write_text(json.dumps({"functionTimeout": "-1"}))
    assert config.load(tmp_path, {}).function_timeout is None
    (tmp_path / "host.json").write_text(json.dumps({"functionTimeout": "00:00:00.5"}))
    with pytest.raises(config.ConfigError, match="functionTimeout"):
        config.load(tmp_path, {})


def test_worker_id_is_the_machine_or_the_app_service_instance(tmp_path: Path) -> None:
    assert config.load(tmp_path, {"WEBSITE_CURRENT_STAMPNAME": "s1", "RoleInstanceId": "r7"}).durable.worker_id == \
        "s1:r7"


def test_repo_host_json_is_readable() -> None:
    loaded = config.load(Path(__file__).resolve().parents[2], {"TASKHUB_NAME": "RepoHub"})  # hubName: %TASKHUB_NAME%
    assert loaded.route_prefix == "" and loaded.durable.hub_name == "RepoHub"
    assert loaded.durable.max_activities == 100


# ------------------------------------------------------------------------------------------- failure texts
def test_worker_exit_texts_are_the_hosts() -> None:
    assert exit_code_of(-9) == 137 and exit_code_of(1) == 1
    assert worker_exit_message(137) == "python exited with code 137 (0x89)"
    reason, details = activity_failure("run_phase", WorkerExited(137))
    assert reason == "Activity function 'run_phase' failed: python exited with code 137 (0x89)"
    parsed = json.loads(details)
    assert parsed["$type"] == "Microsoft.Azure.WebJobs.Script.Workers.WorkerProcessExitException, " \
                              "Microsoft.Azure.WebJobs.Script"
    assert parsed["ClassName"] == "Microsoft.Azure.WebJobs.Script.Workers.WorkerProcessExitException"
    output, _ = orchestrator_worker_exit("respond", 137)
    assert output == ("Orchestrator function 'respond' failed: One or more errors occurred. "
                      "(python exited with code 137 (0x89))")


def test_timeout_and_user_failure_texts() -> None:
    reason, details = activity_failure("run_phase", TimedOut("run_phase", timedelta(minutes=30)))
    assert reason == ("Activity function 'run_phase' failed: Timeout value of 00:30:00 was exceeded by function: "
                      "Functions.run_phase")
    assert "FunctionTimeoutException" in json.loads(details)["$type"]
    friendly, _ = user_code_failure("ValueError: nope", "Traceback ...")
    assert friendly == " ValueError: nope"  # OutOfProcExceptionHelpers keeps the leading space
    reason, _ = activity_failure("flaky", Answered({"ok": False, "error": "RuntimeError: x", "stack": "s"}))
    assert reason == "Activity function 'flaky' failed:  RuntimeError: x"


# ------------------------------------------------------------------------------------------- queue rules
def _delivery(count: int) -> Delivery:
    return Delivery("q", "m", "p", count, Envelope("i", {}), 0.0)


def test_abandon_back_off_and_renewal_period_follow_dtfx() -> None:
    assert [_delivery(c).abandon_delay_s for c in (0, 1, 2, 3, 9, 10, 31)] == [2, 2, 4, 8, 512, 600, 600]
    assert renew_period_s(timedelta(seconds=10)) == 5.0
    assert renew_period_s(timedelta(seconds=45)) == 15.0
    assert renew_period_s(timedelta(minutes=5)) == 30.0


def test_polling_backs_off_from_50_ms_to_the_maximum() -> None:
    async def nothing(_: list[Delivery]) -> None:
        return None

    poller = Poller(None, "q", timedelta(seconds=10), timedelta(seconds=2), nothing, print)  # type: ignore[arg-type]
    seen = [poller._interval]
    for _ in range(12):
        poller._grow()
        seen.append(poller._interval)
    assert seen[0] == MIN_POLL_S and seen[-1] == 2.0
    assert all(b >= a for a, b in itertools.pairwise(seen))


def test_partitions_and_keys() -> None:
    assert fnv1a("") == 2166136261 and fnv1a("a") == 0xE40C292C
    names = TaskHubNames("MyHub", 4)
    assert names.control_queue(3) == "myhub-control-03" and names.work_item_queue == "myhub-workitems"
    assert (names.instances_table, names.history_table) == ("MyHubInstances", "MyHubHistory")
    assert {names.partition_of(f"resp_{i}") for i in range(40)} == {0, 1, 2, 3}
    assert escape_key("a/b#c?d\\e^f\n") == "a^002Fb^0023c^003Fd^005Ce^005Ef^000A"


def test_kill_plan_matches_function_or_durable_name() -> None:
    plan = KillPlan("activity", "run_phase")
    assert plan.matches("activity", "run_phase_fn", "run_phase")
    assert plan.matches("activity", "RUN_PHASE", None)
    assert not plan.matches("orchestrator", "run_phase", "run_phase")
    assert KillPlan("entity").matches("entity", "anything", None)


# ----------------------------------------------------------------------------------------- history rules
def _execution() -> Execution:
    started = new_event(EXECUTION_STARTED, Name="o", Version="", Input=None)
    events = [started, new_event(TASK_SCHEDULED, 0, Name="a"), new_event(TASK_COMPLETED, TaskScheduledId=0),
              new_event(TASK_SCHEDULED, 1, Name="a"), new_event(TIMER_CREATED, 2)]
    state = fresh_state()
    state["cancelled"] = [2]
    return Execution("i", "x1", events, state)


def test_classify_drops_duplicates_and_stale_and_defers_early_completions() -> None:
    execution = _execution()
    assert execution.classify(new_event(TASK_COMPLETED, TaskScheduledId=0), None) == DROP  # already completed
    assert execution.classify(new_event(TASK_FAILED, TaskScheduledId=1), "x0") == DROP  # another execution
    assert execution.classify(new_event(TASK_COMPLETED, TaskScheduledId=1), "x1") == ACCEPT
    assert execution.classify(new_event(TASK_COMPLETED, TaskScheduledId=7), "x1") == DEFER  # not scheduled yet
    assert execution.classify(new_event(TIMER_FIRED, TimerId=2), "x1") == DROP  # cancelled timer
    accepted = [new_event(TASK_FAILED, TaskScheduledId=1)]
    assert execution.classify(new_event(TASK_COMPLETED, TaskScheduledId=1), "x1", accepted) == DROP  # same batch


def test_retry_interceptor_allocates_timer_then_next_attempt() -> None:
    execution = _execution()
    execution.state["next"] = 3
    execution.state["retry_attempt"]["1"] = {"kind": "activity", "name": "a", "input": None, "attempts": 1,
                                             "max_attempts": 2, "interval_ms": 100}
    failed = EpisodeResult()
    execution.retry_bookkeeping(new_event(TASK_FAILED, TaskScheduledId=1), failed)
    assert [e["EventType"] for e in failed.produced] == [TIMER_CREATED] and failed.produced[0]["EventId"] == 3
    assert failed.outbound[0].event["EventType"] == TIMER_FIRED and failed.outbound[0].delay_s > 0
    fired = EpisodeResult()
    execution.retry_bookkeeping(new_event(TIMER_FIRED, TimerId=3), fired)
    assert [(e["EventType"], e["EventId"]) for e in fired.produced] == [(TASK_SCHEDULED, 4)]
    assert fired.outbound[0].kind == "activity"


def _replayed(execution: Execution, *actions: dict[str, object]) -> EpisodeResult:
    result = EpisodeResult()
    execution.apply_answer({"ok": True, "result": {"actions": [list(actions)], "isDone": False}}, result)
    return result


def test_a_replay_that_schedules_another_activity_fails_the_orchestration_as_dtfx_does() -> None:
    def fresh() -> Execution:
        execution = _execution()
        execution.state["seqs"], execution.state["next"] = [0, 1], 3
        return execution

    same = _replayed(fresh(), {"actionType": CALL_ACTIVITY, "functionName": "A", "input": None},
                     {"actionType": CALL_ACTIVITY, "functionName": "a", "input": None})
    assert same.completion is None  # names compare case-insensitively, as in DurableTask.Core
    renamed = _replayed(fresh(), {"actionType": CALL_ACTIVITY, "functionName": "a", "input": None},
                        {"actionType": CALL_ACTIVITY, "functionName": "b", "input": None})
    assert renamed.completion is not None and renamed.completion.status == "Failed"
    assert "Non-Deterministic workflow detected" in str(renamed.completion.output)
    assert "sequence number 1 named 'a'" in str(renamed.completion.output) and "'b'" in str(renamed.completion.output)
    assert renamed.outbound == []  # nothing new is scheduled by a failed replay
    timer = _replayed(fresh(), {"actionType": CALL_ACTIVITY, "functionName": "a", "input": None},
                      {"actionType": CREATE_TIMER, "fireAt": "2026-01-01T00:00:00Z", "isCanceled": False})
    assert timer.completion is not None and "another action" in str(timer.completion.output)


def test_timer_schedules() -> None:
    start = datetime(2026, 1, 1, 0, 7, 3, tzinfo=UTC)
    assert next_occurrence("0 */15 * * * *", start) == datetime(2026, 1, 1, 0, 15, tzinfo=UTC)
    assert next_occurrence("00:05:00", start) == start + timedelta(minutes=5)
    with pytest.raises(config.ConfigError):
        next_occurrence("every minute", start)
