"""The suite's run order for parallel workers (tests/conftest.py): worksteal gives each worker one contiguous,
equal-count run of the collection, so each such run must begin with a fair share of the slow modules."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, cast

import pytest

from tests.conftest import _chunk_sizes, balanced_order


@dataclass
class FakeItem:
    """What the ordering reads of a ``pytest.Item``: its node id, its own marks and its module's marks."""

    nodeid: str
    module: Any
    own_markers: list[pytest.Mark] = field(default_factory=list)

    def get_closest_marker(self, name: str) -> pytest.Mark | None:
        marks = [*self.own_markers, *getattr(self.module, "pytestmark", [])]
        return next((m for m in marks if m.name == name), None)


def module(path: str, tests: int, seconds: float | None = None) -> list[FakeItem]:
    marks = [] if seconds is None else [pytest.mark.slow(seconds=seconds).mark]
    namespace = SimpleNamespace(pytestmark=marks)
    return [FakeItem(f"{path}::test_{i}", namespace) for i in range(tests)]


def test_chunk_sizes_are_worksteals_first_distribution() -> None:
    assert _chunk_sizes(1779, 4) == [444, 445, 445, 445]
    assert _chunk_sizes(10, 3) == [3, 3, 4]


def test_each_workers_chunk_starts_with_its_share_of_the_slow_modules() -> None:
    slow = [module(f"tests/slow_{n}.py", 3, seconds) for n, seconds in enumerate([90, 80, 60, 40, 30, 20, 10, 5])]
    fast = [module(f"tests/test_fast_{n}.py", 40) for n in range(20)]
    items = [item for group in [*fast[:10], *slow, *fast[10:]] for item in group]

    ordered = cast(list[Any], balanced_order(cast(list[pytest.Item], items), 4))

    assert sorted(i.nodeid for i in ordered) == sorted(i.nodeid for i in items)  # a permutation
    loads, start = [], 0
    for size in _chunk_sizes(len(items), 4):
        chunk = ordered[start:start + size]
        start += size
        seconds = [float(i.module.pytestmark[0].kwargs["seconds"]) for i in chunk if i.module.pytestmark]
        slow_at = [n for n, i in enumerate(chunk) if i.module.pytestmark]
        assert slow_at == list(range(len(slow_at))), "a chunk's slow tests come first"
        loads.append(sum(seconds) / 3)  # three tests per slow module, each carrying its module's seconds
    assert sorted(loads) == [80.0, 80.0, 85.0, 90.0]  # longest first, each to the least loaded chunk
    modules = [i.nodeid.split("::")[0] for i in ordered]
    runs = [m for n, m in enumerate(modules) if n == 0 or modules[n - 1] != m]
    assert len(runs) <= len(slow) + len(fast) + 3, "modules stay contiguous (a chunk boundary may split one)"
