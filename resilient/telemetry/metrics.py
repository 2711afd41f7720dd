"""The app's counters, through the OpenTelemetry metrics API (no-ops until an SDK is installed).

Instruments are created once at import from the API's proxy meter: they start recording when a meter
provider is installed later (at start-up by :func:`resilient.telemetry.setup.configure`, or by a test).
"""

from __future__ import annotations

from opentelemetry import metrics

METER = metrics.get_meter("resilient")

PHASES = METER.create_counter(
    "resilient.phases", unit="{phase}",
    description="Phase (or step) activities run, by outcome (checkpointed, completed, a stop word, error).")
RECOVERIES = METER.create_counter(
    "resilient.recoveries", unit="{phase}",
    description="Phase attempts that began with a recovery reset (the log showed a crash inside the phase).")
REPAIRS = METER.create_counter(
    "resilient.repairs", unit="{run}",
    description="Runs whose dead orchestration the repair path restarted, or gave up on (action).")
UNAVAILABLE = METER.create_counter(
    "resilient.http.unavailable", unit="{response}",
    description="HTTP requests answered 503 (storage or the Durable runtime unreachable, contention), by route.")
RUNS_FINISHED = METER.create_counter(
    "resilient.runs.finished", unit="{run}",
    description="Runs that reached their terminal event, by status.")
