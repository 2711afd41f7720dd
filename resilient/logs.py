"""Structured context on every log line: response id, chain id, phase (and a few counters).

Code logs with ``log.info("phase done", extra={"response_id": ..., "phase": ...})``. The Functions host
forwards the *message* of each record to Application Insights as a trace, so the filter below appends the
known context keys to the message as ``key=value`` pairs: they are then searchable in App Insights
(``traces | where message has "response_id=resp_…"``) and readable in ``func start`` output alike.
"""

from __future__ import annotations

import logging

CONTEXT_KEYS = ("response_id", "chain_id", "phase", "phases", "status", "chars", "storage_calls", "purged",
                "background", "stream", "found", "repair", "checked", "repaired")


class ContextFilter(logging.Filter):
    """Appends ``key=value`` for every context key present on the record (once per record)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "_resilient_context", False):
            return True
        pairs = [f"{key}={getattr(record, key)}" for key in CONTEXT_KEYS if hasattr(record, key)]
        if pairs:
            record.msg = f"{record.getMessage()} | {' '.join(pairs)}"
            record.args = None
        record._resilient_context = True
        return True


NOISY_LOGGERS = ("azure.core.pipeline.policies.http_logging_policy", "azure.identity", "aiohttp.access")


def install() -> None:
    """Attach the filter to the package's loggers (idempotent), and quiet the Azure SDK's per-request
    INFO logging (request and response headers for every storage call: cost and noise in App Insights)."""
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    for name in ("resilient.engine", "resilient.http", "resilient.retention", "resilient.repair"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, ContextFilter) for f in logger.filters):
            logger.addFilter(ContextFilter())
