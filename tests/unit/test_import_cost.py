"""Cold start: importing the app (what every new worker does before it can be indexed) must not load the
``openai`` types or the storage SDKs. They are needed only for validation in tests and at the first storage
call, and together take most of a second to import. Checked in a fresh interpreter (not timed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAZY = ("openai", "azure.storage.blob", "azure.data.tables", "azure.identity")

PROBE = f"""
import json, sys
import function_app
print(json.dumps([m for m in {LAZY!r} if m in sys.modules]))
"""


def test_importing_the_app_loads_neither_openai_nor_the_storage_sdks() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=True)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


def test_the_first_storage_open_loads_the_storage_sdks() -> None:
    probe = PROBE.replace("import function_app", "import function_app\nimport resilient.storage.factory")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=True)
    assert set(json.loads(done.stdout.strip().splitlines()[-1])) >= {"azure.storage.blob", "azure.data.tables"}
