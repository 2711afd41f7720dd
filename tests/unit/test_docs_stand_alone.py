"""The documentation speaks to a user who has only this repository: every file it names is in the
repository (or is one the user creates), and it names no outside document or internal process."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.md", ROOT / "tests" / "hostdouble" / "README.md", ROOT / "bench" / "README.md",
               *(ROOT / "docs").glob("*.md")])
# Files a user creates or that are created on first run; examples that are not meant to exist.
NOT_IN_GIT = {"local.settings.json", "my_agent.py", ".demo-state.json"}
FILE_TOKEN = re.compile(r"`([\w./-]+\.(?:md|py|sh|json|yaml|yml|bicep|toml|txt))`")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
OUTSIDE = re.compile(r"shared/docs|FIELD_NOTES|DESIGN\.md|\bissue \d|\bthis session\b|\bthe lead\b|\bmilestone",
                     re.IGNORECASE)


def _tracked() -> set[str]:
    listing = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return set(listing.splitlines())


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_named_files_exist(doc: Path) -> None:
    tracked = _tracked()
    missing = []
    text = doc.read_text(encoding="utf-8")
    for name in FILE_TOKEN.findall(text):
        # a path from the root, from the document's folder, or a tail of one (``engine/activities.py``)
        from_doc = (doc.parent / name).resolve()
        candidates = {name, str(from_doc.relative_to(ROOT)) if from_doc.is_relative_to(ROOT) else name}
        if name in NOT_IN_GIT or candidates & tracked or any(path.endswith("/" + name) for path in tracked):
            continue
        missing.append(name)
    for target in LINK.findall(text):
        if "://" in target:
            continue
        if not (doc.parent / target).exists():
            missing.append(target)
    assert missing == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_outside_documents_or_internal_process(doc: Path) -> None:
    hits = [line.strip() for line in doc.read_text(encoding="utf-8").splitlines() if OUTSIDE.search(line)]
    assert hits == []
