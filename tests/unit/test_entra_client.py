"""The client setup README documents for an app behind Entra ID auth: the ``openai`` client with
``api_key=get_bearer_token_provider(credential, "api://<client-id>/.default")`` sends a fresh bearer token
for that scope on every request (Easy Auth validates it), and no function key."""

from __future__ import annotations

import time
from typing import Any

import httpx
from azure.core.credentials import AccessToken
from azure.identity import get_bearer_token_provider
from openai import OpenAI

SCOPE = "api://11111111-2222-3333-4444-555555555555/.default"


class FakeCredential:
    """Stands in for DefaultAzureCredential: a new token per call, short-lived so none is cached for long."""

    def __init__(self) -> None:
        self.scopes: list[tuple[str, ...]] = []

    def get_token(self, *scopes: str, **_: Any) -> AccessToken:
        self.scopes.append(scopes)
        return AccessToken(f"token-{len(self.scopes)}", int(time.time()) + 1)  # expires: refreshed next call


def test_openai_client_sends_a_bearer_token_per_request() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"object": "list", "data": [], "first_id": None, "last_id": None,
                                         "has_more": False})

    credential = FakeCredential()
    client = OpenAI(base_url="https://app.example.net", api_key=get_bearer_token_provider(credential, SCOPE),
                    max_retries=0, http_client=httpx.Client(transport=httpx.MockTransport(handler)))
    client.responses.input_items.list("resp_1")
    client.responses.input_items.list("resp_1")
    assert [r.headers["authorization"] for r in seen] == ["Bearer token-1", "Bearer token-2"]
    assert all("x-functions-key" not in r.headers for r in seen)
    assert credential.scopes == [(SCOPE,), (SCOPE,)]
