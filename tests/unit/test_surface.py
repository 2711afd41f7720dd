"""resilient/http/surface.py: request ids, the /v1 operation table, health and the start-up settings check."""

from __future__ import annotations

import asyncio
import logging
import re

import pytest

from resilient.http import surface
from resilient.settings import Settings


@pytest.mark.parametrize("sent", ["abc", "req_0123", "4bf92f3577b34da6a3ce929d0e0e4736", "gw:1.2-3_x"])
def test_a_sane_request_id_is_echoed(sent: str) -> None:
    assert surface.request_id({"X-Request-Id": sent}) == sent


@pytest.mark.parametrize("sent", ["", " x", "a b", "<script>", "x" * 129, "é", "-leading", "a\r\nb"])
def test_anything_else_gets_a_new_id(sent: str) -> None:
    assert re.fullmatch(r"req_[0-9a-f]{32}", surface.request_id({"x-request-id": sent}))
    assert surface.request_id({}) != surface.request_id({})


@pytest.mark.parametrize(("method", "path", "expected"), [
    ("POST", "responses", ("create", "")),
    ("GET", "responses/resp_1", ("retrieve", "resp_1")),
    ("DELETE", "responses/resp_1/", ("delete", "resp_1")),
    ("POST", "responses/resp_1/cancel", ("cancel", "resp_1")),
    ("GET", "Responses/resp_1/input_items", ("input_items", "resp_1")),
    ("GET", "responses", None),
    ("POST", "responses/resp_1", None),
    ("GET", "responses/resp_1/input_items/more", None),
    ("GET", "models", None),
    ("GET", "", None),
])
def test_v1_operations_are_exactly_the_unprefixed_ones(method: str, path: str,
                                                       expected: tuple[str, str] | None) -> None:
    assert surface.v1_operation(method, path) == expected


@pytest.mark.parametrize(("method", "path", "expected"), [
    ("POST", "conversations", ("create", "", "")),
    ("GET", "Conversations/conv_a", ("retrieve", "conv_a", "")),
    ("POST", "conversations/conv_a", ("update", "conv_a", "")),
    ("DELETE", "conversations/conv_a/", ("delete", "conv_a", "")),
    ("GET", "conversations/conv_a/ITEMS", ("list_items", "conv_a", "")),
    ("POST", "conversations/conv_a/items", ("add_items", "conv_a", "")),
    ("GET", "conversations/conv_a/items/msg_b", ("retrieve_item", "conv_a", "msg_b")),
    ("DELETE", "conversations/conv_a/items/msg_b", ("delete_item", "conv_a", "msg_b")),
    ("POST", "conversations/conv_a/items/msg_b", None),
    ("GET", "conversations", None),
    ("GET", "conversations/conv_a/items/msg_b/more", None),
    ("GET", "conversations/conv_a/things", None),
    ("GET", "responses/resp_a", None),
])
def test_v1_conversation_operations_are_exactly_the_unprefixed_ones(
        method: str, path: str, expected: tuple[str, str, str] | None) -> None:
    assert surface.v1_conversation_operation(method, path) == expected


async def _fine() -> None:
    return None


async def _refused() -> None:
    raise ConnectionRefusedError("connection refused by 127.0.0.1:10002 with key=secret")


async def _hangs() -> None:
    await asyncio.sleep(60)


async def test_health_reports_each_check(monkeypatch: pytest.MonkeyPatch) -> None:
    assert await surface.health(lambda: None, _fine) == (
        200, {"status": "ok", "checks": {"settings": {"status": "ok"}, "storage": {"status": "ok"}}})
    status, body = await surface.health(lambda: None, _refused)
    assert status == 503 and body["checks"]["storage"] == {"status": "error", "reason": "ConnectionRefusedError"}
    assert "secret" not in str(body)  # the exception's text (which may hold a connection string) is not shown
    monkeypatch.setattr(surface, "HEALTH_TIMEOUT_SECONDS", 0.05)
    status, body = await surface.health(lambda: None, _hangs)
    assert status == 503 and body["checks"]["storage"]["reason"] == "no answer within 0.05 s"
    status, body = await surface.health(lambda: Settings.from_env({"RESILIENT_APPEND_WINDOW_MS": "99999"}), _fine)
    assert status == 503 and body["status"] == "unavailable"
    assert "RESILIENT_APPEND_WINDOW_MS" in body["checks"]["settings"]["reason"]
    assert body["checks"]["storage"]["status"] == "skipped"


def test_invalid_settings_are_one_error_line_at_start_up(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="resilient.http"):
        assert surface.check_settings_at_start_up(lambda: Settings.from_env({})) is True
        assert caplog.records == []
        assert surface.check_settings_at_start_up(
            lambda: Settings.from_env({"RESILIENT_STORAGE_PREFIX": "Bad Prefix!"})) is False
    (line,) = caplog.records
    assert line.levelno == logging.ERROR and "RESILIENT_STORAGE_PREFIX" in line.getMessage()
