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

from tests.hostdouble.api import HostDouble
from tests.hostdouble.testkit import wait_until as wait_until  # one polling helper for every suite

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def double() -> Iterator[HostDouble]:
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
def client(double: HostDouble) -> OpenAI:
    return OpenAI(base_url=double.base_url, api_key="local", max_retries=0, _strict_response_validation=True,
                  timeout=60.0)


@pytest.fixture(scope="session")
def http(double: HostDouble) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=double.base_url, timeout=30.0) as session:
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


