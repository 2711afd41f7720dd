"""The Durable SDK's history timestamps parsed by the standard library instead of ``dateutil``.

Why: the SDK builds a ``HistoryEvent`` for every event of the history on every orchestrator episode and
parses its ``Timestamp`` with ``dateutil.parser.parse``, about 130 µs each here. An episode replays the
whole history, so this was most of the SDK's time in the worker: ``bench/replay_cost.py`` measures a
3-phase run's replays at 2.6x less CPU with this (docs/PERFORMANCE.md). The host sends .NET round-trip timestamps
(``2026-12-01T23:18:26.1234567Z``), which ``datetime.fromisoformat`` parses to the same value (same
instant, same offset, the same truncation to microseconds) in under a microsecond. Any other text, or a
call with parser options, still goes to ``dateutil``; ``tests/unit/test_durable_timestamps.py`` checks the
two agree on every round-trip form.

The SDK's modules import ``dateutil``'s ``parse`` under the name ``dt_parse``; :func:`install` points that
name at :func:`parse_timestamp`. It runs when the SDK is first loaded (``durable_bindings``); episodes on
other threads may see either parser meanwhile, which is harmless since both give the same values.
"""

from __future__ import annotations

import importlib
import logging
import re
from datetime import datetime
from typing import Any

log = logging.getLogger("resilient.functions")

SDK_MODULES = ("azure.durable_functions.models.history.HistoryEvent",
               "azure.durable_functions.models.DurableOrchestrationStatus")
# Date, time, optional fraction, optional "Z" or offset: what .NET's "o" format and Newtonsoft emit.
ROUND_TRIP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})?")


def parse_timestamp(text: Any, *args: Any, **kwargs: Any) -> datetime:
    """``dateutil.parser.parse``, answered by ``datetime.fromisoformat`` for round-trip timestamps."""
    if not args and not kwargs and isinstance(text, str) and ROUND_TRIP.fullmatch(text):
        return datetime.fromisoformat(text)
    from dateutil.parser import parse  # type: ignore[import-untyped]  # the SDK's dependency, no stubs

    parsed: datetime = parse(text, *args, **kwargs)
    return parsed


def install() -> None:
    """Make the SDK's history events and status objects parse timestamps with :func:`parse_timestamp`."""
    for name in SDK_MODULES:
        module = importlib.import_module(name)  # the module: its package re-exports a class of the same name
        if not callable(getattr(module, "dt_parse", None)):  # another SDK version: keep its own parser
            log.warning("%s has no dt_parse: its timestamps stay with the SDK's own parser", name)
            continue
        vars(module)["dt_parse"] = parse_timestamp
