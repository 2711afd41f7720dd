"""What azd packages: the app's bytecode ships with it, so a read-only package needs no compiling at start-up.

A Flex Consumption app runs from its package, mounted read-only: Python cannot write ``__pycache__`` there,
so without bytecode in the package every new instance compiles the app's sources before it can be indexed.
azure.yaml's ``prepackage`` hook runs ``scripts/compile_bytecode.py``; ``.funcignore`` must keep the
result in the package (azd applies a ``.funcignore`` when one exists, and excludes ``__pycache__`` by
default only when there is none).
"""

from __future__ import annotations

import compileall
import importlib.util
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pathspec
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("compile_bytecode", ROOT / "scripts" / "compile_bytecode.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _copy_app(into: Path, runtime_version: str = "3.13") -> None:
    """The files the package ships that matter here, and the Bicep line the script reads the version from."""
    shutil.copy2(ROOT / "function_app.py", into / "function_app.py")
    shutil.copytree(ROOT / "resilient", into / "resilient", ignore=shutil.ignore_patterns("__pycache__"))
    (into / "infra" / "app").mkdir(parents=True)
    (into / "infra" / "app" / "api.bicep").write_text(f"param runtimeVersion string = '{runtime_version}'\n")


def _sources(root: Path) -> list[Path]:
    return [root / "function_app.py", *sorted((root / "resilient").rglob("*.py"))]


def test_azure_yaml_compiles_the_app_before_packaging_on_every_shell() -> None:
    hooks = yaml.safe_load((ROOT / "azure.yaml").read_text())["services"]["api"]["hooks"]
    for shell in ("posix", "windows"):
        assert "scripts/compile_bytecode.py" in hooks["prepackage"][shell]["run"], shell
    assert hooks["prepackage"]["posix"]["shell"] == "sh"
    assert hooks["prepackage"]["windows"]["shell"] == "pwsh"


def test_funcignore_keeps_the_bytecode_and_still_drops_development_files() -> None:
    ignore = pathspec.GitIgnoreSpec.from_lines((ROOT / ".funcignore").read_text().splitlines())
    tag = sys.implementation.cache_tag
    shipped = ["function_app.py", f"__pycache__/function_app.{tag}.pyc", "resilient/engine/engine.py",
               f"resilient/engine/__pycache__/engine.{tag}.pyc", "host.json", "requirements.txt"]
    dropped = ["tests/unit/test_ids.py", "local.settings.json", ".venv/bin/python", "bench/compare.py",
               "scripts/compile_bytecode.py", "node_modules/azurite/package.json", "infra/main.bicep",
               ".github/workflows/ci.yml", ".devcontainer/devcontainer.json", ".vscode/launch.json", ".ci/live"]
    assert [path for path in shipped if ignore.match_file(path)] == []
    assert [path for path in dropped if not ignore.match_file(path)] == []


def test_the_script_reads_the_deployed_python_version_from_infra() -> None:
    assert _script().deployed_python_version(ROOT) == (3, 13)


@pytest.mark.parametrize("left_by_a_local_run", [False, True])
def test_every_app_module_gets_hash_checked_bytecode(tmp_path: Path, left_by_a_local_run: bool) -> None:
    _copy_app(tmp_path)
    if left_by_a_local_run:  # what importing the app locally leaves: timestamp bytecode, "up to date"
        compileall.compile_dir(tmp_path, quiet=1)
    assert _script().main(tmp_path) == 0
    tag = sys.implementation.cache_tag
    missing, unchecked = [], []
    for source in _sources(tmp_path):
        compiled = source.parent / "__pycache__" / f"{source.stem}.{tag}.pyc"
        if not compiled.is_file():
            missing.append(source)
            continue
        flags = int.from_bytes(compiled.read_bytes()[4:8], "little")
        if flags != 0b11:  # hash-based (bit 0) and checked against the source (bit 1): PEP 552
            unchecked.append(source)
    assert missing == [] and unchecked == []


def test_a_read_only_copy_imports_the_app_without_compiling_it(tmp_path: Path) -> None:
    """The deployed situation: sources and shipped bytecode, nothing writable, no bytecode cache allowed."""
    _copy_app(tmp_path)
    assert _script().main(tmp_path) == 0
    for path in [tmp_path, *tmp_path.rglob("*")]:
        path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    try:
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": ""}
        verbose = subprocess.run([sys.executable, "-v", "-c", "import function_app"], cwd=tmp_path, env=env,
                                 capture_output=True, text=True, timeout=120, check=True).stderr
    finally:
        for path in [tmp_path, *tmp_path.rglob("*")]:
            path.chmod(path.stat().st_mode | stat.S_IWUSR)
    app_lines = [line for line in verbose.splitlines() if str(tmp_path) in line]
    compiled_from_source = [line for line in app_lines if line.startswith("# code object from") and
                            line.rstrip("'").endswith(".py")]
    loaded_from_bytecode = [line for line in app_lines if line.startswith("# code object from") and
                            ".pyc" in line]
    assert compiled_from_source == []
    assert len(loaded_from_bytecode) >= len(_sources(tmp_path)) // 2  # the import really went through the app


def test_a_changed_source_is_not_run_from_stale_bytecode(tmp_path: Path) -> None:
    """checked-hash: bytecode that no longer matches its source is ignored, even with the same size and time.

    (A timestamp check compares only those two, which zipping, uploading and mounting do not preserve.)"""
    _copy_app(tmp_path)
    marker = tmp_path / "resilient" / "_marker.py"
    marker.write_text("VALUE = 'shipped'\n")
    assert _script().main(tmp_path) == 0
    before = marker.stat()
    marker.write_text("VALUE = 'changed'\n")
    os.utime(marker, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert marker.stat().st_size == before.st_size
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": ""}
    answer = subprocess.run([sys.executable, "-c", "import resilient._marker as m; print(m.VALUE)"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert answer.stdout.strip() == "changed", answer.stderr


def test_a_different_local_python_warns_and_still_succeeds(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    _copy_app(tmp_path, runtime_version="3.99")
    assert _script().main(tmp_path) == 0
    assert "deploys on 3.99" in capsys.readouterr().err
