"""Cold ``import function_app``, as a new worker pays it before indexing: without the app's bytecode (a
read-only package that ships none), with the bytecode ``scripts/compile_bytecode.py`` ships, and the
indexing stack alone (``azure.functions`` and the FastAPI extension), interleaved round by round in fresh
interpreters so the machine's noise hits all of them alike.

    .venv/bin/python bench/cold_import.py --rounds 25
    .venv/bin/python bench/cold_import.py --rounds 25 --also /tmp/other-checkout   # side by side with it

``--also`` measures another checkout of this repository (e.g. a ``git worktree`` of an older commit) in the
same rounds. The app's ``__pycache__`` folders are removed before each "without bytecode" import and at the
end; the dependencies keep theirs (pip compiles what it installs).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
APP = ("import time; t = time.perf_counter(); import function_app; "
       "print(time.perf_counter() - t)")
STACK = ("import time; t = time.perf_counter(); import azure.functions, azurefunctions.extensions.http.fastapi; "
         "print(time.perf_counter() - t)")


def clean(root: Path) -> None:
    for folder in [*root.glob("resilient/**/__pycache__"), root / "__pycache__"]:
        shutil.rmtree(folder, ignore_errors=True)


def seconds(code: str, root: Path) -> float:
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})  # as on a read-only package
    return float(done.stdout.split()[-1])


def compile_app(root: Path) -> None:
    subprocess.run([sys.executable, "-m", "compileall", "-q", "--invalidation-mode", "checked-hash",
                    "function_app.py", "resilient"], cwd=root, check=True, capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--also", type=Path, help="another checkout to measure in the same rounds")
    args = parser.parse_args()
    roots = {"this": ROOT, **({"also": args.also.resolve()} if args.also else {})}
    results: dict[str, list[float]] = {}
    try:
        for _ in range(args.rounds):
            for name, root in roots.items():
                clean(root)
                results.setdefault(f"{name}: without bytecode", []).append(seconds(APP, root))
            for name, root in roots.items():
                compile_app(root)
                results.setdefault(f"{name}: with shipped bytecode", []).append(seconds(APP, root))
            results.setdefault("indexing stack alone", []).append(seconds(STACK, ROOT))
    finally:
        for root in roots.values():
            clean(root)
    print(f"cold import, {args.rounds} rounds interleaved (seconds; {sys.executable})")
    for name, values in results.items():
        print(f"  {name:34s} best {min(values):.3f}  median {statistics.median(values):.3f}  "
              f"max {max(values):.3f}")


if __name__ == "__main__":
    main()
