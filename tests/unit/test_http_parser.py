"""The worker's HTTP server parses requests with httptools, not h11.

The FastAPI extension serves the app's HTTP functions from a uvicorn server inside the worker, configured
with uvicorn's defaults (``http="auto"``): uvicorn takes httptools' C parser when it can import it and
falls back to h11, a pure-Python parser, otherwise. ``requirements.txt`` therefore lists ``httptools``.
"""

from __future__ import annotations

import re
from pathlib import Path

from uvicorn.protocols.http.auto import AutoHTTPProtocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

ROOT = Path(__file__).resolve().parents[2]


def test_requirements_ship_httptools() -> None:
    names = {re.split(r"[<>=!~\[; ]", line.strip(), maxsplit=1)[0].lower()
             for line in (ROOT / "requirements.txt").read_text().splitlines()
             if line.strip() and not line.lstrip().startswith("#")}
    assert "httptools" in names


def test_uvicorn_picks_httptools() -> None:
    assert AutoHTTPProtocol is HttpToolsProtocol
