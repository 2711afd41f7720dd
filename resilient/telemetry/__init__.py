"""Traces and metrics: what the app emits through the OpenTelemetry *API*, and where it goes.

Product code only uses ``opentelemetry-api`` (:mod:`resilient.telemetry.spans`,
:mod:`resilient.telemetry.metrics`): with nothing configured, its tracer and meter are no-ops and no SDK
is loaded, so a cold worker pays nothing (the API itself is already imported by the HTTP stack).
:func:`resilient.telemetry.setup.configure`, called once when the app is indexed, installs an SDK and an
exporter only when an app setting asks for one (see docs/OPERATIONS.md, "Observability").
"""
