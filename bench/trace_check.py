"""Check one run's trace end to end under the host double: start the double with the console exporter,
create one background response, wait for it, and read the spans the worker printed.

    RESILIENT_OTEL_CONSOLE=true AzureWebJobsStorage=... TASKHUB_NAME=TraceCheck \\
      .venv/bin/python -m tests.hostdouble --port 7391 --app-dir . > /tmp/double.log 2>&1 &
    .venv/bin/python bench/trace_check.py /tmp/double.log http://127.0.0.1:7391

Prints one JSON line: how many activity spans (``run_phase``, ``finalize``) the run had and how many are in
the create request's trace, how many phases are direct children of the request span, the storage spans in
that trace, and the retrieve requests (each its own trace). Only loopback URLs.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

PREFIX = "[worker] "
TERMINAL = ("completed", "failed", "cancelled", "incomplete")


def _spans(log: str) -> list[dict[str, Any]]:
    """Every span object the console exporter printed (pretty JSON, one line per row, behind the prefix)."""
    lines = Path(log).read_text(errors="replace").splitlines()
    text = "\n".join(line[len(PREFIX):] if line.startswith(PREFIX) else line for line in lines)
    decoder, found, at = json.JSONDecoder(), [], 0
    while (at := text.find("{\n", at)) >= 0:
        try:
            obj, end = decoder.raw_decode(text, at)
        except ValueError:
            at += 2
            continue
        if isinstance(obj, dict) and "context" in obj and "name" in obj:
            found.append(obj)
        at = end
    return found


def main(log: str, base: str) -> None:
    if urlparse(base).hostname not in ("127.0.0.1", "localhost"):
        raise SystemExit("only a loopback URL")
    body = json.dumps({"model": "m", "input": "trace me", "background": True,
                       "metadata": {"research_phases": "3", "words_per_phase": "5", "delta_delay_ms": "0"}}).encode()
    request = urllib.request.Request(base + "/responses", data=body, headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        rid = json.load(answer)["id"]
    status, deadline = "", time.time() + 120
    while status not in TERMINAL and time.time() < deadline:
        time.sleep(0.5)
        with urllib.request.urlopen(f"{base}/responses/{rid}", timeout=30) as answer:
            status = json.load(answer)["status"]
    time.sleep(2)  # the console exporter prints each span as it ends
    spans = _spans(log)
    mine = [s for s in spans if (s.get("attributes") or {}).get("response_id") == rid]
    [post] = [s for s in mine if s["name"] == "POST /responses"]
    trace = post["context"]["trace_id"]
    activities = [s for s in mine if s["name"] in ("run_phase", "finalize")]
    in_trace = [s for s in spans if s["context"]["trace_id"] == trace]
    print(json.dumps({
        "response_id": rid, "status": status, "activity_spans": len(activities),
        "activity_spans_in_request_trace": sum(s["context"]["trace_id"] == trace for s in activities),
        "phases_under_request_span": sum(s["parent_id"] == post["context"]["span_id"]
                                         for s in activities if s["name"] == "run_phase"),
        "storage_operation_spans_in_trace": sum(s["name"].startswith(("TableClient", "BlobClient", "TableOperations"))
                                                for s in in_trace),
        "retrieve_spans_in_own_traces": sum(s["name"].startswith("GET") and s["context"]["trace_id"] != trace
                                            for s in mine),
    }))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2].rstrip("/"))
