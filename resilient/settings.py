"""App settings, read from the environment (the Functions host loads ``local.settings.json`` Values
into the environment; so does the host double).

Why one frozen object: every module gets the same, validated view, and tests build their own.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from resilient.limits import below_timeout, function_timeout_seconds

_PREFIX = re.compile(r"^[a-z][a-z0-9]{2,23}$")


def _flag(value: str | None, default: bool) -> bool:
    if value is None or value.strip() == "":
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def _int(value: str | None, default: int) -> int:
    if value is None or value.strip() == "":
        return default
    return int(value)


def _float(value: str | None, default: float) -> float:
    if value is None or value.strip() == "":
        return default
    return float(value)


MAX_APPEND_WINDOW_MS = 5000


def _append_window_ms(value: str | None) -> int:
    window = _int(value, 200)
    if not 0 <= window <= MAX_APPEND_WINDOW_MS:
        raise ValueError(f"RESILIENT_APPEND_WINDOW_MS must be 0..{MAX_APPEND_WINDOW_MS}")
    return window


CONTROL_INTERVAL_MS_RANGE = (20, 10_000)


def _control_interval_ms(value: str | None) -> int:
    interval = _int(value, 1000)
    low, high = CONTROL_INTERVAL_MS_RANGE
    if not low <= interval <= high:
        raise ValueError(f"RESILIENT_CONTROL_INTERVAL_MS must be {low}..{high}")
    return interval


MODEL_APIS = ("chat", "responses")


def _model_api(value: str | None) -> str:
    """Which API of the model the sample agent calls: ``chat`` (Chat Completions, every endpoint serves it)
    or ``responses`` (the Responses API: the model gets reasoning items back, with their encrypted content)."""
    api = (value or "chat").strip().lower()
    if api not in MODEL_APIS:
        raise ValueError(f"RESILIENT_MODEL_API must be one of {', '.join(MODEL_APIS)}, got {value!r}")
    return api


@dataclass(frozen=True)
class Settings:
    # Storage: either a connection string (Azurite / keys) or identity-based service URIs.
    storage_connection_string: str | None
    storage_account_name: str | None
    blob_service_uri: str | None
    table_service_uri: str | None
    managed_identity_client_id: str | None
    # Use HTTP(S)_PROXY / .netrc from the environment for storage calls (off: they cost CPU per request).
    storage_trust_env: bool
    # Naming: tables "<prefix>responses", "<prefix>items", "<prefix>chains"; containers "<prefix>-events", ...
    storage_prefix: str
    # Behaviour
    steerable_conversations: bool
    enable_crash_endpoint: bool
    agent_delta_delay_ms: int
    replay_retention_minutes: int
    # store=false: how long a finished run waits for its client to report it done before it is deleted anyway
    unstored_grace_seconds: int
    # Hot path: a streaming phase's appends start at least this far apart (latency vs. storage calls).
    append_window_ms: int
    # A running phase reads the control columns when its newest snapshot is this old (cross-instance
    # cancel/steer latency vs. storage calls); changes handled by the same process arrive at once.
    control_interval_ms: int
    # Optional model
    azure_openai_endpoint: str | None
    azure_openai_deployment: str | None
    azure_openai_api_key: str | None
    azure_openai_api_version: str
    model_client_id: str | None = None
    model_timeout_seconds: float = 60.0
    model_max_retries: int = 2
    model_token_scope: str = "https://cognitiveservices.azure.com/.default"
    model_api: str = "chat"  # see _model_api
    # Time limits below the host's functionTimeout (see resilient/limits.py); None = unbounded.
    function_timeout_seconds: float | None = None
    stream_limit_seconds: float | None = None
    phase_deadline_seconds: float | None = None
    # Repair of runs whose orchestration died (see resilient/engine/heal/repair.py).
    repair_grace_seconds: float = 60.0
    repair_check_seconds: float = 10.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        e = os.environ if env is None else env
        prefix = (e.get("RESILIENT_STORAGE_PREFIX") or "resilient").lower()
        if not _PREFIX.fullmatch(prefix):
            raise ValueError("RESILIENT_STORAGE_PREFIX must be 3-24 lowercase letters/digits, starting with a letter")
        conn = e.get("AzureWebJobsStorage") or None
        timeout = function_timeout_seconds(e)
        return cls(
            storage_connection_string=conn,
            storage_account_name=e.get("AzureWebJobsStorage__accountName") or None,
            blob_service_uri=e.get("AzureWebJobsStorage__blobServiceUri") or None,
            table_service_uri=e.get("AzureWebJobsStorage__tableServiceUri") or None,
            managed_identity_client_id=e.get("AzureWebJobsStorage__clientId") or None,
            storage_trust_env=_flag(e.get("RESILIENT_STORAGE_TRUST_ENV"), False),
            storage_prefix=prefix,
            steerable_conversations=_flag(e.get("RESILIENT_STEERABLE_CONVERSATIONS"), True),
            enable_crash_endpoint=_flag(e.get("RESILIENT_ENABLE_CRASH_ENDPOINT"), False),
            agent_delta_delay_ms=_int(e.get("RESILIENT_AGENT_DELTA_DELAY_MS"), 40),
            replay_retention_minutes=_int(e.get("RESILIENT_REPLAY_RETENTION_MINUTES"), 7 * 24 * 60),
            unstored_grace_seconds=max(1, _int(e.get("RESILIENT_UNSTORED_GRACE_SECONDS"), 120)),
            append_window_ms=_append_window_ms(e.get("RESILIENT_APPEND_WINDOW_MS")),
            control_interval_ms=_control_interval_ms(e.get("RESILIENT_CONTROL_INTERVAL_MS")),
            azure_openai_endpoint=e.get("AZURE_OPENAI_ENDPOINT") or None,
            azure_openai_deployment=e.get("AZURE_OPENAI_DEPLOYMENT") or None,
            azure_openai_api_key=e.get("AZURE_OPENAI_API_KEY") or None,
            azure_openai_api_version=e.get("AZURE_OPENAI_API_VERSION") or "2024-10-21",
            model_client_id=e.get("AZURE_OPENAI_CLIENT_ID") or e.get("AzureWebJobsStorage__clientId") or None,
            model_timeout_seconds=float(e.get("RESILIENT_MODEL_TIMEOUT_SECONDS") or 60),
            model_max_retries=_int(e.get("RESILIENT_MODEL_MAX_RETRIES"), 2),
            model_token_scope=e.get("AZURE_OPENAI_TOKEN_SCOPE") or "https://cognitiveservices.azure.com/.default",
            model_api=_model_api(e.get("RESILIENT_MODEL_API")),
            function_timeout_seconds=timeout,
            stream_limit_seconds=below_timeout(e.get("RESILIENT_STREAM_MAX_SECONDS"), timeout),
            phase_deadline_seconds=below_timeout(e.get("RESILIENT_PHASE_DEADLINE_SECONDS"), timeout),
            repair_grace_seconds=_float(e.get("RESILIENT_REPAIR_GRACE_SECONDS"), 60.0),
            repair_check_seconds=_float(e.get("RESILIENT_REPAIR_CHECK_SECONDS"), 10.0),
        )
