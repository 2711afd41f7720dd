"""The double's worker imports as a deployed app does: the tests' own tools stay out of the app's process."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

from tests.hostdouble.deployed import TEST_ONLY_PACKAGES

ROOT = Path(__file__).resolve().parents[2]
PROBE = """
import sys
{hide}
import azure.durable_functions as durable
print("agents" in sys.modules, hasattr(durable, "openai_agents"))
"""


def requirement_names(path: Path) -> set[str]:
    names = set()
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            names.add(re.split(r"[<>=!~;\[ ]", line, maxsplit=1)[0].lower())
    return names


def test_each_hidden_package_is_installed_for_the_tests_only() -> None:
    deployed, dev = requirement_names(ROOT / "requirements.txt"), requirement_names(ROOT / "requirements-dev.txt")
    installs = importlib.metadata.packages_distributions()
    for package, distribution in TEST_ONLY_PACKAGES.items():
        assert distribution in dev and distribution not in deployed, distribution
        assert distribution in [d.lower() for d in installs.get(package, [])], (package, installs.get(package))


def test_the_durable_sdk_loads_its_openai_agents_integration_only_where_the_tests_tools_are_visible() -> None:
    def probe(hide: str) -> str:
        done = subprocess.run([sys.executable, "-c", PROBE.format(hide=hide)], cwd=ROOT, capture_output=True,
                              text=True, timeout=120, check=True)
        return done.stdout.strip()

    assert probe("") == "True True"  # what the tests' environment alone would give the app
    assert probe("from tests.hostdouble.deployed import hide_test_tools; hide_test_tools()") == "False False"
