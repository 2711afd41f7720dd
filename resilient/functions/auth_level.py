"""Who checks callers of the HTTP functions: the host, by function key, or App Service Authentication.

``RESILIENT_HTTP_AUTH_LEVEL``: ``function`` (the default: callers present a function key) or ``anonymous``
(Entra ID: Easy Auth in front of the host has already refused every request without a valid token, so a
function key on top would only make every client hold one too). infra/ sets ``anonymous`` together with
Easy Auth, never alone. Read when the worker indexes the app: a change takes effect at the next start.
``POST /ops/crash`` keeps the admin (master) key either way.
"""

from __future__ import annotations

import os

import azure.functions as func

SETTING = "RESILIENT_HTTP_AUTH_LEVEL"
HTTP_AUTH_LEVELS = {"function": func.AuthLevel.FUNCTION, "anonymous": func.AuthLevel.ANONYMOUS}


def http_auth_level() -> func.AuthLevel:
    """The configured level; an unknown value stops indexing with a message naming the allowed ones."""
    level = os.environ.get(SETTING, "function").strip().lower() or "function"
    if level not in HTTP_AUTH_LEVELS:
        raise ValueError(f"{SETTING} must be one of {sorted(HTTP_AUTH_LEVELS)}, not {level!r}")
    return HTTP_AUTH_LEVELS[level]
