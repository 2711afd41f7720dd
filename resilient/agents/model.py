"""The model path of the sample agent: one OpenAI-compatible client, and the mapping between this service's
tools and errors and the model's (the call itself: ``model_calls``; items: ``chat_input`` and
``responses_input``; parameters: ``chat_params`` and ``responses_params``).

Why chat completions by default (``RESILIENT_MODEL_API=chat``): every endpoint shape this template targets
(Azure OpenAI deployment URLs, Azure's ``/openai/v1`` API, OpenAI and OpenAI-compatible servers) serves it, it
streams text, tool-call arguments and (with ``stream_options.include_usage``) the model's own token counts.
``RESILIENT_MODEL_API=responses`` calls the Responses API instead, for a model that takes its reasoning
back (``reasoning`` items with ``encrypted_content``); with a deployment URL it needs an
``AZURE_OPENAI_API_VERSION`` that serves ``/openai/responses``.

Endpoint shapes, from ``AZURE_OPENAI_ENDPOINT``:

* ``https://<resource>.openai.azure.com`` → deployment URLs (``/openai/deployments/<name>/...`` with
  ``api-version``), through ``openai.AsyncAzureOpenAI``;
* a base URL whose path ends in ``/v1`` (``https://<resource>.openai.azure.com/openai/v1``,
  ``https://api.openai.com/v1``, a local server) → ``openai.AsyncOpenAI(base_url=...)``.

Auth: an API key only when ``AZURE_OPENAI_API_KEY`` is set; otherwise an Entra ID token for
``AZURE_OPENAI_TOKEN_SCOPE`` from ``azure-identity`` (``DefaultAzureCredential`` with the model's own
managed-identity client id, ``AZURE_OPENAI_CLIENT_ID``, falling back to the app's).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from resilient.agents.base import AgentError, PermanentAgentError, TransientAgentError
from resilient.settings import Settings

log = logging.getLogger("resilient.agents.model")

TRANSIENT_STATUSES = frozenset({408, 409, 429})

if TYPE_CHECKING:
    import openai


def is_v1_base_url(endpoint: str) -> bool:
    """True for an OpenAI-style base URL (path ends in ``/v1``), False for an Azure resource endpoint."""
    return urlparse(endpoint).path.rstrip("/").endswith("/v1")


def create_client(settings: Settings) -> Any:
    """The async client for the configured endpoint (see the module docstring)."""
    import openai  # here, not at module level: a large import that a cold worker without a model must not pay

    endpoint = settings.azure_openai_endpoint or ""
    common: dict[str, Any] = {"timeout": settings.model_timeout_seconds, "max_retries": settings.model_max_retries}
    api_key: Any = settings.azure_openai_api_key
    token_provider = None
    if not api_key:
        from azure.identity.aio import DefaultAzureCredential, get_bearer_token_provider

        credential = DefaultAzureCredential(managed_identity_client_id=settings.model_client_id)
        token_provider = get_bearer_token_provider(credential, settings.model_token_scope)
    if is_v1_base_url(endpoint):
        return openai.AsyncOpenAI(base_url=endpoint, api_key=api_key or token_provider, **common)
    if api_key:
        return openai.AsyncAzureOpenAI(azure_endpoint=endpoint, api_key=api_key,
                                       api_version=settings.azure_openai_api_version, **common)
    return openai.AsyncAzureOpenAI(azure_endpoint=endpoint, azure_ad_token_provider=token_provider,
                                   api_version=settings.azure_openai_api_version, **common)


def agent_error(exc: BaseException) -> AgentError:
    """Classify a model error. Permanent: 4xx except 408/409/429 (bad key, no access, no such deployment,
    a bad request): retrying cannot help. Transient: 408/409/429, 5xx, timeouts and dropped connections;
    the model's ``Retry-After`` (or ``retry-after-ms``) tells how long to wait."""
    import openai

    if isinstance(exc, AgentError):  # already classified (an error event inside the stream)
        return exc
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        message = f"The model answered {status}: {_message(exc)}"
        if 400 <= status < 500 and status not in TRANSIENT_STATUSES:
            return PermanentAgentError(message)
        error = TransientAgentError(message, retry_after=_retry_after(exc.response.headers))
        if status == 429:
            error.code = "rate_limit_exceeded"
        return error
    if isinstance(exc, openai.APIConnectionError | TimeoutError | ConnectionError) or _transport_error(exc):
        return TransientAgentError(f"The model connection failed: {type(exc).__name__}: {exc}")
    if isinstance(exc, openai.APIError):  # an error event inside the stream
        return TransientAgentError(f"The model stream failed: {exc.message}")
    return PermanentAgentError(f"{type(exc).__name__}: {exc}")


# The HTTP package under the ``openai`` client: ``httpx`` up to openai 2.x, ``httpx2`` from 3.x. A transport
# error raised while a stream is read reaches us unwrapped (not as ``openai.APIConnectionError``).
_TRANSPORT_PACKAGES = ("httpx2", "httpx")


def _transport_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a transport error of the package the installed ``openai`` uses. Looked up among
    the loaded modules instead of imported: importing a package that the installed client version does not
    use would raise ImportError inside error handling and turn every model error into a crash."""
    for name in _TRANSPORT_PACKAGES:
        error = getattr(sys.modules.get(name), "HTTPError", None)
        if isinstance(error, type) and isinstance(exc, error):
            return True
    return False


def _message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])[:500]
    return str(exc.message)[:500]


def _retry_after(headers: Any) -> float | None:
    for name, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        raw = headers.get(name) if headers is not None else None
        if raw:
            try:
                return max(0.0, float(raw) / divisor)
            except ValueError:
                continue
    return None


def chat_tools(tools: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The request's function tools in the chat-completions shape."""
    out = []
    for tool in tools:
        function: dict[str, Any] = {"name": tool["name"]}
        for key in ("description", "parameters", "strict"):
            if tool.get(key) is not None:
                function[key] = tool[key]
        out.append({"type": "function", "function": function})
    return out


def responses_tools(tools: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The request's function tools as the Responses API takes them (the shape the request used)."""
    return [{"type": "function", **{key: tool[key] for key in ("name", "description", "parameters", "strict")
                                    if tool.get(key) is not None}} for tool in tools]


def chat_tool_choice(choice: str | dict[str, Any]) -> Any:
    if isinstance(choice, dict):
        return {"type": "function", "function": {"name": choice["name"]}}
    return choice
