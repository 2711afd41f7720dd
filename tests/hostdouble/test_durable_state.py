"""Durable state lives in the storage account: it survives a SIGKILLed host, and the management API works
on it as the real one does. Fixture app (visibility timeouts 10 s, polling ≤ 2 s), real Azurite."""

from __future__ import annotations

import asyncio
import faulthandler
import os
import secrets
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from azure.core.exceptions import ResourceExistsError, ResourceModifiedError

from tests.hostdouble.api import HostDouble
from tests.hostdouble.durable.history import TASK_COMPLETED, TASK_SCHEDULED
from tests.hostdouble.durable.messaging import Envelope, MessageGone, Queues
from tests.hostdouble.durable.store import HistoryConflict, Storage, TaskHubNames
from tests.hostdouble.testkit import WAIT, done, history, markers, start, start_double, uid, wait, wait_until

pytestmark = pytest.mark.slow(seconds=85)  # about that long in all; see tests/conftest.py

TEST_TIMEOUT = 150


@pytest.fixture(autouse=True)
def _bounded() -> Iterator[None]:
    faulthandler.dump_traceback_later(TEST_TIMEOUT, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


def scheduled(double: HostDouble, instance_id: str) -> int:
    """Activities the instance's committed history has scheduled."""
    return sum(1 for event in history(double, instance_id) if event["EventType"] == TASK_SCHEDULED)


def test_host_sigkill_and_the_same_command_again_resume_every_orchestration(tmp_path: Path) -> None:
    double = start_double()
    double.start()
    try:
        http = httpx.Client(base_url=double.base_url, timeout=WAIT)
        sequence, timed, key = uid("seq"), uid("wf"), uid("k")
        start(http, "sequence", sequence, {"steps": 4, "marker_dir": str(tmp_path), "sleep": 2.0})
        # a durable timer (6 s) and an entity that were pending when the host died
        start(http, "workflow", timed, {"marker_dir": str(tmp_path / "wf"), "timeout": 6, "key": key})
        wait_until(lambda: markers(tmp_path, "step-1") == 1)  # the 2nd activity is running now
        # The activity message is sent (and picked up) before the episode that scheduled it checkpoints, as
        # on DTFx's Azure Storage backend; a kill inside that window legitimately re-runs the episode and
        # schedules the activity once more. This test is about the in-flight activity, so it kills after
        # the checkpoint.
        wait_until(lambda: scheduled(double, sequence) == 2)
        killed_at = time.monotonic()
        double.kill_host()  # platform, host and worker: SIGKILL to the process group
        with pytest.raises(httpx.TransportError):
            http.get("/plain")
        double.restart()
        status = done(http, sequence, timeout=60)
        resumed_after = time.monotonic() - killed_at
        assert status["runtimeStatus"] == "Completed", status
        assert [r["index"] for r in status["output"]] == [0, 1, 2, 3]
        # the activity in flight ran again once its work item reappeared; nothing else was repeated
        assert [markers(tmp_path, f"step-{i}") for i in range(4)] == [1, 2, 1, 1]
        stats = double.stats()
        assert stats["activity_redeliveries"] == {"step": 1}, stats["activity_redeliveries"]
        timed_status = done(http, timed, timeout=60)
        assert (timed_status["runtimeStatus"], timed_status["output"]["how"]) == ("Completed", "timer")
        assert timed_status["output"]["total"] == 1
        # it waited for the visibility timeout (10 s in the fixture's host.json), not the 5-minute default
        assert resumed_after < 45, resumed_after
        print(f"\nhost SIGKILL → orchestration complete: {resumed_after:.1f} s (visibility 10 s, polling ≤ 2 s)")
    finally:
        double.stop()


def test_a_host_dying_between_an_episodes_sends_and_its_checkpoint_runs_the_activity_again(tmp_path: Path) -> None:
    """DTFx's unguarded window: the activity message is out (and running) but the history does not say it
    was scheduled. After the restart the episode runs again and schedules it again, and the first message
    reappears too: the activity runs three times in all, the orchestration still sees one result."""
    double = start_double()
    double.start()
    try:
        http = httpx.Client(base_url=double.base_url, timeout=WAIT)
        sequence = uid("seq")
        start(http, "sequence", sequence, {"steps": 3, "marker_dir": str(tmp_path), "sleep": 0.5})
        wait_until(lambda: markers(tmp_path, "step-0") == 1)
        double.crash_host_before_checkpoint("step", delay=0.2)  # the episode that schedules step 1
        double.wait_dead()
        assert markers(tmp_path, "step-1") == 1  # it had started when the host died
        double.restart()
        status = done(http, sequence, timeout=60)
        assert status["runtimeStatus"] == "Completed", status
        assert [r["index"] for r in status["output"]] == [0, 1, 2]
        assert [markers(tmp_path, f"step-{i}") for i in range(3)] == [1, 3, 1]
        events = history(double, sequence)
        assert scheduled(double, sequence) == 3
        assert sum(1 for e in events if e["EventType"] == TASK_COMPLETED) == 3  # the duplicates were dropped
        assert "before the checkpoint (armed crash)" in double.log()
    finally:
        double.stop()


def test_a_checkpoint_that_fails_after_the_sends_delivers_the_activity_twice(tmp_path: Path) -> None:
    """The same window without a crash: the checkpoint's storage call fails, the host abandons the work item
    and runs the episode again, which sends the activity again. The first message was not lost (its
    activity completes), so the activity runs twice; the second result is dropped as a duplicate, and the
    host counts the send so a test can tell this delivery from an unexplained one."""
    double = start_double()
    double.start()
    try:
        http = httpx.Client(base_url=double.base_url, timeout=WAIT)
        sequence = uid("seq")
        before = double.stats()
        start(http, "sequence", sequence, {"steps": 3, "marker_dir": str(tmp_path), "sleep": 0.5})
        wait_until(lambda: markers(tmp_path, "step-0") == 1)
        double.fail_checkpoint("step")  # the episode that schedules step 1
        status = done(http, sequence, timeout=60)
        assert status["runtimeStatus"] == "Completed", status
        assert [r["index"] for r in status["output"]] == [0, 1, 2]
        assert [markers(tmp_path, f"step-{i}") for i in range(3)] == [1, 2, 1]
        after = double.stats()
        resent = after["activity_sends_before_a_failed_checkpoint"].get("step", 0) - \
            before.get("activity_sends_before_a_failed_checkpoint", {}).get("step", 0)
        assert resent == 1, after
        assert after["activity_deliveries"]["step"] - before["activity_deliveries"].get("step", 0) == 4
        assert after["activity_redeliveries"] == before["activity_redeliveries"]  # a new message, not a reappearance
        assert sum(1 for e in history(double, sequence) if e["EventType"] == TASK_COMPLETED) == 3
        assert "(armed storage fault)" in double.log() and "work item aborted" in double.log()
    finally:
        double.stop()


def test_rewind_runs_the_failed_activity_again(tmp_path: Path) -> None:
    with start_double() as double, httpx.Client(base_url=double.base_url, timeout=WAIT) as http:
        instance = uid("fragile")
        start(http, "fragile", instance, {"marker_dir": str(tmp_path), "fail_times": 1})
        failed = done(http, instance)
        assert failed["runtimeStatus"] == "Failed"
        assert failed["output"].startswith("Orchestrator function 'fragile' failed: Activity function 'flaky' "
                                           "failed:  RuntimeError: flaky attempt 1 failed")
        api = double.durable_url
        assert httpx.post(f"{api}/instances/{uid('missing')}/rewind").status_code == 404
        assert httpx.post(f"{api}/instances/{instance}/rewind", params={"reason": "test"}).status_code == 202
        status = done(http, instance)
        assert status["runtimeStatus"] == "Completed", status
        assert status["output"] == {"first": {"echo": "before"}, "flaky": "ok after 2"}
        assert markers(tmp_path, "flaky") == 2  # the failed call again; "echo" (completed) was not re-run
        assert httpx.post(f"{api}/instances/{instance}/rewind").status_code == 410  # Completed

        waiter = uid("waiter")
        start(http, "waiter", waiter, None)
        wait(http, waiter, lambda s: s["runtimeStatus"] == "Running")
        running = httpx.post(f"{api}/instances/{waiter}/rewind")
        assert running.status_code == 500
        assert running.json()["ExceptionMessage"] == ("The rewind operation is only supported on failed "
                                                      "orchestration instances.")
        httpx.post(f"{api}/instances/{waiter}/terminate", params={"reason": "done"})


def test_purge_restart_list_and_conflicts(tmp_path: Path) -> None:
    with start_double() as double, httpx.Client(base_url=double.base_url, timeout=WAIT) as http:
        api = double.durable_url
        instance = uid("seq")
        start(http, "sequence", instance, {"steps": 1, "marker_dir": str(tmp_path), "sleep": 0})
        assert done(http, instance)["runtimeStatus"] == "Completed"
        listed = httpx.get(f"{api}/instances", params={"runtimeStatus": "Completed"}).json()
        assert instance in [i["instanceId"] for i in listed]
        # restart with the same id: a new execution of the original input
        restarted = httpx.post(f"{api}/instances/{instance}/restart", params={"restartWithNewInstanceId": "false"})
        assert restarted.status_code == 202 and restarted.json()["id"] == instance
        assert done(http, instance)["runtimeStatus"] == "Completed"
        assert markers(tmp_path, "step-0") == 2
        # start over a Running instance: the extension's OrchestrationAlreadyExistsException (500)
        waiter = uid("waiter")
        start(http, "waiter", waiter, None)
        conflict = httpx.post(f"{api}/orchestrators/waiter/{waiter}", json=None)
        assert conflict.status_code == 500 and "already exists" in conflict.json()["ExceptionMessage"]
        assert httpx.post(f"{api}/orchestrators/waiter/@bad").status_code == 400
        httpx.post(f"{api}/instances/{waiter}/terminate")
        # purge: the instance and its history are gone
        assert httpx.delete(f"{api}/instances/{instance}").json() == {"instancesDeleted": 1}
        assert httpx.get(f"{api}/instances/{instance}").status_code == 404
        assert httpx.delete(f"{api}/instances/{instance}").status_code == 404
        assert httpx.get(f"{api}/no/such/api").status_code == 404


def test_each_double_has_its_own_task_hub_and_host_json_names_one_with_a_setting(tmp_path: Path) -> None:
    hub = "hdfix" + secrets.token_hex(5)
    named = start_double(env={"FIXTURE_TASK_HUB": hub}, task_hub="host.json")
    with start_double() as first, named:
        assert named.stats()["task_hub"] == hub  # "%FIXTURE_TASK_HUB%" in host.json, resolved like the host does
        assert first.stats()["task_hub"] not in (hub, "HostDoubleFixture")
        with httpx.Client(base_url=first.base_url, timeout=WAIT) as http:
            instance = uid("seq")
            start(http, "sequence", instance, {"steps": 1, "marker_dir": str(tmp_path), "sleep": 0})
            assert done(http, instance)["runtimeStatus"] == "Completed"
        assert httpx.get(f"{named.durable_url}/instances/{instance}").status_code == 404
    named.stop(delete_task_hub_too=True)


def test_no_more_activities_run_at_once_than_the_dispatcher_has_slots(tmp_path: Path) -> None:
    """maxConcurrentActivityFunctions (10 × processors): a fan-out wider than that runs in waves; the
    activities beyond it wait in the work-item queue and start as slots free up."""
    slots = 10 * (os.cpu_count() or 1)
    with start_double() as double, httpx.Client(base_url=double.base_url, timeout=WAIT) as http:
        instance = uid("fan")
        start(http, "fanout", instance, {"steps": slots + 5, "marker_dir": str(tmp_path), "sleep": 2.0})
        widest = 0
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            widest = max(widest, len(double.stats()["in_flight_activities"]))
            if markers(tmp_path, "step-fan*") == slots + 5:
                break
            time.sleep(0.05)
        assert widest == slots
        status = done(http, instance, timeout=60)
        assert status["runtimeStatus"] == "Completed" and len(status["output"]) == slots + 5


def test_storage_conflicts_and_gone_messages_end_in_the_runtimes_branches() -> None:
    """The storage outcomes the runtime branches on (real Azurite, no host): a history commit against a
    moved or existing sentinel is a ``HistoryConflict`` (the episode is discarded), an instance row's
    create or conditional update that loses is a 409 / 412 error, an absent row reads as ``None``; a
    message whose pop receipt went stale is ``MessageGone`` to renew and nothing to delete."""
    connection = os.environ.get("AzureWebJobsStorage", "UseDevelopmentStorage=true")
    hub = "hdst" + secrets.token_hex(5)

    async def scenario() -> None:
        storage = Storage(connection, TaskHubNames(hub, 1))
        queues = Queues(storage)
        try:
            await storage.create_task_hub()
            instance = "@orch@a/b?c"  # a key that needs escaping
            event = {"EventType": TASK_SCHEDULED, "EventId": 0, "Name": "step <&> 'ü'"}
            etag = await storage.commit_history(instance, "x1", 0, [event], {0: "m1"}, None, {"k": 1})
            with pytest.raises(HistoryConflict):  # a second writer creating the sentinel: 409
                await storage.commit_history(instance, "x1", 0, [event], {}, None, {})
            moved = await storage.commit_history(instance, "x1", 1, [event], {}, etag, {})
            with pytest.raises(HistoryConflict):  # a stale sentinel ETag: 412
                await storage.commit_history(instance, "x1", 2, [event], {}, etag, {})
            loaded = await storage.load_history(instance)
            assert (loaded.etag, len(loaded.events), loaded.msg_ids) == (moved, 2, {"m1"})
            assert loaded.events[0]["Name"] == "step <&> 'ü'"

            assert await storage.read_instance(instance) is None
            row = await storage.write_instance(instance, {"RuntimeStatus": "Pending", "Input": "x" * 40_000},
                                               create=True)
            with pytest.raises(ResourceExistsError):
                await storage.write_instance(instance, {"RuntimeStatus": "Pending"}, create=True)
            await storage.write_instance(instance, {"RuntimeStatus": "Running"})  # a merge moves the ETag on
            with pytest.raises(ResourceModifiedError):
                await storage.write_instance(instance, {"RuntimeStatus": "Completed"}, etag=row)
            read = await storage.read_instance(instance)
            assert read is not None and read["RuntimeStatus"] == "Running" and read["Input"] == "x" * 40_000

            queue = storage.names.control_queue(0)
            sent = await queues.send(queue, Envelope(instance, {"EventType": TASK_COMPLETED, "Result": "<&>"}))
            [got] = await queues.receive(queue, 32, timedelta(seconds=30))
            assert (got.message_id, got.dequeue_count, got.envelope.event["Result"]) == (sent.message_id, 1, "<&>")
            assert await queues.receive(queue, 32, timedelta(seconds=30)) == []  # invisible while held
            await queues.delete(got)
            await queues.delete(got)  # already gone: nothing to do
            with pytest.raises(MessageGone):
                await queues.update(got, 5)
        finally:
            await storage.delete_task_hub()
            await storage.close()

    asyncio.run(scenario())
