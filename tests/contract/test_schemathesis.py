"""``docs/openapi.yaml`` against the running app, as an outside client would test it: schemathesis (the same
CLI engine anyone runs) fuzzes every operation in all four phases (examples, coverage, fuzzing, stateful,
following the spec's links from create to get/cancel/delete/input_items/previous_response_id) with every
check except the ones that need auth keys the double does not have (``ignored_auth``,
``missing_required_header``) and 404-vs-405 routing (``unsupported_method``: the Functions host answers
404 for a method no function takes).

Bounded so CI stays quick: ``SCHEMATHESIS_MAX_EXAMPLES`` examples per operation (default 15) and a fixed
seed (``SCHEMATHESIS_SEED``), which also makes a failure reproducible. A failure found here becomes a
plain regression test in ``tests/contract/test_openapi_regressions.py``. ``tests/contract/schemathesis.toml``
lists the operations that may answer 400 to a spec-valid request, as the OpenAI API does, and
``tests/contract/schemathesis_hooks.py`` (a check of its own, loaded with ``SCHEMATHESIS_HOOKS``) allows
only the codes of those rules in such a 400: any other refusal of a valid body is a validator bug.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.contract.conftest import OPENAPI
from tests.hostdouble.api import HostDouble

pytestmark = [pytest.mark.azurite, pytest.mark.slow(seconds=85)]

EXCLUDED_CHECKS = "ignored_auth,missing_required_header,unsupported_method"
SEED = int(os.environ.get("SCHEMATHESIS_SEED", "20261201"))
MAX_EXAMPLES = int(os.environ.get("SCHEMATHESIS_MAX_EXAMPLES", "15"))
PHASES = ("examples", "coverage", "fuzzing", "stateful")
# Which spec-valid requests may be refused with a 400 (the OpenAI API's status for rules docs/openapi.yaml
# states only in words); see the file.
CONFIG = Path(__file__).with_name("schemathesis.toml")
ROOT = Path(__file__).resolve().parents[2]
HOOKS = "tests.contract.schemathesis_hooks"  # the check that narrows those 400s to their codes


def test_the_app_conforms_to_its_openapi_document(contract_base_url: str, contract_started_double: HostDouble | None,
                                                 tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    command = [
        str(Path(sys.executable).with_name("schemathesis")), "--config-file", str(CONFIG), "run", str(OPENAPI),
        "--url", contract_base_url,
        # Every check runs by default; "--checks all" would also override the per-operation settings of
        # schemathesis.toml (CLI options take precedence), which turn one check off for the 501 operations.
        "--exclude-checks", EXCLUDED_CHECKS,
        "--phases", ",".join(PHASES),
        "--max-examples", str(MAX_EXAMPLES), "--seed", str(SEED), "--workers", "2",
        "--request-timeout", "60", "--generation-database", "none", "--no-color",
        "--report", "json", "--report-json-path", str(report),
    ]
    env = {**os.environ, "SCHEMATHESIS_HOOKS": HOOKS,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    run = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=tmp_path, check=False, env=env)
    output = run.stdout[-12000:] + run.stderr[-4000:]
    assert report.exists(), output
    result = json.loads(report.read_text())
    assert result["failures"] == [] and result["errors"] == [], output
    assert run.returncode == 0, output
    assert result["operations"]["tested"] == result["operations"]["selected"] == 18, result["operations"]
    ran = {phase: state["status"] for phase, state in result["phases"].items()}
    assert all(ran.get(phase) == "success" for phase in PHASES), ran  # the stateful phase included
    assert result["test_cases"]["generated"] >= 100, result["test_cases"]
    if contract_started_double is not None:  # a running host has no counters to read
        assert contract_started_double.stats()["worker_restarts"] == 0  # no request killed or hung the worker
