"""The table of ``bench/bisect_points.sh``: each measured commit as a ratio to the base run beside it.

``bisect_points.sh`` runs ``compare.py --only ours`` from a point's checkout and from the base's, in
alternating order, and keeps each run's ``--json``. On a shared machine a millisecond figure moves with
the load by as much as most commits do, so each point's run is divided by the base run of the same
round (seconds apart), and the table shows the median of those ratios over the rounds, beside the
point's own median figures. Points are listed in first-parent order from the base when ``--order`` is
given a revision range (default ``e54b976..HEAD``), otherwise by name.

    .venv/bin/python bench/bisect_table.py /tmp/bisect-out [--order e54b976..main] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
from collections import defaultdict
from pathlib import Path
from typing import Any

# (column, compare.py metric) — the figures issue 45 asks after; CPU ones are steadier than wall time.
WORKER = "worker CPU per event (ms; ref: whole server)"
HOST = "host-double host CPU per event (ms)"
RECONNECT_CPU = "server CPU per reconnect (ms, mean)"
METRICS = (
    ("whole run p50", "whole run p50 (ms)"),
    ("reconnect 1st p50", "reconnect first event p50 (ms)"),
    ("worker CPU/event", WORKER),
    ("host CPU/event", HOST),
    ("CPU/reconnect", RECONNECT_CPU),
    ("storage/reconnect", "storage calls per reconnect (mean)"),
    ("storage/delta", "storage calls per delta (mean)"),
)


def figures(data: dict[str, Any], side: str) -> dict[str, float]:
    """One side's figures from a ``compare.py --json`` file, CPU recomputed from its runs.

    Recomputed because in a ``bisect_pair.py`` file the base is compare.py's "reference" side, whose
    "worker CPU" metric is its whole process (right for the reference SDK, not for a host double).
    """
    m = dict(data["metrics"][side])
    runs = [r for r in data["runs"][side] if r["ok"] and not math.isnan(float(r["cpu_s"]))]
    events = sum(r["events"] for r in runs)
    if events:
        m[WORKER] = sum(float(r["cpu_children_s"]) for r in runs) / events * 1000
        m[HOST] = sum(float(r["cpu_root_s"]) for r in runs) / events * 1000
    reconnects = [float(r["reconnect_cpu_s"]) for r in runs if not math.isnan(float(r["reconnect_cpu_s"]))]
    if reconnects:  # 10 ms CPU ticks: only the mean over many reconnects means anything
        m[RECONNECT_CPU] = statistics.fmean(reconnects) * 1000
    return m


def load(out_dir: Path) -> dict[str, dict[str, dict[int, dict[str, dict[str, float]]]]]:
    """``{mode: {sha: {round: {"point"|"base": figures}}}}`` from one output folder.

    ``<sha>.<round>.point.json`` / ``.base.json`` (alternating calls) are mode "alternating";
    ``<sha>.<round>.pair.json`` (``bisect_pair.py``: both sides in one file) is mode "paired".
    """
    found: dict[str, dict[str, dict[int, dict[str, dict[str, float]]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(dict)))
    for path in sorted(out_dir.glob("*.json")):
        sha, round_, side = path.stem.split(".")
        data: dict[str, Any] = json.loads(path.read_text())
        if side == "pair":
            found["paired"][sha][int(round_)] = {"point": figures(data, "ours"), "base": figures(data, "reference")}
        else:
            found["alternating"][sha][int(round_)][side] = figures(data, "ours")
    return found


def first_parent_order(revisions: str) -> list[str]:
    """Short SHAs of a range's first-parent history, oldest first (the order a step reads in)."""
    out = subprocess.run(
        ["git", "log", "--first-parent", "--reverse", "--format=%h", "--abbrev=7", revisions],
        check=True, capture_output=True, text=True,
    ).stdout
    return out.split()


def _median(values: list[float]) -> float:
    clean = [v for v in values if not math.isnan(v)]
    return statistics.median(clean) if clean else math.nan


def row(rounds: dict[int, dict[str, dict[str, float]]]) -> dict[str, tuple[float, float, float]]:
    """Per metric: the point's median, the base's median, the median of point/base per round."""
    cells: dict[str, tuple[float, float, float]] = {}
    pairs = [r for r in rounds.values() if "point" in r and "base" in r]
    for column, key in METRICS:
        points = [r["point"].get(key, math.nan) for r in pairs]
        bases = [r["base"].get(key, math.nan) for r in pairs]
        ratios = [p / b for p, b in zip(points, bases, strict=True) if b and not math.isnan(p / b)]
        cells[column] = (_median(points), _median(bases), _median(ratios))
    return cells


def _fmt(value: float) -> str:
    if math.isnan(value):
        return "n/a"
    return f"{value:.3f}" if value < 1 else f"{value:.1f}"


def render(found: dict[str, dict[int, dict[str, dict[str, float]]]], order: list[str], markdown: bool) -> str:
    rank = {sha: i for i, sha in enumerate(order)}
    shas = sorted(found, key=lambda s: (rank.get(s, len(rank)), s))
    rows = {sha: row(found[sha]) for sha in shas}
    # a column no point has (storage counts without --count-storage) is left out
    columns = [c for c, _ in METRICS if any(not math.isnan(cells[c][0]) for cells in rows.values())]
    header = ["#", "commit", "rounds", *[f"{c} (×base)" for c in columns]]
    lines = []
    for sha, cells in rows.items():
        if all(math.isnan(cells[c][0]) for c in columns):
            continue
        n = sum(1 for r in found[sha].values() if "point" in r and "base" in r)
        shown = [f"{_fmt(p)} ({r:.2f}×)" if not math.isnan(r) else _fmt(p)
                 for p, _, r in (cells[c] for c in columns)]
        lines.append([str(rank[sha] + 1) if sha in rank else "?", sha, str(n), *shown])
    if markdown:
        out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        out += ["| " + " | ".join(cells) + " |" for cells in lines]
        return "\n".join(out)
    widths = [max(len(x[i]) for x in [header, *lines]) for i in range(len(header))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(x, widths, strict=True)) for x in [header, *lines])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out_dirs", nargs="+", type=Path, help="bisect_points.sh output folders")
    p.add_argument("--order", default="e54b976..HEAD", help="revision range giving the first-parent order")
    p.add_argument("--markdown", action="store_true")
    args = p.parse_args()
    order = first_parent_order(args.order)
    merged: dict[str, dict[str, dict[int, dict[str, dict[str, float]]]]] = defaultdict(lambda: defaultdict(dict))
    for out_dir in args.out_dirs:  # later folders add rounds (numbered after the earlier ones)
        for mode, shas in load(out_dir).items():
            for sha, rounds in shas.items():
                for r in rounds.values():
                    merged[mode][sha][len(merged[mode][sha]) + 1] = r
    for mode in sorted(merged):
        print(f"{mode}:")
        print(render(merged[mode], order, args.markdown))
        print()


if __name__ == "__main__":
    main()
