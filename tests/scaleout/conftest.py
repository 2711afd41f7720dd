"""Scale-out fixtures: the unmodified function_app.py on three instances of the host double behind one
front end (``HostDouble(instances=3)``), one task hub on real Azurite, driven by the official ``openai``
client.

Timings shortened so the suite stays within a few minutes, each through a setting the real host has or
the double's one explicit option for it:

* partition leases 15 s, renewed and balanced every 2 s (``lease_timings``: the double's own option, the
  real defaults are 30/10/10 s);
* the queues' visibility timeouts 20 s (``AzureFunctionsJobHost__extensions__durableTask__storageProvider__
  …VisibilityTimeout`` app settings; host.json says 1 min): what a killed instance held comes back sooner;
* the timer listener lock 15 s, retried every 5 s (``AzureFunctionsJobHost__singleton__…``; 60 s each by
  default).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from openai import OpenAI

from tests.hostdouble.api import HostDouble
from tests.hostdouble.durable.store import fnv1a
from tests.hostdouble.protocol import INSTANCE_HEADER
from tests.reliability.conftest import READ_TIMEOUT_S
from tests.scenario.conftest import ROOT

PARTITIONS = 4  # host.json's partitionCount
STORAGE = "AzureFunctionsJobHost__extensions__durableTask__storageProvider__"


@pytest.fixture(scope="module")
def double() -> Iterator[HostDouble]:
    env = {
        "AzureWebJobsStorage": os.environ.get("AzureWebJobsStorage", "UseDevelopmentStorage=true"),
        "RESILIENT_STORAGE_PREFIX": "x" + secrets.token_hex(4),
        "RESILIENT_AGENT_DELTA_DELAY_MS": "0",
        "RESILIENT_REPAIR_GRACE_SECONDS": "5",
        f"{STORAGE}controlQueueVisibilityTimeout": "00:00:20",
        f"{STORAGE}workItemQueueVisibilityTimeout": "00:00:20",
        "AzureFunctionsJobHost__singleton__listenerLockPeriod": "00:00:15",
        "AzureFunctionsJobHost__singleton__listenerLockRecoveryPollingInterval": "00:00:05",
    }
    with HostDouble(ROOT, env=env, settings=None, instances=3, lease_timings=(15, 2, 2), shutdown_timeout=5,
                    startup_timeout=90.0) as running:
        yield running


@pytest.fixture(autouse=True)
def at_least_three_instances(double: HostDouble) -> None:
    """The suite's parallel workers may run this module's tests apart and out of order (a worker that
    stole a drain and a kill may then steal a cross-instance test): a test that finds fewer than three
    ready instances first scales out again, as the platform would."""
    while len(double.ready_instances()) < 3:
        double.add_instance()


def client_for(double: HostDouble, instance: str | None = None) -> OpenAI:
    """The ``openai`` client through the front end; with ``instance``, every request goes to that instance."""
    headers = {INSTANCE_HEADER: instance} if instance else None
    return OpenAI(base_url=double.base_url, api_key="x", max_retries=0, _strict_response_validation=True,
                  timeout=READ_TIMEOUT_S, default_headers=headers)


def owners(double: HostDouble) -> dict[str, list[int]]:
    """Partitions each ready instance says it owns."""
    return {name: double.stats(name)["partitions_owned"] for name in double.ready_instances()}


def runner_of(double: HostDouble, response_id: str) -> str | None:
    """The instance that owns the control-queue partition of the run's orchestration (its id is the
    response id): the one that runs its episodes."""
    partition = fnv1a(response_id) % PARTITIONS
    return next((name for name, owned in owners(double).items() if partition in owned), None)


def durable_status(double: HostDouble, instance_id: str) -> dict[str, Any]:
    answer = httpx.get(f"{double.durable_url}/instances/{instance_id}", timeout=10.0)
    result: dict[str, Any] = answer.json() if answer.content else {}
    return result
