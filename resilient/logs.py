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
DURABLE_CONVERTER_LOGGER = "azure.functions.DurableFunctions"
NO_EXPECTED_TYPE_NOTICE = "azure.functions df_loads was called without expected_type"


class NoExpectedTypeNoticeFilter(logging.Filter):
    """Drops the ``df_loads ... without expected_type`` advisory of ``azure-functions``.

    It is logged once per worker process when the worker decodes the first activity input: the worker's
    ``ActivityTriggerConverter.decode`` calls ``df_loads`` without a type, because the worker does not hand
    the activity's parameter type to converters. No app code can pass it, so the notice only adds noise
    to every run. Every other record of that logger passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(NO_EXPECTED_TYPE_NOTICE)


def install() -> None:
    """Attach the filter to the package's loggers (idempotent), quiet the Azure SDK's per-request INFO
    logging (request and response headers for every storage call: cost and noise in App Insights), and
    drop the converter's one-time typing advisory (see :class:`NoExpectedTypeNoticeFilter`)."""
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    converter = logging.getLogger(DURABLE_CONVERTER_LOGGER)
    if not any(isinstance(f, NoExpectedTypeNoticeFilter) for f in converter.filters):
        converter.addFilter(NoExpectedTypeNoticeFilter())
    for name in ("resilient.engine", "resilient.http", "resilient.retention", "resilient.repair"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, ContextFilter) for f in logger.filters):
            logger.addFilter(ContextFilter())
