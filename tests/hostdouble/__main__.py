"""``python -m tests.hostdouble --port 7071 [--app-dir DIR] [--settings local.settings.json]``.

Loads ``Values`` of the settings file into the environment (existing variables win), starts the worker
process, then serves the public HTTP endpoint; prints ``host double listening on http://127.0.0.1:PORT``
once both are ready. Stop it with SIGINT/SIGTERM (the worker is stopped too).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
from pathlib import Path

from .protocol import READY_LINE
from .serving import loopback_socket, start_server


def load_settings(app_dir: Path, settings: str | None) -> Path | None:
    """Copy ``Values`` of a local.settings.json-style file into ``os.environ`` (existing variables win)."""
    if not settings:
        return None
    path = Path(settings)
    if not path.is_absolute():
        path = (app_dir / path) if (app_dir / path).exists() else Path.cwd() / path
    if not path.exists():
        print(f"[hostdouble] settings file {settings} not found; continuing without it", file=sys.stderr)
        return None
    values = json.loads(path.read_text()).get("Values", {})
    for key, value in values.items():
        os.environ.setdefault(str(key), "" if value is None else str(value))
    return path


async def run(app_dir: str, port: int, script: str) -> None:
    from .host import Host

    try:
        sock = loopback_socket(port)
    except OSError as exc:
        raise SystemExit(f"host double: cannot listen on 127.0.0.1:{port}: {exc}") from None
    host = Host(app_dir, port, script)
    try:
        await host.startup()
        # Kestrel's default keep-alive (130 s): clients with pooled connections (the SDK's aiohttp session,
        # httpx) must not race uvicorn's 5 s default.
        try:
            task = await start_server(host.app(), sock, keep_alive_s=130, graceful_s=2)
        except RuntimeError:
            raise SystemExit(f"host double: could not serve on 127.0.0.1:{port}") from None
        print(READY_LINE.format(port=port), flush=True)
        await task
    finally:
        await host.shutdown()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.hostdouble", description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=7071)
    parser.add_argument("--app-dir", default=".")
    parser.add_argument("--settings", default="local.settings.json",
                        help="local.settings.json-style file (relative to the app dir or the cwd)")
    parser.add_argument("--script", default=None, help="app script (default: $PYTHON_SCRIPT_FILE_NAME or "
                                                       "function_app.py)")
    args = parser.parse_args(argv)
    app_dir = Path(args.app_dir).resolve()
    load_settings(app_dir, args.settings)
    script = args.script or os.environ.get("PYTHON_SCRIPT_FILE_NAME") or "function_app.py"
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run(str(app_dir), args.port, script))


if __name__ == "__main__":
    main()
