"""A scripted OpenAI-compatible model server for tests: a real HTTP server on a loopback port.

It speaks what the sample agent uses: streamed chat completions (``POST .../chat/completions`` under the
Azure deployment shape ``/openai/deployments/<name>/``, Azure's ``/openai/v1/`` and a plain ``/v1/``),
with ``stream_options.include_usage`` honoured (a last chunk with ``usage``), streamed Responses
(``POST .../responses`` under ``/openai/``, ``/openai/v1/`` and ``/v1/``: ``responses_stream.py``), plus
an App Service style managed-identity token endpoint (``GET /msi/token``, header ``X-IDENTITY-HEADER``)
that ``azure-identity`` uses when ``IDENTITY_ENDPOINT``/``IDENTITY_HEADER`` are set.

Each model request (chat or Responses) takes the next :class:`Behaviour` from :attr:`FakeModel.script`
(the default answers a short text). Every request is recorded (path, headers, JSON body) for assertions.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from tests.fakemodel.responses_stream import responses_stream
from tests.hostdouble.api import free_port

PROMPT_TOKENS = 1111
COMPLETION_TOKENS = 222
CACHED_TOKENS = 11
IDENTITY_SECRET = "fake-identity-header-secret"


@dataclass
class Behaviour:
    """What one chat request gets.

    kind: ``text`` (stream ``chunks``), ``tool_call`` (stream a call of ``tool`` with ``chunks`` as its
    argument fragments, ``delay`` seconds before each; ``more_calls`` adds further calls to the same answer,
    each ``(tool, arguments, call_id)``), ``status`` (answer ``status`` with ``headers`` and an
    OpenAI error body),
    ``drop`` (stream ``chunks`` then cut the connection), ``slow`` (``chunks`` with ``delay`` seconds
    between them; the server notes whether the client hung up early).
    reasoning: on the Responses API, the answer starts with a reasoning item of this summary (chat ignores it).
    """

    kind: str = "text"
    chunks: list[str] = field(default_factory=lambda: ["Model ", "says ", "hello."])
    tool: str = ""
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    message: str = ""
    delay: float = 0.0
    call_id: str = "call_fake"
    more_calls: list[tuple[str, str, str]] = field(default_factory=list)
    reasoning: str = ""


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class FakeModel:
    """The server and its script. Use as a context manager (starts uvicorn in a thread)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.script: deque[Behaviour] = deque()
        # Asked for a request's behaviour when the script is empty: a model that decides from the messages
        # (an agent's tool loop) rather than from the order of requests, so a repeated step gets the same answer.
        self.responder: Callable[[dict[str, Any]], Behaviour] | None = None
        self.requests: list[Seen] = []
        self.token_requests: list[dict[str, str]] = []
        self.closed_early: list[int] = []  # chunks sent before a client hung up on a slow stream
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self.app = self._build()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def chat_requests(self) -> list[Seen]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    def responses_requests(self) -> list[Seen]:
        return [r for r in self.requests if r.path.endswith("/responses")]

    # ------------------------------------------------------------------ app
    def _build(self) -> FastAPI:
        app = FastAPI()

        @app.get("/msi/token")
        async def token(request: Request) -> JSONResponse:
            if request.headers.get("x-identity-header") != IDENTITY_SECRET:
                return JSONResponse({"error": "bad identity header"}, status_code=401)
            params = dict(request.query_params)
            self.token_requests.append(params)
            return JSONResponse({"access_token": f"fake-token-{len(self.token_requests)}",
                                 "expires_on": str(int(time.time()) + 3600), "resource": params.get("resource"),
                                 "token_type": "Bearer", "client_id": params.get("client_id", "")})

        async def chat(request: Request) -> Any:
            body = await request.json()
            self.requests.append(Seen(request.url.path, dict(request.headers), body))
            if self.script:
                behaviour = self.script.popleft()
            else:
                behaviour = self.responder(body) if self.responder is not None else Behaviour()
            if behaviour.kind == "status":
                error = {"error": {"message": behaviour.message or f"status {behaviour.status}",
                                   "type": "invalid_request_error", "code": str(behaviour.status), "param": None}}
                return JSONResponse(error, status_code=behaviour.status, headers=behaviour.headers)
            if request.url.path.endswith("/responses"):
                stream = responses_stream(body, behaviour, self._hung_up(behaviour))
                return StreamingResponse(stream, media_type="text/event-stream")
            usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return StreamingResponse(self._stream(body, behaviour, usage), media_type="text/event-stream")

        for path in ("/openai/deployments/{deployment}/chat/completions", "/openai/v1/chat/completions",
                     "/v1/chat/completions", "/openai/responses", "/openai/v1/responses", "/v1/responses"):
            app.post(path)(chat)
        return app

    def _hung_up(self, behaviour: Behaviour) -> Callable[[int], None]:
        def note(sent: int) -> None:
            if behaviour.kind == "slow":
                self.closed_early.append(sent)
        return note

    async def _stream(self, body: dict[str, Any], behaviour: Behaviour, usage: bool) -> AsyncIterator[bytes]:
        model = str(body.get("model", "fake"))
        sent = 0
        try:
            if behaviour.kind == "tool_call":
                yield _chunk(model, {"role": "assistant", "tool_calls": [
                    {"index": 0, "id": behaviour.call_id, "type": "function",
                     "function": {"name": behaviour.tool, "arguments": ""}}]})
                for fragment in behaviour.chunks:
                    if behaviour.delay:
                        await asyncio.sleep(behaviour.delay)
                    yield _chunk(model, {"tool_calls": [{"index": 0, "function": {"arguments": fragment}}]})
                for index, (tool, arguments, call_id) in enumerate(behaviour.more_calls, start=1):
                    yield _chunk(model, {"tool_calls": [{"index": index, "id": call_id, "type": "function",
                                                         "function": {"name": tool, "arguments": arguments}}]})
                yield _chunk(model, {}, finish="tool_calls")
            else:
                yield _chunk(model, {"role": "assistant", "content": ""})
                for text in behaviour.chunks:
                    if behaviour.delay:
                        await asyncio.sleep(behaviour.delay)
                    yield _chunk(model, {"content": text})
                    sent += 1
                if behaviour.kind == "drop":
                    raise ConnectionAbortedError("fake model drops the connection")
                yield _chunk(model, {}, finish="stop")
            if usage:
                yield _usage_chunk(model)
            yield b"data: [DONE]\n\n"
        except (asyncio.CancelledError, GeneratorExit):
            if behaviour.kind == "slow":
                self.closed_early.append(sent)
            raise

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> FakeModel:
        import uvicorn

        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="critical",
                                access_log=False, lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="fake-model", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 15
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("fake model server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)


def _chunk(model: str, delta: dict[str, Any], finish: str | None = None) -> bytes:
    data = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}
    return f"data: {json.dumps(data)}\n\n".encode()


def _usage_chunk(model: str) -> bytes:
    data = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
            "choices": [], "usage": {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": COMPLETION_TOKENS,
                                     "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS,
                                     "prompt_tokens_details": {"cached_tokens": CACHED_TOKENS},
                                     "completion_tokens_details": {"reasoning_tokens": 0}}}
    return f"data: {json.dumps(data)}\n\n".encode()


@contextlib.contextmanager
def running() -> Iterator[FakeModel]:
    with FakeModel() as model:
        yield model
