"""In-memory OpenTelemetry for tests: one SDK tracer and meter provider per test process, installed on
first use (the API allows one global provider per process), with an in-memory span exporter and metric
reader. Counters are cumulative: tests compare a value before and after what they do."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

_kit: tuple[InMemorySpanExporter, InMemoryMetricReader] | None = None


def memory() -> tuple[InMemorySpanExporter, InMemoryMetricReader]:
    """The process's in-memory exporter and reader (installing the providers the first time)."""
    global _kit
    if _kit is not None:
        return _kit
    spans = InMemorySpanExporter()
    tracer_provider = trace.get_tracer_provider()
    if not isinstance(tracer_provider, TracerProvider):
        tracer_provider = TracerProvider()
        trace.set_tracer_provider(tracer_provider)
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    if type(metrics.get_meter_provider()).__name__ not in ("_ProxyMeterProvider", "NoOpMeterProvider"):
        pytest.skip("another meter provider is installed in this process")
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    _kit = (spans, reader)
    return _kit


def counter(reader: InMemoryMetricReader, name: str, **attributes: Any) -> float:
    """The cumulative value of counter ``name`` over the points whose attributes include ``attributes``."""
    data = reader.get_metrics_data()
    total = 0.0
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name != name:
                    continue
                for point in metric.data.data_points:
                    if all(point.attributes.get(k) == v for k, v in attributes.items()):
                        total += point.value
    return total


def of_run(spans: InMemorySpanExporter, response_id: str) -> list[ReadableSpan]:
    return [s for s in spans.get_finished_spans() if (s.attributes or {}).get("response_id") == response_id]
