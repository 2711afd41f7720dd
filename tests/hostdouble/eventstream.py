"""The one stream between the host and its worker that carries every non-HTTP invocation.

The real host and the Python worker talk over a single bidirectional gRPC stream
(azure-functions-language-worker-protobuf, ``FunctionRpc.proto``: ``rpc EventStream (stream StreamingMessage)
returns (stream StreamingMessage)``): an ``InvocationRequest`` goes out, its ``InvocationResponse`` comes back
on the same stream with the same invocation id, and many invocations are in flight at once. No connection,
HTTP request or routing per invocation. The double does the same over a pair of pipes the host opens before
it starts the worker: each message is a 4-byte big-endian length and a JSON object.

* host → worker: ``{"id", "kind", "body", "headers"}`` (``kind``: orchestrator, activity, entity, timer;
  ``headers`` carries the double's kill plan);
* worker → host: ``{"id", "body"}``, or ``{"id", "status", "text"}`` when the worker could not run the
  invocation at all (an unknown kind, a body it cannot read).

When the worker dies its end of the stream closes: every invocation still waiting on it fails, and the
supervisor turns that into the worker-exit outcome (as ``GrpcWorkerChannel.TryFailExecutions`` does). HTTP
functions do not use this stream: the host forwards them to the worker's HTTP server, as the real host
does for the HTTP-streaming extension.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import struct
from collections.abc import Awaitable, Callable
from typing import Any

_LENGTH = struct.Struct(">I")
READ_LIMIT = 2**26


class WorkerAnsweredError(Exception):
    """The worker refused an invocation it could not run (the invocation's function did not run)."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"worker answered {status}")
        self.status, self.text = status, text


class StreamClosed(ConnectionError):
    """The stream to the worker is gone (the worker died, or is being replaced)."""


def encode(message: dict[str, Any]) -> bytes:
    data = json.dumps(message, separators=(",", ":")).encode()
    return _LENGTH.pack(len(data)) + data


async def read_message(reader: asyncio.StreamReader) -> dict[str, Any] | None:
    """The next message, or None at the end of the stream (a message cut short counts as the end)."""
    try:
        size = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))[0]
        message: dict[str, Any] = json.loads(await reader.readexactly(size))
    except asyncio.IncompleteReadError:
        return None
    return message


async def open_pipes(read_fd: int, write_fd: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """asyncio streams over two pipe ends (taken over: closing the stream closes them)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=READ_LIMIT)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read_fd, "rb", 0))
    transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin,
                                                        os.fdopen(write_fd, "wb", 0))
    return reader, asyncio.StreamWriter(transport, protocol, None, loop)


class HostStream:
    """The host's end for one worker generation: send invocations, match answers to them by id."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer = reader, writer
        self._waiting: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self.closed = False
        self._task = asyncio.create_task(self._read_answers())

    async def call(self, invocation_id: str, kind: str, body: dict[str, Any], headers: dict[str, str]
                   ) -> dict[str, Any]:
        """Send one invocation and wait for its answer (StreamClosed if the worker's end closes first)."""
        if self.closed:
            raise StreamClosed("the worker's event stream is closed")
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[invocation_id] = answer
        try:
            self._writer.write(encode({"id": invocation_id, "kind": kind, "body": body, "headers": headers}))
            await self._writer.drain()
            return await answer
        except (BrokenPipeError, ConnectionResetError) as error:
            raise StreamClosed(f"the worker's event stream broke: {error}") from error
        finally:
            self._waiting.pop(invocation_id, None)

    async def _read_answers(self) -> None:
        try:
            while (message := await read_message(self._reader)) is not None:
                answer = self._waiting.get(str(message.get("id")))
                if answer is None or answer.done():
                    continue  # the host gave up on it (a timeout): the late answer is dropped
                if "status" in message:
                    answer.set_exception(WorkerAnsweredError(int(message["status"]), str(message.get("text"))))
                else:
                    answer.set_result(message["body"])
        except (OSError, ValueError):
            pass
        finally:
            self.close()

    def close(self) -> None:
        """End the stream: every invocation still waiting on it fails with StreamClosed."""
        if self.closed:
            return
        self.closed = True
        for answer in self._waiting.values():
            if not answer.done():
                answer.set_exception(StreamClosed("the worker's event stream ended"))
        with contextlib.suppress(Exception):
            self._writer.close()
        if asyncio.current_task() is not self._task:
            self._task.cancel()


Handler = Callable[[str, dict[str, Any], dict[str, str]], Awaitable[dict[str, Any]]]


async def serve_worker_stream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, handle: Handler) -> None:
    """The worker's end: run each invocation as its own task, answer it on the stream when it is done.
    Returns when the host's end closes (the host is gone)."""
    running: set[asyncio.Task[None]] = set()

    async def run(message: dict[str, Any]) -> None:
        invocation_id = str(message.get("id"))
        try:
            body = await handle(str(message.get("kind")), message.get("body") or {}, message.get("headers") or {})
            answer: dict[str, Any] = {"id": invocation_id, "body": body}
        except Exception as error:  # the handler could not even start the function
            answer = {"id": invocation_id, "status": 500, "text": f"{type(error).__name__}: {error}"}
        with contextlib.suppress(ConnectionError):
            writer.write(encode(answer))
            await writer.drain()

    while (message := await read_message(reader)) is not None:
        task = asyncio.create_task(run(message))
        running.add(task)
        task.add_done_callback(running.discard)
