"""The Vercel AI SDK (``ai`` with ``@ai-sdk/openai`` and ``@ai-sdk/open-responses``, from package.json),
unmodified, against the service with the default offline agent.

Each test runs tests/clients/ai_sdk.mjs with ``node`` for one provider and scenario and asserts on the JSON
it prints. The tool scenarios use the SDK's own multi-step loop (``tools`` with ``execute`` and
``stopWhen: stepCountIs(4)``): the offline agent calls ``lookup`` (it calls a function tool when offered
one and has no tool output yet), the SDK runs it and sends the whole history back (``function_call`` +
``function_call_output`` items), and the second step's answer quotes the tool's output.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.azurite

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("ai_sdk.mjs")
PROVIDERS = ["openai", "open-responses"]
MARKER = "FACT-1: durable timers survive restarts"


def run_sdk(api_base: str, provider: str, scenario: str) -> dict[str, Any]:
    node = shutil.which("node")
    assert node is not None, "Node.js is required (scripts/setup.sh installs the SDK with npm)"
    done = subprocess.run([node, str(SCRIPT), provider, scenario], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "RESILIENT_CLIENT_BASE_URL": api_base})
    lines = done.stdout.strip().splitlines()
    assert lines, f"no output (exit {done.returncode}): {done.stderr[-2000:]}"
    result: dict[str, Any] = json.loads(lines[-1])
    assert done.returncode == 0 and "error" not in result, result
    return result


@pytest.mark.parametrize("provider", PROVIDERS)
def test_generate_text(api_base: str, provider: str) -> None:
    result = run_sdk(api_base, provider, "generate")
    assert result["finishReason"] == "stop"
    assert "On Say hello" in result["text"]
    assert len(result["steps"]) == 1


@pytest.mark.parametrize("provider", PROVIDERS)
def test_stream_text(api_base: str, provider: str) -> None:
    result = run_sdk(api_base, provider, "stream")
    assert result["finishReason"] == "stop"
    assert "On Count from 1 to" in result["text"]
    assert result["textChunks"] > 2  # the text arrived in pieces, not at the end


def test_previous_response_id(api_base: str) -> None:
    """``providerOptions.openai.previousResponseId``: the second turn continues the first on the server (the
    offline agent's first phase of a follow-up turn mentions the chain's earlier question).
    @ai-sdk/open-responses has no such option (its provider options are reasoning settings only)."""
    result = run_sdk(api_base, "openai", "previous")
    assert result["finishReason"] == "stop"
    assert 'Following up on "Remember the' in result["text"]  # words_per_phase=6 cuts the rest


@pytest.mark.parametrize("scenario", ["tools", "tools-stream", "tools-nostore"])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_multi_step_tool_loop(api_base: str, provider: str, scenario: str) -> None:
    result = run_sdk(api_base, provider, scenario)
    assert result["executed"] == ["What do durable timers do?"]
    first, second = result["steps"]
    assert first["finishReason"] == "tool-calls"
    assert first["toolCalls"] == [{"name": "lookup", "input": {"query": "What do durable timers do?"}}]
    assert first["toolResults"] == [{"name": "lookup", "output": MARKER}]
    assert second["finishReason"] == "stop" and second["toolCalls"] == []
    assert result["finishReason"] == "stop"
    assert MARKER in result["text"]


@pytest.mark.parametrize("scenario", ["image", "file"])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_image_and_file_in_prompt(api_base: str, provider: str, scenario: str) -> None:
    """The part reaches the agent: the offline agent names what it was given (resilient/agents/research.py)."""
    result = run_sdk(api_base, provider, scenario)
    assert result["finishReason"] == "stop"
    assert f"[scope] Given 1 {scenario}." in result["text"], result["text"]


@pytest.mark.parametrize("scenario", ["mcp-approval", "mcp-approval-stream"])
def test_mcp_approval_with_store_true(api_base: str, scenario: str) -> None:
    """The SDK's tool approval in its default ``store: true`` mode: the paused response's
    ``mcp_approval_request`` reaches the user as a ``tool-approval-request``; the answer goes back as the whole
    history with an ``item_reference`` to the stored request and an ``mcp_approval_response``, without
    ``previous_response_id``, and the paused plan resumes at the phase that asked (the offline agent asks
    before its last phase). ``generateText`` and ``streamText`` alike."""
    result = run_sdk(api_base, "openai", scenario)
    first = result["first"]
    assert first["toolCalls"] == ["mcp.sources"] and len(first["approvals"]) == 1
    assert first["text"].startswith("[scope] ")
    sent = result["requestBody"]
    assert "previous_response_id" not in sent
    assert sent["input"][-2:] == [
        {"type": "item_reference", "id": first["approvals"][0]},
        {"type": "mcp_approval_response", "approval_request_id": first["approvals"][0], "approve": True}]
    assert result["finishReason"] == "stop"
    assert result["text"].startswith("[sources] "), "the resumed turn runs the phase that asked, not the first"
