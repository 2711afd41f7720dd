"""Run order for the whole suite: the slow modules first.

``.ci/run`` runs the suite on several pytest-xdist workers, which take tests from the front of the
collection as they free up. Most of the suite's time is spent waiting (for a killed worker's restart, a
lease or a visibility timeout to expire), so the longest waits start first and overlap the many short tests,
instead of one of them starting last and running alone. Modules stay contiguous (a stable sort on a
module-level mark), so each module's fixtures are still built once per worker that runs it. On a single
process (no ``-n``) the order changes nothing but the wall time's shape.
"""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: 0 if item.get_closest_marker("slow") is not None else 1)
