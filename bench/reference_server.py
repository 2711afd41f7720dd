"""The reference SDK (``azure-ai-agentserver-responses`` 2.3.0) as a local server, for side-by-side benches.

Its handler mirrors our offline research agent: ``--phases`` phases (default 3), each one output message
streamed as ``--words`` word deltas (default 48) with an optional ``--delay-ms`` pause after each delta, and
``yield stream.checkpoint()`` after each phase. On a crash-recovered entry it seeds the stream from
``context.persisted_response`` and skips the phases already persisted (the SDK's one-item-per-phase recipe).

Persistence is ON: ``ResponsesServerOptions(resilient_background=True)`` with the SDK's default local stores
under ``AGENTSERVER_STATE_ROOT`` (``--state-root``, default a fresh temporary folder removed at exit):
``FileResponseStore`` (one JSON file per response and per item, atomic replace), the file-backed SSE replay
registry (each event appended and fsync'd before fan-out) and ``LocalFileTaskProvider`` (durable task JSON).
Checkpoints persist only for ``background=true`` requests (the SDK ignores them otherwise).

Offline by construction: binds 127.0.0.1, never the hosted Foundry store, and the SDK's OpenTelemetry
setup is skipped (``configure_observability=None``) unless ``--observability``; Azure Monitor "statsbeat"
(which otherwise tries to reach a public ingestion endpoint) is disabled either way.

``--count-storage`` wraps those three stores with call counters and serves them at ``GET /bench/stats``
(a route that is not part of the protocol; off by default so timings are not touched).

    .venv/bin/python bench/reference_server.py --port 8088 [--words 48] [--delay-ms 0] [--phases 3]

Prints ``reference listening on http://127.0.0.1:PORT`` once ``/readiness`` answers. Binds 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import collections
import functools
import hashlib
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import AsyncIterator
from typing import Any

PHASE_NAMES = ("scope", "sources", "findings", "synthesis")
_VOCABULARY = (
    "evidence",
    "durable",
    "checkpoint",
    "replay",
    "phase",
    "signal",
    "careful",
    "measured",
    "source",
    "finding",
    "claim",
    "context",
    "answer",
    "stream",
    "storage",
    "orchestration",
    "recovery",
    "trace",
    "survey",
    "method",
    "result",
    "caveat",
    "summary",
    "question",
    "insight",
    "pattern",
    "detail",
)


def phase_words(question: str, phase: str, index: int, count: int) -> list[str]:
    """Deterministic pseudo-prose shaped like our offline agent's (same word lengths on average)."""
    seed = hashlib.sha256(f"{question}\x00{phase}\x00{index}".encode()).digest()
    words = [f"[{phase}]", "On", *(" ".join(question.split()[:6]) or "the question").split()]
    words[-1] += ":"
    i = 0
    while len(words) < count:
        words.append(_VOCABULARY[(seed[i % len(seed)] ^ (i * 31 % 251)) % len(_VOCABULARY)])
        i += 1
    words = words[:count]
    words[-1] += "."
    return words


def phase_name(index: int) -> str:
    return PHASE_NAMES[index] if index < len(PHASE_NAMES) else f"deep-dive-{index - 2}"


# ---------------------------------------------------------------------------------------------- counting
STATS: collections.Counter[str] = collections.Counter()


def _count_async(cls: type, names: list[str], label: str) -> None:
    for name in names:
        original = getattr(cls, name, None)
        if original is None:
            continue

        @functools.wraps(original)
        async def wrapper(*args: Any, __orig: Any = original, __key: str = f"{label}.{name}", **kwargs: Any) -> Any:
            STATS[__key] += 1
            return await __orig(*args, **kwargs)

        setattr(cls, name, wrapper)


def _count_sync(cls: type, names: list[str], label: str) -> None:
    for name in names:
        original = getattr(cls, name, None)
        if original is None:
            continue

        @functools.wraps(original)
        def wrapper(*args: Any, __orig: Any = original, __key: str = f"{label}.{name}", **kwargs: Any) -> Any:
            STATS[__key] += 1
            return __orig(*args, **kwargs)

        setattr(cls, name, wrapper)


def install_storage_counters() -> None:
    """Count every call into the SDK's three local stores (response files, SSE replay file, task files)."""
    from azure.ai.agentserver.core.streaming._concrete import FileBackedReplayEventStream
    from azure.ai.agentserver.core.tasks._local_provider import LocalFileTaskProvider
    from azure.ai.agentserver.responses.store._file import FileResponseStore

    _count_async(
        FileResponseStore,
        [
            "create_response",
            "get_response",
            "update_response",
            "delete_response",
            "get_input_items",
            "get_items",
            "get_history_item_ids",
        ],
        "responses",
    )
    _count_async(FileBackedReplayEventStream, ["emit", "close"], "stream")  # each: write + fsync
    _count_async(LocalFileTaskProvider, ["create", "get", "update", "delete", "list"], "tasks")
    _count_sync(LocalFileTaskProvider, ["_write_task"], "tasks.file")


# ---------------------------------------------------------------------------------------------- server
def build_app(
    words: int,
    delay_ms: float,
    phases: int,
    count_storage: bool,
    log_level: str = "WARNING",
    observability: bool = False,
) -> Any:
    from azure.ai.agentserver.responses import (
        ResponseEventStream,
        ResponsesAgentServerHost,
        ResponsesServerOptions,
    )

    if count_storage:
        install_storage_counters()
    options = ResponsesServerOptions(resilient_background=True, shutdown_grace_period_seconds=2)
    extra: dict[str, Any] = {} if observability else {"configure_observability": None}
    app = ResponsesAgentServerHost(
        options=options, access_log=None, graceful_shutdown_timeout=2, log_level=log_level, **extra
    )
    delay = max(0.0, delay_ms) / 1000.0

    @app.response_handler
    async def research(request: Any, context: Any, cancellation_signal: asyncio.Event) -> AsyncIterator[Any]:
        persisted = context.persisted_response if context.is_recovery else None
        if persisted is not None:
            stream = ResponseEventStream(response=persisted)
        else:
            stream = ResponseEventStream(response_id=context.response_id, request=request)
        yield stream.emit_created()
        yield stream.emit_in_progress()
        already = len(stream.response.get("output") or [])
        question = await context.get_input_text()
        for index in range(phases):
            if index < already:
                continue  # persisted by an earlier lifetime's checkpoint
            if cancellation_signal.is_set():
                return  # the SDK writes the cancelled terminal itself
            message = stream.add_output_item_message()
            yield message.emit_added()
            text = message.add_text_content()
            yield text.emit_added()
            for position, word in enumerate(phase_words(question, phase_name(index), index, words)):
                yield text.emit_delta(word if position == 0 else " " + word)
                if delay:
                    await asyncio.sleep(delay)
            yield text.emit_text_done()
            yield text.emit_done()
            yield message.emit_done()
            yield stream.checkpoint()
        yield stream.emit_completed()

    if count_storage:
        from starlette.responses import JSONResponse

        async def stats(_request: Any) -> Any:
            return JSONResponse(dict(STATS))

        app.add_route("/bench/stats", stats, methods=["GET"])
    return app


def announce_when_ready(port: int, deadline_s: float = 30.0) -> None:
    """Poll ``/readiness`` (bounded) and print the ready line once it answers."""
    url = f"http://127.0.0.1:{port}/readiness"
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(url, timeout=1.0) as reply:
                if reply.status == 200:
                    print(f"reference listening on http://127.0.0.1:{port}", flush=True)
                    return
        except OSError:
            pass
        time.sleep(0.05)
    print(f"reference: /readiness did not answer within {deadline_s:.0f}s", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=8088)
    parser.add_argument("--words", type=int, default=48, help="word deltas per phase (default 48)")
    parser.add_argument("--delay-ms", type=float, default=0.0, help="pause after each delta (default 0)")
    parser.add_argument("--phases", type=int, default=3, help="phases, one message each (default 3)")
    parser.add_argument("--state-root", help="AGENTSERVER_STATE_ROOT (default: temp folder, removed at exit)")
    parser.add_argument(
        "--count-storage", action="store_true", help="count store calls, serve them at GET /bench/stats"
    )
    parser.add_argument("--log-level", default="WARNING")
    parser.add_argument(
        "--observability",
        action="store_true",
        help="keep the SDK's default OpenTelemetry setup (off by default; statsbeat is always off)",
    )
    args = parser.parse_args(argv)
    if not (1 <= args.words <= 2000 and 1 <= args.phases <= 20):
        parser.error("--words must be 1-2000 and --phases 1-20")

    if args.state_root:
        os.makedirs(args.state_root, exist_ok=True)
        os.environ["AGENTSERVER_STATE_ROOT"] = args.state_root
    else:
        root = tempfile.mkdtemp(prefix="refserver-state-")
        os.environ["AGENTSERVER_STATE_ROOT"] = root
        atexit.register(shutil.rmtree, root, True)
    # Local only: never the hosted (Foundry) store, never telemetry export.
    for name in (
        "FOUNDRY_HOSTING_ENVIRONMENT",
        "FOUNDRY_PROJECT_ENDPOINT",
        "APPLICATIONINSIGHTS_CONNECTION_STRING",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ):
        os.environ.pop(name, None)
    # The Azure Monitor exporter's "statsbeat" phones home to a public ingestion endpoint by default.
    os.environ["APPLICATIONINSIGHTS_STATSBEAT_DISABLED_ALL"] = "true"
    logging.basicConfig(level=args.log_level.upper())

    app = build_app(
        args.words, args.delay_ms, args.phases, args.count_storage, args.log_level.upper(), args.observability
    )
    threading.Thread(target=announce_when_ready, args=(args.port,), daemon=True).start()
    app.run(host="127.0.0.1", port=args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
