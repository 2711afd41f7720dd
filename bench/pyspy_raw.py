"""Reading py-spy's raw output (``py-spy record --format raw``): one line per distinct stack,
``frame;frame;…;leaf count``. Shared by ``profile_worker.py`` and ``profile_diff.py``, which differ only in
which leaves they count as a thread waiting rather than working."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path


def busy_stacks(path: Path, idle_leaf: re.Pattern[str]) -> Iterator[tuple[list[str], int]]:
    """Each stack of the profile whose innermost frame is not idle, outermost frame first, with its count."""
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        if not idle_leaf.search(frames[-1]):
            yield frames, int(count)
