"""Two checkouts of the app side by side in one ``compare.py`` run: wall times interleaved run by run.

``bisect_points.sh`` alternates whole ``compare.py`` calls (seconds apart); on a machine whose load moves
by the second, that is enough for CPU per event but not for milliseconds of wall time. This starts a host
double from each checkout (each from its own folder, so its own ``tests/hostdouble`` and
``function_app.py``, each on its own Azurite so the older task hubs, whose name is fixed in ``host.json``,
cannot meet) and hands both to this checkout's ``compare.py`` as ``--ours`` (the point) and
``--reference`` (the base): one client, runs interleaved point, base, point, base, ... The JSON it
writes has both sides' runs; ``bisect_table.py`` reads it like a ``bisect_points.sh`` pair.

    .venv/bin/python bench/bisect_pair.py --base /work/wt/old --point ../bisect-point-abc1234 \\
        --base-storage "$CONN_A" --point-storage "$CONN_B" --runs 20 --json out.json [compare.py options]
"""

from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import compare  # this checkout's bench/compare.py


def start_double(name: str, app_dir: Path, storage: str, log_dir: Path, timeout_s: float) -> compare.ManagedServer:
    """A host double started from ``app_dir`` itself (cwd and ``--app-dir``), ready when it says so."""
    env = dict(os.environ)
    env["AzureWebJobsStorage"] = storage
    env["TASKHUB_NAME"] = env.get("TASKHUB_NAME") or "ResilientResponsesLocal"
    env["RESILIENT_STORAGE_PREFIX"] = "pair" + secrets.token_hex(3)
    env["RESILIENT_AGENT_DELTA_DELAY_MS"] = "0"
    argv = [str(app_dir / ".venv/bin/python"), "-m", "tests.hostdouble", "--port", str(compare.free_port()),
            "--app-dir", str(app_dir)]
    server = compare.ManagedServer(name, argv, env, log_dir)
    log = server.log_path.open("wb")
    server.proc = subprocess.Popen(argv, cwd=app_dir, env=env, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    log.close()
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        match = compare.READY.search(server.log_path.read_text(errors="replace"))
        if match:
            server.url = match.group(1)  # type: ignore[attr-defined]
            return server
        if server.proc.poll() is not None:
            break
        time.sleep(0.05)
    server.stop()
    raise SystemExit(f"{name} double did not start: see {server.log_path}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", type=Path, required=True, help="checkout of the base commit")
    p.add_argument("--point", type=Path, required=True, help="checkout of the measured commit")
    p.add_argument("--base-storage", required=True, help="AzureWebJobsStorage for the base's double")
    p.add_argument("--point-storage", required=True, help="AzureWebJobsStorage for the point's double")
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--json", required=True)
    p.add_argument("--ready-timeout", type=float, default=90)
    args, extra = p.parse_known_args()  # anything else goes to compare.py as is (e.g. --settle-ms 1000)
    log_dir = Path(tempfile.mkdtemp(prefix="bisect-pair-"))
    servers: list[compare.ManagedServer] = []
    try:
        for name, app_dir, storage in (("base", args.base, args.base_storage),
                                       ("point", args.point, args.point_storage)):
            servers.append(start_double(name, app_dir.resolve(), storage, log_dir, args.ready_timeout))
        base, point = servers
        return compare.main([
            "--ours", point.url, "--ours-pid", str(point.pid),  # type: ignore[attr-defined]
            "--reference", base.url, "--reference-pid", str(base.pid),  # type: ignore[attr-defined]
            "--runs", str(args.runs), "--idle-seconds", "0", "--json", args.json, *extra,
        ])
    finally:
        for server in reversed(servers):
            server.stop()
        print(f"double logs: {log_dir}")


if __name__ == "__main__":
    raise SystemExit(main())
