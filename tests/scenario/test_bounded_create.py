"""A create answers within seconds whatever its input (docs/CONTRACT.md, E15): the number of input items
is bounded (``MAX_INPUT_ITEMS``), and a longer input is refused before anything is parsed or written."""

from __future__ import annotations

import time

import httpx
import openai
import pytest
from openai import OpenAI

from resilient.protocol.request import MAX_INPUT_ITEMS
from tests.scenario.conftest import knobs, wait_until


def _messages(count: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": "word"} for _ in range(count)]


def test_twenty_thousand_items_are_refused_within_seconds(http: httpx.Client, client: OpenAI) -> None:
    body = {"model": "m", "input": _messages(20_000), "background": True}
    started = time.monotonic()
    answer = http.post("/responses", json=body, timeout=30)
    elapsed = time.monotonic() - started
    assert elapsed < 5.0, elapsed
    assert answer.status_code == 400, answer.text[:300]
    error = answer.json()["error"]
    assert (error["type"], error["code"], error["param"]) == ("invalid_request_error", "invalid_value", "input")
    assert str(MAX_INPUT_ITEMS) in error["message"] and "20000" in error["message"]
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model="m", input=_messages(MAX_INPUT_ITEMS + 1), background=True)  # type: ignore[arg-type]


def test_the_largest_allowed_input_is_accepted_and_runs(http: httpx.Client, client: OpenAI) -> None:
    body = {"model": "m", "input": _messages(MAX_INPUT_ITEMS), "background": True,
            "metadata": knobs(phases=1, words=2)}
    started = time.monotonic()
    answer = http.post("/responses", json=body, timeout=60)
    elapsed = time.monotonic() - started
    assert answer.status_code == 200, answer.text[:300]
    assert elapsed < 15.0, elapsed  # generous: a shared CI machine and the emulator's table engine
    rid = answer.json()["id"]
    wait_until(lambda: client.responses.retrieve(rid).status == "completed", timeout=60)
    page = client.responses.input_items.list(rid, limit=100, order="asc")
    assert len(page.data) == 100 and page.has_more
