"""Telemetry set-up: nothing is loaded unless a setting asks for it; each setting installs what it names;
a request span counts its 503s. (The connected trace of a whole run is in tests/integration/test_telemetry.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import types
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from resilient.http.results import HttpResult
from resilient.http.traced import traced
from resilient.storage.errors import StorageUnavailable
from resilient.telemetry import setup
from tests.telemetry_kit import counter, memory

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = ("APPLICATIONINSIGHTS_CONNECTION_STRING", "OTEL_EXPORTER_OTLP_ENDPOINT", setup.CONSOLE_SETTING)


def _app_process(code: str, **env: str) -> dict[str, Any]:
    """Run ``code`` after ``import function_app`` in a fresh interpreter; it prints one JSON line."""
    clean = {k: v for k, v in os.environ.items() if k not in SETTINGS and not k.startswith("OTEL_")}
    done = subprocess.run([sys.executable, "-c", "import json, sys\nimport function_app\n" + code], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, env={**clean, **env})
    assert done.returncode == 0, done.stderr[-2000:]
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def test_with_no_setting_no_sdk_or_exporter_is_loaded_and_spans_are_no_ops() -> None:
    found = _app_process("""
from opentelemetry import trace
from resilient.telemetry import setup, spans
with spans.request_span("POST /responses") as span:
    recording = span.is_recording()
    parent = spans.current_traceparent()
print(json.dumps({"sdk": sorted(m for m in sys.modules if m.startswith(("opentelemetry.sdk", "opentelemetry.exporter",
                  "azure.monitor", "azure.core.tracing.ext"))),
                  "provider": type(trace.get_tracer_provider()).__name__, "configured": setup.configure(),
                  "recording": recording, "traceparent": parent}))
""")
    assert found == {"sdk": [], "provider": "ProxyTracerProvider", "configured": None, "recording": False,
                     "traceparent": None}


def test_an_activity_starts_no_span_until_a_provider_is_installed_then_exactly_one() -> None:
    """With no exporter an activity pays nothing for telemetry (no span started, nothing made current); once a
    provider is installed (a setting, the Functions worker, a test) each activity is one span."""
    found = _app_process("""
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from resilient.telemetry import spans

class Counting:
    def __init__(self, real):
        self.real, self.started = real, 0
    def start_as_current_span(self, *args, **kwargs):
        self.started += 1
        return self.real.start_as_current_span(*args, **kwargs)

tracer = spans.TRACER = Counting(spans.TRACER)
parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
def activity():
    with spans.activity_span("run_phase", "resp_x", parent, {"phase.index": 0}) as span:
        return {"invalid": span is trace.INVALID_SPAN, "current": trace.get_current_span() is span,
                "recording": span.is_recording()}
before = {"tracing": spans.tracing(), **activity(), "started": tracer.started}
trace.set_tracer_provider(TracerProvider())
after = {"tracing": spans.tracing(), **activity(), "started": tracer.started}
print(json.dumps({"before": before, "after": after}))
""")
    assert found["before"] == {"tracing": False, "invalid": True, "current": True, "recording": False, "started": 0}
    assert found["after"] == {"tracing": True, "invalid": False, "current": True, "recording": True, "started": 1}


def test_the_console_setting_installs_the_sdk_and_storage_call_tracing() -> None:
    found = _app_process("""
from opentelemetry import trace
from azure.core.settings import settings
from resilient.telemetry import spans
with spans.request_span("POST /responses") as span:
    recording = span.is_recording()
print(json.dumps({"provider": type(trace.get_tracer_provider()).__name__, "recording": recording,
                  "azure_sdk": getattr(settings.tracing_implementation(), "__name__", None)}))
""", RESILIENT_OTEL_CONSOLE="true")
    assert found == {"provider": "TracerProvider", "recording": True, "azure_sdk": "OpenTelemetrySpan"}


class _Collector(BaseHTTPRequestHandler):
    paths: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        _Collector.paths.append(self.path)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        return None


@pytest.fixture
def collector() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Collector.paths = []
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def test_an_otlp_endpoint_gets_the_spans_and_metrics(collector: str) -> None:
    found = _app_process("""
from opentelemetry import metrics, trace
from resilient.telemetry import metrics as counters, spans
with spans.request_span("POST /responses"):
    counters.PHASES.add(1, {"outcome": "checkpointed"})
trace.get_tracer_provider().force_flush()
metrics.get_meter_provider().force_flush()
print(json.dumps({"provider": type(trace.get_tracer_provider()).__name__}))
""", OTEL_EXPORTER_OTLP_ENDPOINT=collector)
    assert found == {"provider": "TracerProvider"}
    assert {"/v1/traces", "/v1/metrics"} <= set(_Collector.paths)


def test_a_connection_string_configures_azure_monitor_with_the_apps_managed_identity(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []
    distro = types.ModuleType("azure.monitor.opentelemetry")
    distro.configure_azure_monitor = lambda **kwargs: calls.append(kwargs)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "azure.monitor.opentelemetry", distro)
    monkeypatch.setattr(setup, "_configured", None)
    monkeypatch.setattr(setup, "provider_installed", lambda: False)
    env = {"APPLICATIONINSIGHTS_CONNECTION_STRING": "InstrumentationKey=00000000-0000-0000-0000-000000000000",
           "APPLICATIONINSIGHTS_AUTHENTICATION_STRING": "ClientId=1111-2222;Authorization=AAD",
           "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}  # App Insights wins over OTLP
    assert setup.configure(env) == "azure_monitor"
    assert setup.configure(env) == "azure_monitor"  # once per process
    assert len(calls) == 1
    options = calls[0]
    assert options["connection_string"] == env["APPLICATIONINSIGHTS_CONNECTION_STRING"]
    assert options["disable_logging"] is True  # logs reach App Insights through the host already
    assert type(options["credential"]).__name__ == "ManagedIdentityCredential"


def test_a_failing_exporter_set_up_leaves_the_app_running(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(**kwargs: Any) -> None:
        raise ValueError("bad connection string")

    distro = types.ModuleType("azure.monitor.opentelemetry")
    distro.configure_azure_monitor = broken  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "azure.monitor.opentelemetry", distro)
    monkeypatch.setattr(setup, "_configured", None)
    monkeypatch.setattr(setup, "provider_installed", lambda: False)
    assert setup.configure({"APPLICATIONINSIGHTS_CONNECTION_STRING": "x"}) is None


def test_which_setting_wins() -> None:
    assert setup.destination({}) is None
    assert setup.destination({setup.CONSOLE_SETTING: "false"}) is None
    assert setup.destination({setup.CONSOLE_SETTING: "true"}) == "console"
    assert setup.destination({setup.CONSOLE_SETTING: "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}) == "otlp"
    assert setup.destination({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x",
                              "APPLICATIONINSIGHTS_CONNECTION_STRING": "y"}) == "azure_monitor"


async def test_a_request_answered_503_is_counted_and_its_span_marked() -> None:
    spans, reader = memory()
    before = counter(reader, "resilient.http.unavailable", **{"http.route": "GET /responses/{response_id}"})

    async def unavailable() -> HttpResult:
        raise StorageUnavailable("storage is down")

    async def fine() -> HttpResult:
        return HttpResult(200, {})

    result = await traced("GET /responses/{response_id}", unavailable(), "resp_x")
    assert result.status == 503
    assert (await traced("GET /responses/{response_id}", fine(), "resp_x")).status == 200
    after = counter(reader, "resilient.http.unavailable", **{"http.route": "GET /responses/{response_id}"})
    assert after - before == 1
    mine = [s for s in spans.get_finished_spans() if (s.attributes or {}).get("response_id") == "resp_x"]
    assert [s.attributes["http.response.status_code"] for s in mine if s.attributes] == [503, 200]
    assert mine[0].status.status_code.name == "ERROR" and mine[0].kind.name == "SERVER"
