"""Helpers shared by the double's own end-to-end tests (fixture app, real subprocesses, real Azurite)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from .api import HostDouble

FIXTURE_APP = Path(__file__).parent / "fixture_app"
WAIT = 30.0  # bound of every wait inside a test


def start_double(env: dict[str, str] | None = None, **kwargs: Any) -> HostDouble:
    return HostDouble(FIXTURE_APP, settings="fixture.settings.json",
                      env={"FIXTURE_OVERRIDDEN": "from-env", **(env or {})}, startup_timeout=WAIT, **kwargs)


def uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def start(http: httpx.Client, name: str, instance_id: str, payload: Any) -> dict[str, Any]:
    """Start an orchestration through the app's HTTP route (``DurableOrchestrationClient.start_new``)."""
    response = http.post(f"/orchestrations/{name}/{instance_id}", json=payload)
    assert response.status_code == 202, response.text
    body: dict[str, Any] = response.json()
    assert body["id"] == instance_id
    return body


def wait(http: httpx.Client, instance_id: str, predicate: Any, timeout: float = WAIT) -> dict[str, Any]:
    """Poll the app's status route (``DurableOrchestrationClient.get_status``) until ``predicate(status)``."""
    deadline = time.monotonic() + timeout
    status: dict[str, Any] = {}
    while time.monotonic() < deadline:
        try:
            response = http.get(f"/orchestrations/{instance_id}")
        except httpx.TransportError:  # a host being replaced
            time.sleep(0.1)
            continue
        if response.status_code == 200:
            status = response.json()
            if predicate(status):
                return status
        time.sleep(0.05)
    raise AssertionError(f"{instance_id}: condition not met in {timeout}s, last status {status}")


def done(http: httpx.Client, instance_id: str, timeout: float = WAIT) -> dict[str, Any]:
    return wait(http, instance_id, lambda s: s["runtimeStatus"] in ("Completed", "Failed", "Terminated"), timeout)


def markers(folder: Path, label: str) -> int:
    return len(list(folder.glob(f"{label}.*")))


def wait_until(predicate: Any, timeout: float = WAIT, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("condition not met in time")


def history(double: HostDouble, instance_id: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{double.durable_url}/instances/{instance_id}", params={"showHistory": "true"})
    events: list[dict[str, Any]] = response.json()["historyEvents"]
    return events
