"""The replay tests' shared fixture: the registered orchestrator's real SDK handle, one per module."""

from __future__ import annotations

from typing import Any

import pytest

from tests.replay.vocabulary import orchestrator


@pytest.fixture(scope="module")
def handle() -> Any:
    return orchestrator()
