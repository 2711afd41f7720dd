"""The contract's rules (docs/CONTRACT.md) each map to tests that exist (docs/CONTRACT_TESTS.md)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "docs" / "CONTRACT_TESTS.md"
CONTRACT = ROOT / "docs" / "CONTRACT.md"
# A rule is a list item that starts with its bold id, e.g. "- **R1** Persist before send: ...".
RULE_MARK = re.compile(r"^\s*-\s+\*\*([A-Z]+\d+)\*\*", re.MULTILINE)


def _contract_rules() -> list[str]:
    return RULE_MARK.findall(CONTRACT.read_text(encoding="utf-8"))


def _rows() -> dict[str, list[str]]:
    rows: dict[str, list[str]] = {}
    for line in TABLE.read_text(encoding="utf-8").splitlines():
        match = re.match(r"\|\s*([A-Z]+\d+)\s*\|[^|]*\|(.*)\|\s*$", line)
        if match:
            rows[match.group(1)] = re.findall(r"`([^`]+::[^`]+)`", match.group(2))
    return rows


def _test_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.name for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_")}


def test_the_contract_names_each_rule_once() -> None:
    rules = _contract_rules()
    assert {"R1", "R8", "S1", "S5", "E1", "E9"} <= set(rules)  # the rule marks are still recognised
    assert sorted(rules) == sorted(set(rules)), "a rule id is used twice in docs/CONTRACT.md"


def test_every_rule_has_at_least_one_test() -> None:
    rows = _rows()
    rules = _contract_rules()
    assert [rule for rule in rules if not rows.get(rule)] == []
    assert sorted(set(rows) - set(rules)) == [], "rule ids in the table that docs/CONTRACT.md does not have"


def test_every_listed_test_exists() -> None:
    missing = []
    for rule, tests in _rows().items():
        for node_id in tests:
            file, name = node_id.split("::", 1)
            path = ROOT / file
            if not path.is_file() or name not in _test_names(path):
                missing.append(f"{rule}: {node_id}")
    assert missing == []
