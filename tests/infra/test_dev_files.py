"""The CI workflow, the dev container and the VS Code files: they parse, and what they run exists.

None of them can run here (no GitHub runner, no container engine, no VS Code); these checks catch the
mistakes that would only show up there: a renamed script, a job that no longer runs a Python version, a
debugger attaching to a port the worker does not listen on.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "ci.yml"


def _workflow() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(WORKFLOW.read_text())
    return doc


def _runs(job: dict[str, Any]) -> list[str]:
    return [step["run"] for step in job["steps"] if "run" in step]


def _repo_paths(command: str) -> list[str]:
    """Repository files a shell command refers to: `bash X`, `--file X`."""
    words = shlex.split(command.replace("\\\n", " "), comments=True)
    return [words[i + 1] for i, w in enumerate(words[:-1]) if w in ("bash", "--file")]


def test_workflow_triggers_and_permissions() -> None:
    doc = _workflow()
    triggers = doc.get("on", doc.get(True))  # YAML 1.1 reads a bare `on` as true
    assert {"push", "pull_request"} <= set(triggers)
    assert doc["permissions"] == {"contents": "read"}


def test_every_script_a_job_runs_exists_and_is_executable_by_bash() -> None:
    referenced = [path for job in _workflow()["jobs"].values() for run in _runs(job) for path in _repo_paths(run)]
    assert {".ci/run", ".ci/live", "infra/main.bicep"} <= set(referenced)
    for path in referenced:
        assert (ROOT / path).is_file(), path
    for script in (".ci/run", ".ci/live"):
        assert os.access(ROOT / script, os.X_OK), f"{script} is not executable"


def test_tests_run_through_the_repos_own_command_on_312_and_313() -> None:
    job = _workflow()["jobs"]["test"]
    assert job["strategy"]["matrix"]["python"] == ["3.12", "3.13"]
    assert "bash .ci/run" in _runs(job)
    python = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/setup-python"))
    assert python["with"]["python-version"] == "${{ matrix.python }}"
    assert any(s.get("uses", "").startswith("actions/setup-node") for s in job["steps"])  # Azurite is npm


def test_func_start_job_installs_core_tools_and_runs_the_suites_against_it() -> None:
    job = _workflow()["jobs"]["func-start"]
    runs = "\n".join(_runs(job))
    assert re.search(r"npm install --global azure-functions-core-tools@4\b", runs)
    assert "bash .ci/live" in runs
    live = (ROOT / ".ci" / "live").read_text()
    assert "RESILIENT_BASE_URL=" in live and "tests/scenario tests/contract" in live
    assert "bash scripts/run.sh" in live  # func start when func is installed


def test_bicep_job_builds_and_lints_main() -> None:
    runs = _runs(_workflow()["jobs"]["bicep"])
    assert any(r.startswith("az bicep build --file infra/main.bicep") for r in runs)
    assert "az bicep lint --file infra/main.bicep" in runs


def test_devcontainer() -> None:
    doc = json.loads((ROOT / ".devcontainer" / "devcontainer.json").read_text())
    assert re.search(r"python:\d*-?3\.13-", doc["image"])
    features = doc["features"]
    assert any("/features/node:" in f for f in features)
    cli = next(v for f, v in features.items() if "/features/azure-cli:" in f)
    assert cli["installBicep"] is True
    assert any("azure-dev/azd" in f for f in features)
    assert any("azure-functions-core-tools" in f for f in features)
    assert doc["postCreateCommand"] == "bash scripts/setup.sh"
    assert (ROOT / "scripts" / "setup.sh").is_file()


def test_vscode_tasks_and_debugger_attach_agree() -> None:
    tasks = json.loads((ROOT / ".vscode" / "tasks.json").read_text())["tasks"]
    by_label = {t["label"]: t for t in tasks}
    for task in tasks:
        for path in _repo_paths(task["command"]):
            assert (ROOT / path).is_file(), f"{task['label']}: {path}"
        if "dependsOn" in task:
            assert task["dependsOn"] in by_label, task["label"]
    commands = {t["command"] for t in tasks}
    assert {"bash scripts/setup.sh", "bash scripts/run.sh", "bash .ci/run"} <= commands

    launch = json.loads((ROOT / ".vscode" / "launch.json").read_text())["configurations"]
    attach = next(c for c in launch if c["type"] == "debugpy" and c["request"] == "attach")
    debug_task = by_label[attach["preLaunchTask"]]
    assert debug_task["isBackground"] is True and debug_task["problemMatcher"]["background"]["endsPattern"]
    arguments = debug_task["options"]["env"]["languageWorkers__python__arguments"]
    listen = re.fullmatch(r"-m debugpy --listen ([\d.]+):(\d+)", arguments)
    assert listen is not None and int(listen[2]) == attach["connect"]["port"] == 9091
    assert debug_task["command"] == "bash scripts/run.sh"  # run.sh passes its environment on to func start
