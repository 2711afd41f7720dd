"""The app's spans, through the OpenTelemetry API only (no-ops until an SDK is installed).

One run is one trace: the create request's span context travels as a W3C ``traceparent`` in the
orchestration input (:data:`TRACE_PARENT_KEY`, only when a span was being recorded), the orchestrator copies
it into each activity's input, and each activity's span starts as its child. The trace context is carried in
the payload rather than left to the host because an activity runs in another invocation, often on another
instance, long after the request ended; the Functions host's own spans for that invocation (Durable
distributed tracing) are attached as a *link*, so both views stay navigable.

Attributes: ``response_id`` and ``chain_id`` on every span of a run; on a phase ``phase.index``,
``phase.position``, ``phase.is_recovery`` and ``phase.outcome``.

Cost: one span per request and per activity, never per event (the events of a phase are appended inside its
activity's span). With no tracer provider installed (no exporter configured,
:mod:`resilient.telemetry.setup`) an activity's span is not even started: no span object, no attributes, no
context switch; :func:`tracing` tells.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

# The key of a run's W3C trace context in its orchestration input and activity payloads (the orchestrator
# names the same key; tests/replay/test_trace_context.py keeps the two equal). Defined here too because the
# telemetry package sits below the engine.
TRACE_PARENT_KEY = "traceparent"

TRACER = trace.get_tracer("resilient")
_PROPAGATOR = TraceContextTextMapPropagator()

__all__ = ["TRACER", "TRACE_PARENT_KEY", "activity_span", "current_traceparent", "describe_run",
           "model_span", "request_span"]


def tracing() -> bool:
    """True when spans are recorded somewhere: a real tracer provider is installed (by
    :func:`resilient.telemetry.setup.configure`, the Functions worker, or a test). The API's default (a proxy
    until one is installed) and its no-op provider record nothing."""
    return not isinstance(trace.get_tracer_provider(), (trace.ProxyTracerProvider, trace.NoOpTracerProvider))


def current_traceparent() -> str | None:
    """The W3C ``traceparent`` of the current span, or None when no span is being recorded."""
    span = trace.get_current_span()
    if not span.is_recording():
        return None
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier.get("traceparent")


def describe_run(run_input: dict[str, Any], response_id: str, chain_id: str | None) -> None:
    """Name the run on the current (request) span, and put that span's trace context into the run's
    orchestration input so every activity of the run joins its trace (nothing is added when no span is
    recorded: an untraced app starts exactly the input it always did)."""
    span = trace.get_current_span()
    span.set_attribute("response_id", response_id)
    if chain_id:
        span.set_attribute("chain_id", chain_id)
    traceparent = current_traceparent()
    if traceparent is not None:
        run_input[TRACE_PARENT_KEY] = traceparent


@contextmanager
def request_span(route: str, response_id: str | None = None) -> Iterator[Span]:
    """The span of one HTTP request: a server span when nothing (the host) started one, else its child."""
    parent = trace.get_current_span().get_span_context()
    kind = SpanKind.INTERNAL if parent.is_valid else SpanKind.SERVER
    attributes: dict[str, str] = {"http.route": route}
    if response_id:
        attributes["response_id"] = response_id
    with TRACER.start_as_current_span(route, kind=kind, attributes=attributes) as span:
        yield span


@contextmanager
def activity_span(name: str, response_id: str, traceparent: Any = None,
                  attributes: Mapping[str, Any] | None = None) -> Iterator[Span]:
    """The span of one activity of a run, a child of the run's request span when ``traceparent`` (from the
    activity's input) names one; the invocation's own span (the host's, if any) is linked. Without
    :func:`tracing`, the API's invalid span (nothing is started, made current or recorded)."""
    if not tracing():
        yield trace.INVALID_SPAN
        return
    context = None
    links: list[Link] = []
    if isinstance(traceparent, str) and traceparent:
        context = _PROPAGATOR.extract({"traceparent": traceparent})
        ambient = trace.get_current_span().get_span_context()
        if ambient.is_valid:
            links.append(Link(ambient))
    attrs: dict[str, Any] = {"response_id": response_id, **(attributes or {})}
    with TRACER.start_as_current_span(name, context=context, links=links, attributes=attrs) as span:
        yield span


def model_span(model: str | None, provider: str) -> Span:
    """A client span for one model call (GenAI semantic conventions). Not made current: the call streams
    through an async generator, whose frames must not attach and detach context across ``yield``s. The
    caller ends it."""
    return TRACER.start_span(f"chat {model or ''}".strip(), kind=SpanKind.CLIENT, attributes={
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": provider, "gen_ai.request.model": model or ""})


def set_current(**attributes: Any) -> None:
    """Set attributes on the current span (ignored without a recording span); None values are skipped."""
    span = trace.get_current_span()
    for key, value in attributes.items():
        if value is not None:
            span.set_attribute(key, value)
