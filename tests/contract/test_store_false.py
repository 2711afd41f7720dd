"""``store=false`` keeps nothing: after each way a run can end, the storage account is read and must hold
nothing of it. The unmodified app runs under the host double on Azurite with a storage prefix of its own
(only ``store=false`` responses are created here), so "nothing" is checked literally: every entity of
every table and every blob of every container under the prefix, and the Durable instance (its status
through the management API, and its rows in the task hub's tables when the double keeps them there).

Cases: the stream dropped early, the stream read to the end, a non-stream request, a client gone
mid-run (its request times out), and the worker killed mid-run (nobody is left to report the client
gone: the run's grace timer ends it). The grace is 3 s here (``RESILIENT_UNSTORED_GRACE_SECONDS``).
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from azure.data.tables import TableServiceClient
from azure.storage.blob import BlobServiceClient

from tests import live
from tests.hostdouble import config as host_config
from tests.hostdouble.api import HostDouble

pytestmark = pytest.mark.azurite

ROOT = Path(__file__).resolve().parents[2]
CONNECTION = os.environ.get("AzureWebJobsStorage") or "UseDevelopmentStorage=true"
PREFIX = "u" + secrets.token_hex(4)
GRACE_SECONDS = 3
CLEANUP_WAIT = 45.0  # bound of the asynchronous clean-up (event → episode → activity → purge)
TERMINAL = {"response.completed", "response.failed", "response.incomplete"}


@pytest.fixture(scope="module")
def double() -> Iterator[HostDouble]:
    live.skip_if_live("a host with a 3 s unstored grace whose Durable state and counters it reads")
    env = {
        "AzureWebJobsStorage": CONNECTION,
        "RESILIENT_STORAGE_PREFIX": PREFIX,
        "RESILIENT_AGENT_DELTA_DELAY_MS": "0",
        "RESILIENT_UNSTORED_GRACE_SECONDS": str(GRACE_SECONDS),
        "RESILIENT_STEERABLE_CONVERSATIONS": "true",
    }
    with HostDouble(ROOT, env=env, settings=None) as running:
        yield running
    _delete_prefix()


@pytest.fixture(scope="module")
def http(double: HostDouble) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=double.base_url, timeout=60.0) as session:
        yield session


# ------------------------------------------------------------------------------------------ the footprint
def _tables() -> TableServiceClient:
    return TableServiceClient.from_connection_string(CONNECTION)


def _blobs() -> BlobServiceClient:
    return BlobServiceClient.from_connection_string(CONNECTION)


def _task_hub(double: HostDouble) -> str:
    """The double's task hub, read the way the host reads it: ``host.json`` with the double's app settings
    (``AzureFunctionsJobHost__…`` overrides, ``%Setting%`` names). Its Durable tables start with this name."""
    return host_config.load(ROOT, {**os.environ, **double.env}).durable.hub_name


def footprint(double: HostDouble, response_ids: list[str]) -> dict[str, list[str]]:
    """Everything stored under the test's prefix, plus whatever Durable keeps about ``response_ids``."""
    left: dict[str, list[str]] = {}
    tables = _tables()
    for table in tables.list_tables():
        name = table.name
        if name.lower().startswith(PREFIX):
            rows = [f"{e['PartitionKey']}/{e['RowKey']}" for e in tables.get_table_client(name).list_entities()]
        elif name.lower().startswith(_task_hub(double).lower()):
            client = tables.get_table_client(name)
            rows = [f"{e['PartitionKey']}/{e['RowKey']}" for rid in response_ids
                    for e in client.query_entities("PartitionKey eq @pk", parameters={"pk": rid})]
        else:
            continue
        if rows:
            left[f"table {name}"] = rows
    blobs = _blobs()
    for container in blobs.list_containers(name_starts_with=PREFIX):
        names = [b.name for b in blobs.get_container_client(container.name).list_blobs()]
        if names:
            left[f"container {container.name}"] = names
    for rid in response_ids:
        status = double.status(rid)
        if status is not None:
            left[f"durable instance {rid}"] = [str(status.get("runtimeStatus"))]
    return left


def assert_nothing_left(double: HostDouble, response_ids: list[str]) -> None:
    # The check looks in the right place: the app's tables and containers exist under the prefix (an
    # empty result then means nothing was left, not that nothing was found).
    tables = [t.name for t in _tables().list_tables() if t.name.lower().startswith(PREFIX)]
    containers = [c.name for c in _blobs().list_containers(name_starts_with=PREFIX)]
    assert len(tables) >= 3 and len(containers) >= 2, (tables, containers)
    deadline = time.monotonic() + CLEANUP_WAIT
    left = footprint(double, response_ids)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = footprint(double, response_ids)
    assert left == {}, f"store=false left data behind: {left}"


def _delete_prefix() -> None:
    tables = _tables()
    for table in tables.list_tables():
        if table.name.lower().startswith(PREFIX):
            tables.delete_table(table.name)
    blobs = _blobs()
    for container in blobs.list_containers(name_starts_with=PREFIX):
        blobs.delete_container(container.name)


# ------------------------------------------------------------------------------------------------ helpers
def body(phases: int = 3, words: int = 8, delay_ms: int = 0, **extra: Any) -> dict[str, Any]:
    return {"model": "m", "input": "What does store=false keep?", "store": False,
            "metadata": {"research_phases": str(phases), "words_per_phase": str(words),
                         "delta_delay_ms": str(delay_ms)}, **extra}


def read_events(lines: Iterator[str], count: int | None) -> list[dict[str, Any]]:
    """Parse SSE ``data:`` lines into events; stop after ``count`` events (None: to the end)."""
    events: list[dict[str, Any]] = []
    for line in lines:
        if line.startswith("data: "):
            events.append(json.loads(line[len("data: "):]))
            if count is not None and len(events) >= count:
                break
    return events


def run_phase_deliveries(double: HostDouble) -> int:
    return int(double.stats()["activity_deliveries"].get("run_phase", 0))


# -------------------------------------------------------------------------------------------------- cases
def test_stream_dropped_early_leaves_nothing_and_stops_the_run(double: HostDouble, http: httpx.Client) -> None:
    before = run_phase_deliveries(double)
    with http.stream("POST", "/responses", json=body(phases=3, words=400, delay_ms=20, stream=True)) as answer:
        assert answer.status_code == 200
        events = read_events(answer.iter_lines(), 6)
    rid = events[0]["response"]["id"]
    assert events[-1]["type"] == "response.output_text.delta"  # dropped inside the first phase
    assert http.get(f"/responses/{rid}").status_code == 404
    assert_nothing_left(double, [rid])
    # The run stopped with its client: phase 0 ended early, phases 1 and 2 never ran (a run left alone
    # would have taken three run_phase deliveries and about 25 s).
    assert run_phase_deliveries(double) - before == 1


def test_stream_read_to_the_end_leaves_nothing(double: HostDouble, http: httpx.Client) -> None:
    with http.stream("POST", "/responses", json=body(stream=True)) as answer:
        events = read_events(answer.iter_lines(), None)
    assert events[-1]["type"] == "response.completed", "deleted before the client had its terminal event"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    rid = events[0]["response"]["id"]
    assert_nothing_left(double, [rid])


def test_non_stream_request_leaves_nothing(double: HostDouble, http: httpx.Client) -> None:
    answer = http.post("/responses", json=body())
    assert answer.status_code == 200, answer.text
    response = answer.json()
    assert response["status"] == "completed" and response["store"] is False and len(response["output"]) == 3
    assert http.get(f"/responses/{response['id']}").status_code == 404
    assert_nothing_left(double, [response["id"]])


def test_client_gone_mid_run_leaves_nothing(double: HostDouble) -> None:
    """A non-stream request whose client gives up (times out) while the run is still going."""
    with httpx.Client(base_url=double.base_url, timeout=1.5) as impatient, pytest.raises(httpx.ReadTimeout):
        impatient.post("/responses", json=body(phases=2, words=60, delay_ms=40))
    # The id never reached the client; the instance list of the double names it.
    rid = _newest_instance(double)
    assert_nothing_left(double, [rid])


def test_worker_killed_mid_run_leaves_nothing(double: HostDouble, http: httpx.Client) -> None:
    restarts = double.stats()["worker_restarts"]
    with http.stream("POST", "/responses", json=body(phases=3, words=400, delay_ms=20, stream=True)) as answer:
        lines = answer.iter_lines()
        rid = read_events(lines, 1)[0]["response"]["id"]
        read_events(lines, 5)
        double.kill_worker()
        with pytest.raises(httpx.HTTPError):  # the stream dies with its worker
            read_events(lines, None)
    double.wait_for_worker_restarts(restarts + 1)
    assert_nothing_left(double, [rid])


def _newest_instance(double: HostDouble) -> str:
    listing = httpx.get(f"{double.durable_url}/instances", timeout=10).json()
    newest = max(listing, key=lambda status: status["createdTime"])
    return str(newest["instanceId"])
