"""``scripts/compliance.sh``: runs the Open Responses suite's CLI from a checkout against a running service,
with ``--base-url`` and a default ``--api-key`` added, every other option passed on, and the CLI's exit
status as its own; refuses clearly when no service answers. A stand-in ``bun`` on PATH plays the CLI (the
suite itself needs GitHub, which CI cannot reach)."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "compliance.sh"


class _NotFound(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def service() -> Iterator[int]:
    server = HTTPServer(("127.0.0.1", 0), _NotFound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()


def _suite_and_bun(tmp_path: Path, status: int) -> tuple[Path, Path]:
    suite = tmp_path / "suite"
    (suite / "bin").mkdir(parents=True)
    (suite / "bin" / "compliance-test.ts").write_text("// the CLI\n")
    tools = tmp_path / "tools"
    tools.mkdir()
    bun = tools / "bun"
    bun.write_text(f'#!/usr/bin/env bash\necho "$PWD $*" >> "{tmp_path}/calls"\n'
                   f'[ "$1" = run ] && exit {status}\nexit 0\n')  # the CLI's status; its install succeeds
    bun.chmod(0o755)
    return suite, tools


def _run(port: int, suite: Path, tools: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PORT": str(port), "OPENRESPONSES_DIR": str(suite),
           "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}"}
    env.pop("OPENRESPONSES_API_KEY", None)
    env.pop("COMPLIANCE_BASE_URL", None)
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("status", [0, 1])
def test_runs_the_cli_with_the_service_url_and_passes_options_and_status(
        tmp_path: Path, service: int, status: int) -> None:
    suite, tools = _suite_and_bun(tmp_path, status)
    done = _run(service, suite, tools, "--filter", "basic-response", "--verbose")
    assert done.returncode == status, done.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls == [f"{suite} install --silent",
                     f"{suite} run bin/compliance-test.ts --base-url http://127.0.0.1:{service}/v1 --api-key local "
                     "--filter basic-response --verbose"]


def test_an_own_api_key_is_kept(tmp_path: Path, service: int) -> None:
    suite, tools = _suite_and_bun(tmp_path, 0)
    assert _run(service, suite, tools, "--api-key", "mine").returncode == 0
    assert (tmp_path / "calls").read_text().splitlines()[-1].endswith("/v1 --api-key mine")


def test_no_service_is_refused_before_anything_is_fetched(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    suite, tools = _suite_and_bun(tmp_path, 0)
    done = _run(port, suite, tools)
    assert done.returncode == 1 and "no service answers" in done.stderr
    assert not (tmp_path / "calls").exists()
