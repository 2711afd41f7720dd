"""Run the scenario and contract suites against a host that is already running.

``RESILIENT_BASE_URL=http://127.0.0.1:7071`` (a real ``func start``, a deployment, or ``scripts/run.sh``)
makes those suites send their requests there instead of starting the host double. Tests that need what
only the double offers (killing its worker, its counters, a host started with settings of their own) are
skipped, each with the reason; every other test runs unchanged. ``.ci/live`` does this end to end.
"""

from __future__ import annotations

import os

import pytest

SETTING = "RESILIENT_BASE_URL"


def base_url() -> str | None:
    """The running host's URL from ``RESILIENT_BASE_URL`` (no trailing slash), or None: start the double."""
    url = os.environ.get(SETTING, "").strip().rstrip("/")
    return url or None


def skip_if_live(needs: str) -> None:
    """Skip the calling test or fixture when the suites target a running host, saying what it needs."""
    url = base_url()
    if url is not None:
        pytest.skip(f"needs the host double ({needs}); {SETTING}={url} is a host this test cannot control")
