"""The model client's endpoint shapes, error classification and settings, against the fake model server
(a real HTTP server on a loopback port)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from resilient.agents import model
from resilient.agents.base import PermanentAgentError, TransientAgentError
from resilient.agents.chat_input import chat_messages
from resilient.settings import Settings
from tests.fakemodel.server import Behaviour, FakeModel


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeModel]:
    with FakeModel() as server:
        yield server


def _settings(endpoint: str, **extra: str) -> Settings:
    return Settings.from_env({"AZURE_OPENAI_ENDPOINT": endpoint, "AZURE_OPENAI_DEPLOYMENT": "dep",
                              "AZURE_OPENAI_API_KEY": "test-key", "RESILIENT_MODEL_MAX_RETRIES": "0", **extra})


async def _call(settings: Settings) -> None:
    client = model.create_client(settings)
    try:  # closed on every path: a client left open holds its pooled connection to the module's server
        stream = await client.chat.completions.create(model="dep", messages=[{"role": "user", "content": "hi"}],
                                                      stream=True)
        async for _ in stream:
            pass
    finally:
        await client.close()


@pytest.mark.parametrize(("suffix", "path"), [
    ("", "/openai/deployments/dep/chat/completions"),
    ("/openai/v1", "/openai/v1/chat/completions"),
    ("/v1/", "/v1/chat/completions"),
])
async def test_endpoint_shapes(fake: FakeModel, suffix: str, path: str) -> None:
    await _call(_settings(fake.base + suffix))
    seen = fake.chat_requests()[-1]
    assert seen.path == path
    if suffix:
        assert seen.headers["authorization"] == "Bearer test-key"
    else:
        assert seen.headers["api-key"] == "test-key"


@pytest.mark.parametrize(("status", "permanent"), [(400, True), (401, True), (403, True), (404, True),
                                                   (422, True), (408, False), (429, False), (500, False),
                                                   (503, False)])
async def test_status_errors_are_classified(fake: FakeModel, status: int, permanent: bool) -> None:
    fake.script.append(Behaviour(kind="status", status=status, headers={"Retry-After": "7"}, message="nope"))
    with pytest.raises(Exception) as raised:
        await _call(_settings(fake.base + "/v1"))
    error = model.agent_error(raised.value)
    assert isinstance(error, PermanentAgentError if permanent else TransientAgentError)
    assert f"The model answered {status}: nope" == str(error)
    if not permanent:
        assert isinstance(error, TransientAgentError) and error.retry_after == 7.0
        assert error.code == ("rate_limit_exceeded" if status == 429 else "server_error")


async def test_a_dropped_stream_is_transient(fake: FakeModel) -> None:
    fake.script.append(Behaviour(kind="drop", chunks=["a"]))
    with pytest.raises(Exception) as raised:
        await _call(_settings(fake.base + "/v1"))
    error = model.agent_error(raised.value)
    assert isinstance(error, TransientAgentError) and error.retry_after is None
    assert str(error).startswith("The model connection failed")


def test_model_settings_and_identity_fallback() -> None:
    own = Settings.from_env({"AZURE_OPENAI_CLIENT_ID": "model-id", "AzureWebJobsStorage__clientId": "app-id",
                             "RESILIENT_MODEL_TIMEOUT_SECONDS": "12.5", "RESILIENT_MODEL_MAX_RETRIES": "5"})
    assert (own.model_client_id, own.model_timeout_seconds, own.model_max_retries) == ("model-id", 12.5, 5)
    assert Settings.from_env({"AzureWebJobsStorage__clientId": "app-id"}).model_client_id == "app-id"
    assert Settings.from_env({}).model_client_id is None


def test_chat_messages_carry_calls_and_outputs() -> None:
    history = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "q"}]},
        {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "call_2", "name": "g", "arguments": "{\"a\": 1}"},
    ]
    turn = [{"type": "function_call_output", "call_id": "call_1", "output": "one"},
            {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "two"}]}]
    messages = chat_messages("sys", history, turn, ["earlier"])
    assert messages == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {"id": "call_2", "type": "function", "function": {"name": "g", "arguments": "{\"a\": 1}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "one"},
        {"role": "tool", "tool_call_id": "call_2", "content": "two"},
        {"role": "assistant", "content": "earlier"},
    ]
