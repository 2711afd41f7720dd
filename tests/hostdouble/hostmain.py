"""The host process, as the platform (``python -m tests.hostdouble``) starts it: one Functions host.

``python -m tests.hostdouble.hostmain --fd N --port P --app-dir DIR [--script S] [--kind-redelivery]
[--state-file F] [--host-generation G] [--instance NAME] [--shutdown-timeout S]``

``--port`` is the public port (the one the Durable client's URLs name); with ``--instance`` the host is one
of several behind the platform's front end on that port, serves on its own socket (``--fd``) and prints
``INSTANCE_READY_LINE`` instead of ``READY_LINE``.

Serves on the listening socket it inherits (``--fd``), so the port stays open while the platform replaces
one host with the next. Exit codes: 0 after SIGTERM/SIGINT; ``RECYCLE_EXIT_CODE`` when the host stopped
itself (worker restart limit); ``STARTUP_FAILED_EXIT_CODE`` when it never became ready.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import signal
import socket
import sys
import traceback

from .protocol import INSTANCE_READY_LINE, READY_LINE, RECYCLE_EXIT_CODE, STARTUP_FAILED_EXIT_CODE
from .serving import start_server


def _die_with_parent() -> None:
    """SIGKILL this process when the platform dies (Linux)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


async def run(args: argparse.Namespace) -> int:
    from .host import Host, log

    sock = socket.socket(fileno=args.fd)
    try:
        host = Host(args.app_dir, args.port, args.script, semantics="kind" if args.kind_redelivery else "real",
                    host_generation=args.host_generation, state_file=args.state_file)
    except SystemExit as exc:
        print(exc, file=sys.stderr, flush=True)
        return STARTUP_FAILED_EXIT_CODE
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, host.request_stop, f"signal {sig.name}")
    ready = False
    try:
        await host.startup()
        # Kestrel's default keep-alive (130 s): clients with pooled connections (the SDK's aiohttp session,
        # httpx) must not race uvicorn's 5 s default.
        server, task = await start_server(host.app(), sock, keep_alive_s=130, graceful_s=args.shutdown_timeout,
                                          own_signals=True)
        ready = True
        if args.instance:  # one of several instances behind the platform's front end, which says when all are ready
            print(INSTANCE_READY_LINE.format(name=args.instance, port=sock.getsockname()[1]), flush=True)
        else:
            print(READY_LINE.format(port=args.port), flush=True)
        reason = await host.stopped
        log(f"host stopping ({reason})")
        if args.instance:  # scale-in of one of several instances: drain mode first (see README, "Scale-out")
            with contextlib.suppress(Exception):
                await asyncio.wait_for(host.drain(), 5.0)
        server.should_exit = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, args.shutdown_timeout + 3.0)
        return 0 if reason.startswith("signal") else RECYCLE_EXIT_CODE
    except Exception:
        traceback.print_exc()
        return RECYCLE_EXIT_CODE if ready else STARTUP_FAILED_EXIT_CODE
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(host.shutdown(graceful=True), 30.0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.hostdouble.hostmain")
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--app-dir", required=True)
    parser.add_argument("--script", default="function_app.py")
    parser.add_argument("--kind-redelivery", action="store_true")
    parser.add_argument("--state-file", default=None)
    parser.add_argument("--host-generation", type=int, default=1)
    parser.add_argument("--instance", default=None, help="this host's name among several behind a front end")
    parser.add_argument("--shutdown-timeout", type=int, default=2,
                        help="seconds open HTTP requests get to finish once the host stops")
    args = parser.parse_args(argv)
    _die_with_parent()
    sys.exit(asyncio.run(run(args)))


if __name__ == "__main__":
    main()
