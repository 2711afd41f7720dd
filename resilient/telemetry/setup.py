"""Install an OpenTelemetry SDK and exporter at start-up, only when an app setting asks for one.

Why here and lazily: the SDK, the exporters and the Azure Monitor distro take a noticeable share of a
second to import; a worker whose settings name no destination must not pay that before indexing. The
first setting found wins:

1. ``APPLICATIONINSIGHTS_CONNECTION_STRING``: ``azure.monitor.opentelemetry.configure_azure_monitor``
   (traces and metrics; logs keep reaching Application Insights through the Functions host, so the distro's
   log export is off to avoid every line twice). ``APPLICATIONINSIGHTS_AUTHENTICATION_STRING`` with
   ``Authorization=AAD`` (what infra/ sets: the resource has local auth disabled) exports with the managed
   identity it names.
2. ``OTEL_EXPORTER_OTLP_ENDPOINT``: the OTLP/HTTP span and metric exporters (they read the standard
   ``OTEL_EXPORTER_OTLP_*`` settings themselves).
3. ``RESILIENT_OTEL_CONSOLE=true``: spans and metrics printed to stdout (local debugging).

Whatever is chosen, Azure SDK calls (the storage clients) become child spans through azure-core's
OpenTelemetry plugin. A tracer provider that is already installed (the Functions Python worker installs
one itself when ``PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY`` is set; a test installs its own) is left
as it is: configuring a second one would export everything twice.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from opentelemetry import metrics, trace

log = logging.getLogger("resilient.telemetry")

SERVICE_NAME = "resilient-responses"
CONSOLE_SETTING = "RESILIENT_OTEL_CONSOLE"

# Module state on purpose: OpenTelemetry's tracer and meter providers are process-global and can be installed
# once per process, so what this process installed is a fact about the process, not about any one object.
_configured: str | None = None


def destination(env: Mapping[str, str]) -> str | None:
    """Which exporter the settings ask for: ``azure_monitor``, ``otlp``, ``console`` or None."""
    if env.get("APPLICATIONINSIGHTS_CONNECTION_STRING"):
        return "azure_monitor"
    if env.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return "otlp"
    if env.get(CONSOLE_SETTING, "").strip().lower() in ("1", "true", "yes"):
        return "console"
    return None


def provider_installed() -> bool:
    """True when something already installed a real tracer provider (not the API's default proxy)."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def configure(env: Mapping[str, str] | None = None) -> str | None:
    """Install the exporter the settings ask for (once per process). Returns what was installed, or None.
    Never raises: telemetry that cannot be set up must not stop the app (the reason is logged)."""
    global _configured
    env = os.environ if env is None else env
    chosen = destination(env)
    if chosen is None or _configured is not None:
        return _configured
    if provider_installed():
        log.info("an OpenTelemetry tracer provider is already installed: leaving it as it is")
        _configured = "existing"
        instrument_azure_sdk()
        return _configured
    try:
        if chosen == "azure_monitor":
            _azure_monitor(env)
        else:
            _sdk(chosen, env)
        instrument_azure_sdk()
    except Exception:
        log.exception("OpenTelemetry could not be configured (%s); running without it", chosen)
        return None
    _configured = chosen
    return chosen


def instrument_azure_sdk() -> bool:
    """Make Azure SDK calls (blob, table, queue) child spans of the current span. True when enabled."""
    try:
        from azure.core.settings import settings
        from azure.core.tracing.ext.opentelemetry_span import OpenTelemetrySpan
    except ImportError:
        return False
    settings.tracing_implementation = OpenTelemetrySpan
    return True


def _credential(env: Mapping[str, str]) -> Any:
    """The managed identity named by ``APPLICATIONINSIGHTS_AUTHENTICATION_STRING`` (``ClientId=…;
    Authorization=AAD``), or None for connection-string (key) auth."""
    raw = env.get("APPLICATIONINSIGHTS_AUTHENTICATION_STRING", "")
    parts = dict(p.split("=", 1) for p in raw.split(";") if "=" in p)
    if parts.get("Authorization", "").upper() != "AAD":
        return None
    from azure.identity import ManagedIdentityCredential

    client_id = parts.get("ClientId")
    return ManagedIdentityCredential(client_id=client_id) if client_id else ManagedIdentityCredential()


def _azure_monitor(env: Mapping[str, str]) -> None:
    from azure.monitor.opentelemetry import configure_azure_monitor  # type: ignore[import-untyped,unused-ignore]

    options: dict[str, Any] = {"connection_string": env["APPLICATIONINSIGHTS_CONNECTION_STRING"],
                               "disable_logging": True}
    credential = _credential(env)
    if credential is not None:
        options["credential"] = credential
    configure_azure_monitor(**options)


def _sdk(chosen: str, env: Mapping[str, str]) -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import MetricExporter, PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    resource = Resource.create({"service.name": env.get("OTEL_SERVICE_NAME") or SERVICE_NAME})
    processor: SpanProcessor
    metric_exporter: MetricExporter
    if chosen == "otlp":
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        processor = BatchSpanProcessor(OTLPSpanExporter())
        metric_exporter = OTLPMetricExporter()
    else:
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        processor = SimpleSpanProcessor(ConsoleSpanExporter())
        metric_exporter = ConsoleMetricExporter()
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(processor)
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(MeterProvider(resource=resource,
                                             metric_readers=[PeriodicExportingMetricReader(metric_exporter)]))
