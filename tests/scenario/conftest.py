"""Scenario fixtures: the unmodified function_app.py under the host double, on real Azurite, driven by
the official ``openai`` client with strict validation and no automatic retries."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI

from tests import live
from tests.hostdouble.api import HostDouble
from tests.hostdouble.testkit import wait_until as wait_until  # one polling helper for every suite

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def started_double() -> Iterator[HostDouble | None]:
    """The host double the suite runs against, or None when ``RESILIENT_BASE_URL`` names a running host
    (which then needs RESILIENT_AGENT_DELTA_DELAY_MS=0 and RESILIENT_STEERABLE_CONVERSATIONS=true)."""
    if live.base_url() is not None:
        yield None
        return
    env = {
        "AzureWebJobsStorage": os.environ.get("AzureWebJobsStorage", "UseDevelopmentStorage=true"),
        "RESILIENT_STORAGE_PREFIX": "s" + secrets.token_hex(4),
        "RESILIENT_AGENT_DELTA_DELAY_MS": "0",
        "RESILIENT_ENABLE_CRASH_ENDPOINT": "true",
        "RESILIENT_STEERABLE_CONVERSATIONS": "true",
    }
    with HostDouble(ROOT, env=env, settings=None) as running:
        yield running


@pytest.fixture(scope="session")
def double(started_double: HostDouble | None) -> HostDouble:
    """The double itself, for tests that inject faults or read its counters (skipped against a running host)."""
    live.skip_if_live("it kills the double's worker or reads the double's counters")
    assert started_double is not None
    return started_double


@pytest.fixture(scope="session")
def base_url(started_double: HostDouble | None) -> str:
    return started_double.base_url if started_double is not None else str(live.base_url())


@pytest.fixture(scope="session")
def client(base_url: str) -> OpenAI:
    return OpenAI(base_url=base_url, api_key="local", max_retries=0, _strict_response_validation=True,
                  timeout=60.0)


@pytest.fixture(scope="session")
def http(base_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base_url, timeout=30.0) as session:
        yield session


def knobs(phases: int = 3, words: int = 8, delay_ms: int = 0) -> dict[str, str]:
    """Request metadata for the offline research agent (see resilient/agents/research.py)."""
    return {"research_phases": str(phases), "words_per_phase": str(words), "delta_delay_ms": str(delay_ms)}


def rebuild(events: list[Any]) -> list[dict[str, Any]]:
    """What a careful client does with a stream: build items from deltas, and on a recovery reset
    (``response.in_progress`` after output has started) drop partial items and restart from the
    snapshot it carries (rule R4)."""
    items: dict[int, dict[str, Any]] = {}
    for event in events:
        kind = event.type
        if kind == "response.in_progress":
            items = {i: {"id": o.id, "text": o.content[0].text if o.content else "", "done": True}
                     for i, o in enumerate(event.response.output)}
        elif kind == "response.output_item.added":
            items[event.output_index] = {"id": event.item.id, "text": "", "done": False}
        elif kind == "response.output_text.delta":
            items[event.output_index]["text"] += event.delta
        elif kind == "response.output_item.done":
            item = items[event.output_index]
            assert item["id"] == event.item.id
            assert item["text"] == event.item.content[0].text
            item["done"] = True
    return [items[i] for i in sorted(items)]


