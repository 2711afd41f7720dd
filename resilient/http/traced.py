"""One span per HTTP request, and the count of 503 answers, around :func:`resilient.http.results.guarded`.

Kept apart from the endpoints so each route only names itself: ``await traced("POST /responses",
handle())``. The span covers the handler up to the response head (a stream's body is sent after it
ends; the run it started has spans of its own in the same trace). A request that makes a response
names it on this span (``response_id``, ``chain_id``; see :func:`resilient.telemetry.spans.describe_run`).
"""

from __future__ import annotations

from collections.abc import Awaitable

from opentelemetry.trace import Status, StatusCode

from resilient.http.results import HttpResult, guarded
from resilient.telemetry import metrics, spans


async def traced(route: str, call: Awaitable[HttpResult], response_id: str | None = None) -> HttpResult:
    """``guarded(call)`` inside the request's span; a 503 is counted (``resilient.http.unavailable``)."""
    with spans.request_span(route, response_id) as span:
        result = await guarded(call)
        span.set_attribute("http.response.status_code", result.status)
        if result.status >= 500:
            span.set_status(Status(StatusCode.ERROR))
        if result.status == 503:
            metrics.UNAVAILABLE.add(1, {"http.route": route})
        return result
