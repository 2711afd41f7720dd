"""Loading the app does not load Agent Framework: the Functions host indexes ``function_app.py`` before any
agent runs, and an app that hosts no Agent Framework agent never needs it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.scenario.conftest import ROOT

PROBE = ("import sys, function_app; "
         "print(sorted(m for m in sys.modules if m == 'agent_framework' or m.startswith('agent_framework.')))")


@pytest.mark.parametrize("agent", ["", "tests.frameworkagents.app_workflow:build"])
def test_importing_the_app_does_not_import_agent_framework(agent: str) -> None:
    env = {**os.environ, "RESILIENT_AGENT": agent, "PYTHONPATH": str(ROOT)}
    probe = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=60)
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == "[]"
