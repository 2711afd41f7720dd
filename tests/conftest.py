"""Run order for the whole suite: every parallel worker starts with its share of the slow modules.

``.ci/run`` runs the suite on several pytest-xdist workers (``--dist worksteal``). That scheduler cuts the
collection into one contiguous run of tests per worker (equal counts), and a worker that runs out takes the
back half of the busiest worker's remaining tests. Most of the slow modules' time is spent waiting (for a
killed worker's restart, a lease or a visibility timeout to expire), so each worker's run starts with about
a quarter of that waiting, which then overlaps the many short, CPU-bound tests of the other workers. Put all
slow modules at the front instead and they land on one worker and run one after another at the end.

A slow module says how long it takes with ``pytest.mark.slow(seconds=…)`` (module-wide in ``pytestmark``,
or on one test). Modules stay contiguous, so each module's fixtures are still built once per worker that
runs it. Without ``-n`` (one process) the order only puts the slow modules first.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import pytest

SLOW_DEFAULT_SECONDS = 10.0  # a slow mark without seconds


def _slow_seconds(marks: Iterable[pytest.Mark]) -> float:
    total = 0.0
    for mark in marks:
        if mark.name == "slow":
            total += float(mark.kwargs.get("seconds", SLOW_DEFAULT_SECONDS))
    return total


def _module_marks(item: pytest.Item) -> list[pytest.Mark]:
    module = getattr(item, "module", None)
    marks = getattr(module, "pytestmark", [])
    return [getattr(m, "mark", m) for m in (marks if isinstance(marks, list) else [marks])]


def _slow_groups(items: list[pytest.Item]) -> list[tuple[float, list[pytest.Item]]]:
    """The items of each module with a slow mark, with the seconds its marks say it takes."""
    groups: dict[str, list[pytest.Item]] = {}
    for item in items:
        groups.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    weighed = []
    for members in groups.values():
        seconds = _slow_seconds(_module_marks(members[0]))
        seconds += sum(_slow_seconds(item.own_markers) for item in members)
        if seconds > 0:
            weighed.append((seconds, members))
    return weighed


def _chunk_sizes(count: int, workers: int) -> list[int]:
    """The counts worksteal's first distribution sends each worker (``len(pending) // nodes_remaining``)."""
    sizes, left = [], count
    for remaining in range(workers, 0, -1):
        sizes.append(left // remaining)
        left -= sizes[-1]
    return sizes


def balanced_order(items: list[pytest.Item], workers: int) -> list[pytest.Item]:
    """Items re-ordered so that each of the ``workers`` contiguous chunks begins with a fair share of the
    slow modules (longest first, each to the chunk with the least slow time that has room), the rest of each
    chunk filled with the fast tests in collection order."""
    sizes = _chunk_sizes(len(items), workers)
    chunks: list[list[pytest.Item]] = [[] for _ in sizes]
    load = [0.0] * workers
    slow = sorted(_slow_groups(items), key=lambda g: -g[0])
    for seconds, members in slow:
        fits = [i for i in range(workers) if len(chunks[i]) + len(members) <= sizes[i]]
        target = min(fits or range(workers), key=lambda i: load[i])
        chunks[target] += members
        load[target] += seconds
    placed = {id(item) for chunk in chunks for item in chunk}
    fast = iter(item for item in items if id(item) not in placed)
    for i, size in enumerate(sizes):
        while len(chunks[i]) < size and (item := next(fast, None)) is not None:
            chunks[i].append(item)
    chunks[-1] += list(fast)
    return [item for chunk in chunks for item in chunk]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if workers > 1:
        items[:] = balanced_order(items, workers)
    else:
        items.sort(key=lambda item: 0 if item.get_closest_marker("slow") is not None else 1)
