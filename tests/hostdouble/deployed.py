"""What a deployed app's worker can import: the packages of ``requirements.txt``, not the tests' tools.

The tests run the app's worker from the repository's one virtual environment, which also holds what
``requirements-dev.txt`` adds for the tests themselves. One of those changes the app's behaviour and cost:
``azure-functions-durable`` imports its OpenAI Agents integration whenever the ``agents`` package
(``openai-agents``, installed here only to drive the service from ``tests/clients``) can be imported
(``azure/durable_functions/__init__.py``: ``try: from . import openai_agents`` ... ``except ImportError``),
which takes about 1.4 s of CPU at the worker's first Durable call. A deployed app has no such package, so
the double's worker hides it: the import fails as it would there.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType

# top-level package -> the test-only distribution (requirements-dev.txt) that installs it
TEST_ONLY_PACKAGES = {"agents": "openai-agents"}


class TestToolsHidden(importlib.abc.MetaPathFinder):
    """Refuses the test-only packages, as an environment without them does (``ModuleNotFoundError``)."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        top = fullname.partition(".")[0]
        if top in TEST_ONLY_PACKAGES:
            raise ModuleNotFoundError(f"No module named {fullname!r} ({TEST_ONLY_PACKAGES[top]} is installed "
                                      "for the tests only; the app is not deployed with it)", name=fullname)
        return None


def hide_test_tools() -> None:
    """From now on this process imports as a deployed app's worker would (call before importing the app)."""
    if not any(isinstance(finder, TestToolsHidden) for finder in sys.meta_path):
        sys.meta_path.insert(0, TestToolsHidden())
