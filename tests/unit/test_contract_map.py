"""The contract's rules each map to tests that exist (docs/CONTRACT_TESTS.md)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "docs" / "CONTRACT_TESTS.md"
RULES = [f"R{i}" for i in range(1, 9)] + [f"S{i}" for i in range(1, 6)] + [f"E{i}" for i in range(1, 14)] + ["P1"]


def _rows() -> dict[str, list[str]]:
    rows: dict[str, list[str]] = {}
    for line in TABLE.read_text(encoding="utf-8").splitlines():
        match = re.match(r"\|\s*([RSEP]\d+)\s*\|[^|]*\|(.*)\|\s*$", line)
        if match:
            rows[match.group(1)] = re.findall(r"`([^`]+::[^`]+)`", match.group(2))
    return rows


def _test_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.name for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_")}


def test_every_rule_has_at_least_one_test() -> None:
    rows = _rows()
    assert [rule for rule in RULES if not rows.get(rule)] == []
    assert set(rows) == set(RULES), "unknown rule ids in the table"


def test_every_listed_test_exists() -> None:
    missing = []
    for rule, tests in _rows().items():
        for node_id in tests:
            file, name = node_id.split("::", 1)
            path = ROOT / file
            if not path.is_file() or name not in _test_names(path):
                missing.append(f"{rule}: {node_id}")
    assert missing == []
