"""Cold start: importing the app (what every new worker does before it can be indexed) must not load the
``openai`` types, the storage SDKs, the Durable SDK (with its ``aiohttp`` client) or the app's request models.
They are needed only for validation in tests, at the first storage call, at the first Durable call or
episode and at the first create, and together take more than a second to import. Checked in a fresh
interpreter (not timed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAZY = ("openai", "azure.storage.blob", "azure.data.tables", "azure.identity", "azure.durable_functions",
        "aiohttp", "resilient.protocol.request")

PROBE = f"""
import json, sys
import function_app
print(json.dumps([m for m in {LAZY!r} if m in sys.modules]))
"""


def test_importing_the_app_loads_neither_openai_nor_the_storage_nor_the_durable_sdk() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=True)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


def test_the_first_storage_open_loads_the_storage_sdks() -> None:
    probe = PROBE.replace("import function_app", "import function_app\nimport resilient.storage.factory")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=True)
    assert set(json.loads(done.stdout.strip().splitlines()[-1])) >= {"azure.storage.blob", "azure.data.tables"}


def test_indexing_the_app_does_not_load_the_durable_sdk_but_its_first_episode_does() -> None:
    probe = PROBE.replace("import function_app", """import function_app
functions = {f.get_function_name(): f for f in function_app.app.get_functions()}
print(json.dumps([m for m in ("azure.durable_functions",) if m in sys.modules]))
try:
    functions["responses_orchestrator"].get_user_function()("{}")
except Exception:
    pass  # not a real history: only the import it triggers matters here""")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=True)
    after_indexing, after_episode = (json.loads(line) for line in done.stdout.strip().splitlines()[-2:])
    assert after_indexing == []
    assert "azure.durable_functions" in after_episode
