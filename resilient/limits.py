"""Time limits derived from the host's ``functionTimeout``, so that nothing the app does ever reaches it.

Why: on the Functions host a ``functionTimeout`` is not a polite cancellation. The host **restarts the
worker process**, killing every invocation in it: the other runs' activities (healed, but at the price of a
recovery each) and every client stream served by that worker. And a streamed HTTP response counts against
the timeout until its body is fully sent. So the app keeps every invocation below it:

* an SSE stream ends cleanly (without a terminal event) a margin before the timeout; the client reconnects
  with ``starting_after`` and misses nothing (``stream_limit_seconds``);
* a phase stops a margin before it and the run ends ``failed`` instead of the worker being killed
  (``phase_deadline_seconds``).

``functionTimeout`` is read from ``host.json`` (next to ``function_app.py``) unless the app setting
``AzureFunctionsJobHost__functionTimeout`` overrides it, as it does for the host. ``-1`` (unbounded, allowed
on Flex Consumption and Premium) lifts both limits unless they are set explicitly.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path

DEFAULT_FUNCTION_TIMEOUT_SECONDS = 30 * 60.0  # Flex Consumption's default when host.json does not say
MARGIN_SECONDS = 60.0
_TIMESPAN = re.compile(r"^(?:(\d+)\.)?(\d{1,2}):(\d{1,2})(?::(\d{1,2})(?:\.\d+)?)?$")


def parse_timespan(text: str) -> float | None:
    """A .NET TimeSpan as the host reads ``functionTimeout``: ``[d.]hh:mm[:ss]``, or a whole number of days;
    → seconds. A negative value (``-1``: minus one day) means unbounded → None."""
    value = text.strip()
    if value.startswith("-"):
        parse_timespan(value[1:])  # still has to be a TimeSpan
        return None
    if value.isdigit():
        return float(int(value) * 86400)
    match = _TIMESPAN.fullmatch(value)
    if match is None:
        raise ValueError(f"functionTimeout must be a TimeSpan ([d.]hh:mm[:ss]) or -1, got {text!r}")
    days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
    if hours > 23 or minutes > 59 or seconds > 59:
        raise ValueError(f"functionTimeout {text!r} is out of range")
    return float(((days * 24 + hours) * 60 + minutes) * 60 + seconds)


def app_root(env: Mapping[str, str]) -> Path:
    """Where ``host.json`` is: the host's script root, else the directory that holds this package."""
    root = env.get("AzureWebJobsScriptRoot")
    return Path(root) if root else Path(__file__).resolve().parent.parent


def function_timeout_seconds(env: Mapping[str, str] | None = None) -> float | None:
    """The effective ``functionTimeout`` in seconds (None = unbounded)."""
    e = os.environ if env is None else env
    raw = e.get("AzureFunctionsJobHost__functionTimeout")
    if not raw:
        try:
            raw = json.loads((app_root(e) / "host.json").read_text(encoding="utf-8")).get("functionTimeout")
        except (OSError, ValueError, AttributeError):
            raw = None
    if not raw:
        return DEFAULT_FUNCTION_TIMEOUT_SECONDS
    return parse_timespan(str(raw))


def below_timeout(explicit: str | None, timeout_seconds: float | None) -> float | None:
    """A limit that stays below the timeout: the explicit setting capped at the timeout minus a margin, or that
    cap itself when nothing (or ``0``) is set. None = no limit (unbounded timeout and nothing set)."""
    cap = None if timeout_seconds is None else max(timeout_seconds - MARGIN_SECONDS, timeout_seconds / 2)
    if explicit is not None and explicit.strip() != "":
        wanted = float(explicit)
        if wanted <= 0:
            return cap
        return wanted if cap is None else min(wanted, cap)
    return cap
