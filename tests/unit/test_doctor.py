"""Worker acceptance: azure-functions-doctor's deploy profile for Flex Consumption finds no failure.

The doctor checks host.json (durableTask, bundle range), the v2 programming model, pinning,
nondeterminism in orchestrators, local.settings.json not tracked, and more — offline, in under a second.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow(seconds=28)  # about that long in all; see tests/conftest.py

ROOT = Path(__file__).resolve().parents[2]


def _doctor() -> str:
    found = shutil.which("azure-functions-doctor", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.fail("azure-functions-doctor is not installed (requirements-dev.txt)")
    return found


@pytest.mark.parametrize("profile", ["minimal", "deploy"])
def test_doctor_reports_no_failures(profile: str) -> None:
    run = subprocess.run(
        [_doctor(), "doctor", "--path", str(ROOT), "--format", "json", "--profile", profile,
         "--hosting-plan", "flex-consumption"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    report = json.loads(run.stdout)
    items = [item for section in report["results"] for item in section.get("items", [])]
    assert items, "the doctor ran no checks"
    failed = [(i["rule_id"], i.get("value")) for i in items if i["status"] == "fail"]
    assert failed == []
    passed = {i["rule_id"] for i in items if i["status"] == "pass"}
    assert {"check_host_json", "check_durable_nondeterminism", "check_requirements_txt"} <= passed
