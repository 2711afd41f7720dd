"""Run an async generator in a task of its own, handing its outputs over through a queue.

Why: the engine asks for an agent's next output in a fresh task each time, so each ``anext`` runs in its
own copy of the context. Agent Framework sets context variables (telemetry, middleware state) in one
``anext`` and resets them in a later one, which fails across contexts. In a task of its own the framework
sees one context from start to end; closing the returned generator cancels that task.

:func:`emitting` is the same for a producer that hands its outputs over from several places (an agent's
stream and its middleware): it gets an ``emit`` function instead of being an async iterator.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

_END = object()
QUEUE_SIZE = 64  # outputs the task may run ahead of the engine (a slow log append holds the agent back)


class _Raised:
    def __init__(self, error: BaseException) -> None:
        self.error = error


def in_own_task[T](source: AsyncIterator[T]) -> AsyncIterator[T]:
    async def produce(emit: Callable[[T], Awaitable[None]]) -> None:
        async for output in source:
            await emit(output)

    return emitting(produce)


async def emitting[T](produce: Callable[[Callable[[T], Awaitable[None]]], Awaitable[None]]) -> AsyncIterator[T]:
    """Run ``produce(emit)`` in a task of its own and yield what it emits, in order."""
    queue: asyncio.Queue[object] = asyncio.Queue(QUEUE_SIZE)

    async def drive() -> None:
        try:
            await produce(queue.put)
        except Exception as error:
            await queue.put(_Raised(error))
            return
        await queue.put(_END)

    task = asyncio.create_task(drive())
    try:
        while True:
            item = await queue.get()
            if item is _END:
                return
            if isinstance(item, _Raised):
                raise item.error
            yield item  # type: ignore[misc]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
