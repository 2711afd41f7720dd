"""``scripts/node_deps_current.mjs``: scripts/setup.sh runs ``npm ci`` again exactly when node_modules no
longer matches package-lock.json (a pull that added or changed a JavaScript dependency), and not otherwise."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "scripts" / "node_deps_current.mjs"
LOCKED = {
    "": {"name": "app", "devDependencies": {"ai": "6.0.333"}},
    "node_modules/ai": {"version": "6.0.333"},
    "node_modules/zod": {"version": "4.6.7"},
    "node_modules/fsevents": {"version": "2.3.3", "optional": True},
}


def check(tmp_path: Path, installed: dict[str, Any] | None, locked: dict[str, Any] = LOCKED) -> int:
    node = shutil.which("node")
    assert node is not None, "Node.js is required (scripts/setup.sh needs it for Azurite)"
    (tmp_path / "package-lock.json").write_text(json.dumps({"lockfileVersion": 3, "packages": locked}))
    if installed is not None:
        (tmp_path / "node_modules").mkdir(exist_ok=True)
        hidden = {"lockfileVersion": 3, "packages": installed}
        (tmp_path / "node_modules" / ".package-lock.json").write_text(json.dumps(hidden))
    return subprocess.run([node, str(CHECK)], cwd=tmp_path, capture_output=True, timeout=30).returncode


def test_an_install_of_exactly_the_lock_is_current(tmp_path: Path) -> None:
    installed = {path: entry for path, entry in LOCKED.items() if path and path != "node_modules/fsevents"}
    assert check(tmp_path, installed) == 0  # an optional package this platform skipped does not count
    assert check(tmp_path, {**installed, "node_modules/extra": {"version": "1.0.0"}}) == 0


STALE: dict[str, dict[str, Any] | None] = {
    "a locked package missing": {"node_modules/ai": {"version": "6.0.333"}},
    "a locked package at another version": {"node_modules/ai": {"version": "5.0.1"},
                                            "node_modules/zod": {"version": "4.6.7"}},
    "no node_modules": None,
}


@pytest.mark.parametrize("change", list(STALE))
def test_a_changed_lock_or_a_stale_install_is_not_current(tmp_path: Path, change: str) -> None:
    assert check(tmp_path, STALE[change]) == 1


def test_node_modules_without_npms_record_is_not_current(tmp_path: Path) -> None:
    (tmp_path / "node_modules").mkdir()
    assert check(tmp_path, None) == 1


def test_the_repositorys_own_install_is_current() -> None:
    """What setup.sh has installed here matches this checkout's package-lock.json."""
    node = shutil.which("node")
    assert node is not None
    assert subprocess.run([node, str(CHECK)], cwd=ROOT, capture_output=True, timeout=30).returncode == 0
