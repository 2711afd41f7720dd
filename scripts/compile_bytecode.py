"""Compile the app's own modules to bytecode before azd packages them (azure.yaml's ``prepackage`` hook).

Why: a Flex Consumption app runs from its deployment package, mounted read-only, so Python cannot write
``__pycache__`` next to the app's sources there. Without bytecode in the package, every new instance
compiles ``function_app.py`` and all of ``resilient/`` from source before it can be indexed (~0.1 s of a
~1 s cold import at the median here; see docs/PERFORMANCE.md, "Cold start"). The dependencies do not need this:
pip compiles what it installs.

The bytecode is written with ``checked-hash`` invalidation: it is valid as long as the source's hash
matches, whatever the file times become when the package is zipped, uploaded and mounted; a stale file is
never used. It only helps when the Python here has the same version as the deployed runtime (the cache
file names carry the version, e.g. ``cpython-313``); otherwise the runtime ignores it, so this prints a
warning and still succeeds.

    python scripts/compile_bytecode.py          # run by azd before packaging; safe to run by hand
"""

from __future__ import annotations

import compileall
import py_compile
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("function_app.py", "resilient")
RUNTIME_VERSION = re.compile(r"param\s+runtimeVersion\s+string\s*=\s*'(\d+)\.(\d+)'")


def deployed_python_version(root: Path = ROOT) -> tuple[int, int] | None:
    """The Python version infra/ deploys (``runtimeVersion`` in infra/app/api.bicep), or None if not found."""
    bicep = root / "infra" / "app" / "api.bicep"
    match = RUNTIME_VERSION.search(bicep.read_text(encoding="utf-8")) if bicep.is_file() else None
    return (int(match.group(1)), int(match.group(2))) if match else None


def compile_app(root: Path = ROOT) -> bool:
    """Compile every source the package ships; True when all of them compiled."""
    mode = py_compile.PycInvalidationMode.CHECKED_HASH
    ok = True
    for name in SOURCES:
        path = root / name
        # force: a local run (func start, tests) leaves timestamp bytecode that compileall would keep as
        # "up to date", and a timestamp check fails once zipping has rounded the file times.
        if path.is_dir():
            ok = bool(compileall.compile_dir(path, quiet=1, force=True, invalidation_mode=mode)) and ok
        else:
            ok = bool(compileall.compile_file(path, quiet=1, force=True, invalidation_mode=mode)) and ok
    return ok


def main(root: Path = ROOT) -> int:
    target = deployed_python_version(root)
    here = sys.version_info[:2]
    if target is not None and target != here:
        print(f"compile_bytecode: this Python is {here[0]}.{here[1]} but the app deploys on "
              f"{target[0]}.{target[1]}; the runtime will ignore this bytecode and compile at start-up",
              file=sys.stderr)
    if not compile_app(root):
        print("compile_bytecode: some sources did not compile (see above)", file=sys.stderr)
        return 1
    print(f"compile_bytecode: function_app.py and resilient/ compiled for Python {here[0]}.{here[1]} "
          "(checked-hash)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
