"""Model errors are classified with whatever HTTP package the installed ``openai`` client uses.

requirements.txt allows ``openai>=1.99,<4``: 1.x and 2.x run on ``httpx``, 3.x on ``httpx2``. Nothing
here needs a server or a particular transport package, so the module also runs in a venv with the lowest
allowed ``openai`` (docs/OPERATIONS.md, "Oldest supported openai", shows how).
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

import openai
import pytest

from resilient.agents import model
from resilient.agents.base import PermanentAgentError, TransientAgentError


def _client_transport() -> ModuleType:
    """The HTTP package the installed ``openai`` builds its requests with (``httpx`` or ``httpx2``)."""
    from openai import _exceptions

    found = getattr(_exceptions, "httpx2", None) or getattr(_exceptions, "httpx", None)
    assert isinstance(found, ModuleType), "openai's exceptions module names no HTTP package"
    return found


TRANSPORT = _client_transport()
REQUEST = TRANSPORT.Request("POST", "http://model.invalid/v1/chat/completions")


def _status_error(status: int, headers: dict[str, str] | None = None) -> openai.APIStatusError:
    response = TRANSPORT.Response(status, headers=headers or {}, request=REQUEST)
    return openai.APIStatusError("nope", response=response, body={"error": {"message": "nope"}})


def _transports() -> list[str]:
    """The transport packages importable here (at least the one the installed client uses)."""
    found = []
    for name in ("httpx", "httpx2"):
        try:
            importlib.import_module(name)
        except ImportError:
            continue
        found.append(name)
    return found


def test_the_client_s_own_errors_are_classified() -> None:
    assert isinstance(model.agent_error(_status_error(400)), PermanentAgentError)
    limited = model.agent_error(_status_error(429, {"retry-after-ms": "1500"}))
    assert isinstance(limited, TransientAgentError) and limited.retry_after == 1.5
    assert limited.code == "rate_limit_exceeded"
    assert isinstance(model.agent_error(_status_error(503)), TransientAgentError)
    dropped = model.agent_error(openai.APIConnectionError(request=REQUEST))  # type: ignore[arg-type]
    assert isinstance(dropped, TransientAgentError) and str(dropped).startswith("The model connection failed")
    timed_out = model.agent_error(openai.APITimeoutError(request=REQUEST))  # type: ignore[arg-type]
    assert isinstance(timed_out, TransientAgentError)
    assert isinstance(model.agent_error(ValueError("bug")), PermanentAgentError)


@pytest.mark.parametrize("name", _transports())
def test_an_unwrapped_transport_error_is_transient(name: str) -> None:
    """A connection dropped while a stream is read surfaces as the transport's own ReadError."""
    transport = importlib.import_module(name)
    error = model.agent_error(transport.ReadError("peer closed connection"))
    assert isinstance(error, TransientAgentError), error


def test_classification_never_imports_a_transport_the_client_does_not_use(monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``httpx2`` not installed (openai 1.x/2.x), classifying must not raise ImportError: a model error
    would otherwise fail the run as a crash instead of being retried."""
    monkeypatch.setitem(sys.modules, "httpx2", None)  # ``import httpx2`` now raises ImportError
    dropped = model.agent_error(openai.APIConnectionError(request=REQUEST))  # type: ignore[arg-type]
    assert isinstance(dropped, TransientAgentError)
    assert isinstance(model.agent_error(_status_error(401)), PermanentAgentError)
    if "httpx" in _transports():
        import httpx

        assert isinstance(model.agent_error(httpx.ConnectError("refused")), TransientAgentError)
