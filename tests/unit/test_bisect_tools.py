"""The bisect table's arithmetic (``bench/bisect_table.py``) and the profile diff's counting
(``bench/profile_diff.py``), on small files written here: these figures end up in docs/PERFORMANCE.md."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


table = _load("bisect_table")
profile_diff = _load("profile_diff")


def _run(total_s: float, reconnect_s: float, worker_s: float, host_s: float, events: int = 100) -> dict[str, Any]:
    return {"ok": True, "total_s": total_s, "reconnect_first_s": reconnect_s, "events": events,
            "cpu_s": worker_s + host_s, "cpu_children_s": worker_s, "cpu_root_s": host_s,
            "reconnect_cpu_s": 0.01}


def _compare_json(whole_ms: float, reconnect_ms: float, runs: list[dict[str, Any]],
                  wrong_worker: float = 99.0) -> dict[str, Any]:
    metrics = {"whole run p50 (ms)": whole_ms, "reconnect first event p50 (ms)": reconnect_ms,
               # compare.py's "worker" figure for its reference side is the whole process: must be ignored
               table.WORKER: wrong_worker, table.HOST: math.nan}
    return {"metrics": {"ours": metrics, "reference": metrics}, "runs": {"ours": runs, "reference": runs}}


def test_paired_file_gives_the_median_of_per_round_ratios_and_cpu_from_the_runs(tmp_path: Path) -> None:
    for round_, (point_ms, base_ms) in enumerate([(120.0, 100.0), (300.0, 200.0), (110.0, 100.0)], start=1):
        data = _compare_json(point_ms, 10.0, [_run(0.1, 0.01, 0.02, 0.01)])
        data["metrics"]["reference"] = dict(data["metrics"]["reference"], **{"whole run p50 (ms)": base_ms})
        data["runs"]["reference"] = [_run(0.1, 0.01, 0.01, 0.01)]
        (tmp_path / f"abc1234.{round_}.pair.json").write_text(json.dumps(data))
    found = table.load(tmp_path)
    cells = table.row(found["paired"]["abc1234"])
    point, base, ratio = cells["whole run p50"]
    assert (point, base) == (120.0, 100.0)
    assert ratio == pytest.approx(1.2)  # the median of 1.2, 1.5 and 1.1, not 120/100 by chance
    worker_point, worker_base, worker_ratio = cells["worker CPU/event"]
    assert worker_point == pytest.approx(0.2)  # 20 ms over 100 events, from the runs
    assert worker_base == pytest.approx(0.1)
    assert worker_ratio == pytest.approx(2.0)
    assert cells["host CPU/event"][2] == pytest.approx(1.0)


def test_alternating_files_pair_point_and_base_of_the_same_round(tmp_path: Path) -> None:
    (tmp_path / "abc1234.1.point.json").write_text(json.dumps(_compare_json(90.0, 9.0, [_run(0.1, 0.01, 0.01, 0.01)])))
    (tmp_path / "abc1234.1.base.json").write_text(json.dumps(_compare_json(60.0, 3.0, [_run(0.1, 0.01, 0.01, 0.01)])))
    (tmp_path / "abc1234.2.point.json").write_text(json.dumps(_compare_json(80.0, 8.0, [_run(0.1, 0.01, 0.01, 0.01)])))
    cells = table.row(table.load(tmp_path)["alternating"]["abc1234"])
    assert cells["whole run p50"][2] == pytest.approx(1.5)  # round 2 has no base: left out
    assert cells["reconnect 1st p50"][2] == pytest.approx(3.0)


def test_profile_diff_counts_each_function_once_per_sample_and_skips_idle(tmp_path: Path) -> None:
    raw = tmp_path / "worker.txt"
    raw.write_text(
        "main (tests/hostdouble/worker.py:1);AsyncPipeline.run (core/pipeline/_base_async.py:5);"
        "AsyncPipeline.run (core/pipeline/_base_async.py:9) 3\n"
        "main (tests/hostdouble/worker.py:1);EpollSelector.select (selectors.py:452) 50\n"
        "main (tests/hostdouble/worker.py:1);BlobEventWriter.append (resilient/storage/eventwriter.py:7) 2\n"
    )
    packages, functions, busy = profile_diff.inclusive(raw)
    assert busy == 5  # the select sample is a wait
    assert packages["core"] == 3
    assert packages["resilient/storage"] == 2
    assert packages["tests/hostdouble"] == 5
    assert functions["AsyncPipeline.run (core/pipeline/_base_async.py)"] == 3  # once per sample, not per frame
    assert functions["main (tests/hostdouble/worker.py)"] == 5
