"""The service as a user runs it (``scripts/run.sh``: the unmodified function_app.py under the host double,
on Azurite, with the default offline agent), for the real clients in tests/clients.

``RESILIENT_BASE_URL`` (see tests/live.py) points the clients at a host that is already running instead.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import live
from tests.hostdouble.api import HostDouble

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def service_url() -> Iterator[str]:
    """The service's root URL (no /v1): a host double started for this session, or the running host."""
    url = live.base_url()
    if url is not None:
        yield url
        return
    env = {
        "AzureWebJobsStorage": os.environ.get("AzureWebJobsStorage", "UseDevelopmentStorage=true"),
        "RESILIENT_STORAGE_PREFIX": "c" + secrets.token_hex(4),
        "RESILIENT_AGENT_DELTA_DELAY_MS": "0",
    }
    with HostDouble(ROOT, env=env, settings=None) as running:
        yield running.base_url


@pytest.fixture(scope="session")
def api_base(service_url: str) -> str:
    """What a user passes as the client's base URL (``.../v1``, as the OpenAI API has it)."""
    return f"{service_url}/v1"
