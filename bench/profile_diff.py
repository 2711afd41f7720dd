"""What grew between two py-spy profiles of the same workload: inclusive CPU per run, by package and function.

``bench/profile_worker.py`` leaves py-spy's raw samples (``worker.txt``, ``host.txt``) in the folder it
prints. Given that folder for a commit before a step and one after it (each the same ``--runs`` of the same
workload), this prints, for one process, the busy milliseconds per run spent inside each package and each
function (inclusive: a sample counts for every distinct package/function on its stack), before and after,
sorted by growth. A function that appears only after the step is the step's new cost; one that grew is code
the step made hotter. Idle samples (a thread waiting in ``select``, a condition or ``sleep``) are left out,
as ``profile_worker.py`` does.

    .venv/bin/python bench/profile_diff.py BEFORE_DIR AFTER_DIR --runs 40 [--process worker|host] [--top 25]
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.pyspy_raw import busy_stacks

IDLE_LEAF = re.compile(r"(\.select \(.*selectors\.py|Condition\.wait \(.*threading\.py|^sleep \(.*tasks\.py|"
                       r"_die_with_parent|\.poll \(.*selectors\.py|epoll)")
FRAME = re.compile(r"^(?P<func>.*?) \((?P<path>[^()]*?):\d+\)$")


def package(path: str) -> str:
    """The owning package of a frame's source path. py-spy names files relative to their import root
    (``resilient/storage/eventwriter.py``, ``core/pipeline/_base_async.py`` for azure-core,
    ``asyncio/events.py``): the repo's code by its folder two deep, anything else by its first folder,
    a top-level module by its file."""
    if "site-packages/" in path:
        path = path.split("site-packages/", 1)[1]
    parts = path.split("/")
    if parts[0] in ("resilient", "tests") and len(parts) > 2:
        return "/".join(parts[:2])
    return parts[0] if len(parts) > 1 else parts[0].removesuffix(".py")


def inclusive(path: Path) -> tuple[collections.Counter[str], collections.Counter[str], int]:
    """Busy samples per package and per function (inclusive), and the busy total, of one raw profile."""
    packages: collections.Counter[str] = collections.Counter()
    functions: collections.Counter[str] = collections.Counter()
    busy = 0
    for frames, n in busy_stacks(path, IDLE_LEAF):
        busy += n
        seen_pkg: set[str] = set()
        seen_fn: set[str] = set()
        for frame in frames:
            match = FRAME.match(frame)
            if not match:
                continue
            src = match["path"]
            seen_pkg.add(package(src))
            seen_fn.add(f"{match['func']} ({src})")
        for key in seen_pkg:
            packages[key] += n
        for key in seen_fn:
            functions[key] += n
    return packages, functions, busy


def table(title: str, before: collections.Counter[str], after: collections.Counter[str], scale_b: float,
          scale_a: float, top: int) -> list[str]:
    keys = set(before) | set(after)
    rows = sorted(keys, key=lambda k: after[k] * scale_a - before[k] * scale_b, reverse=True)[:top]
    out = [f"{title}: ms per run before -> after (growth)"]
    for k in rows:
        b, a = before[k] * scale_b, after[k] * scale_a
        out.append(f"  {b:7.2f} -> {a:7.2f}  ({a - b:+6.2f})  {k}")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("before", type=Path)
    p.add_argument("after", type=Path)
    p.add_argument("--runs", type=int, required=True, help="runs each profile covers (profile_worker --runs)")
    p.add_argument("--runs-after", type=int, help="if the after profile covers a different number")
    p.add_argument("--rate", type=int, default=250, help="py-spy samples per second (profile_worker --rate)")
    p.add_argument("--process", choices=("worker", "host"), default="worker")
    p.add_argument("--top", type=int, default=25)
    args = p.parse_args()
    ms = 1000 / args.rate
    pb, fb, busy_b = inclusive(args.before / f"{args.process}.txt")
    pa, fa, busy_a = inclusive(args.after / f"{args.process}.txt")
    sb, sa = ms / args.runs, ms / (args.runs_after or args.runs)
    print(f"{args.process}: busy {busy_b * sb:.1f} -> {busy_a * sa:.1f} ms per run (py-spy samples)")
    print("\n".join(table("by package", pb, pa, sb, sa, args.top)))
    print("\n".join(table("by function", fb, fa, sb, sa, args.top)))


if __name__ == "__main__":
    main()
