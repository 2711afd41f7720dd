"""host.json as the Functions host reads it: file values, app-setting overrides, ``%Setting%`` names, TimeSpans.

Why a module of its own: the host, the durable engine and the test API all need the same reading of
host.json, and the real host has three rules that are easy to get subtly wrong:

* an app setting ``AzureFunctionsJobHost__a__b__c`` overrides host.json's ``a.b.c`` (keys are
  case-insensitive; the value arrives as a string and is converted where it is used);
* the Durable extension resolves ``%Name%`` in ``hubName`` from app settings (its ``INameResolver``);
* TimeSpans are .NET strings (``"00:05:00"``, ``"1.02:03:04"``, ``"-1"`` = minus one day = unbounded).
"""

from __future__ import annotations

import json
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

OVERRIDE_PREFIX = "AzureFunctionsJobHost__"
_TIMESPAN = re.compile(r"^(?P<sign>-)?(?:(?P<days>\d+)\.)?(?P<h>\d{1,2}):(?P<m>\d{1,2})"
                       r"(?::(?P<s>\d{1,2})(?:\.(?P<f>\d{1,7}))?)?$")
_HUB_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9]{2,44}$")

# Defaults of the real host / Durable extension (Azure Storage backend), each checked upstream:
DEFAULT_FUNCTION_TIMEOUT = timedelta(minutes=30)  # ScriptJobHostOptionsSetup.DefaultFunctionTimeout (Flex, local)
MIN_FUNCTION_TIMEOUT = timedelta(seconds=1)  # ScriptJobHostOptionsSetup.MinFunctionTimeout
DEFAULT_VISIBILITY = timedelta(minutes=5)  # AzureStorageOptions.Control/WorkItemQueueVisibilityTimeout
DEFAULT_MAX_POLLING = timedelta(seconds=30)  # AzureStorageOptions.MaxQueuePollingInterval
DEFAULT_PARTITIONS = 4  # AzureStorageOptions.PartitionCount
LEASE_INTERVAL = timedelta(seconds=30)  # AzureStorageOrchestrationServiceSettings.LeaseInterval
LEASE_RENEW_INTERVAL = timedelta(seconds=10)  # ...LeaseRenewInterval
LEASE_ACQUIRE_INTERVAL = timedelta(seconds=10)  # ...LeaseAcquireInterval
DEFAULT_HUB = "TestHubName"  # the extension's default hub name outside Azure


class ConfigError(ValueError):
    """host.json (or an override of it) holds a value the real host would refuse at start-up."""


def parse_timespan(value: Any, setting: str) -> timedelta:
    """A .NET TimeSpan string (or a number of seconds) → ``timedelta``; ``"-1"`` is minus one day."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return timedelta(seconds=float(value))
    text = str(value).strip()
    if re.fullmatch(r"-?\d+", text):  # TimeSpan.Parse("5") is five *days*
        return timedelta(days=int(text))
    found = _TIMESPAN.match(text)
    if found is None:
        raise ConfigError(f"{setting}: {value!r} is not a TimeSpan (expected [d.]hh:mm[:ss[.fffffff]])")
    fraction = float(f"0.{found['f']}") if found["f"] else 0.0
    span = timedelta(days=int(found["days"] or 0), hours=int(found["h"]), minutes=int(found["m"]),
                     seconds=int(found["s"] or 0) + fraction)
    return -span if found["sign"] else span


def format_timespan(span: timedelta) -> str:
    """``TimeSpan.ToString()`` ("c"): ``hh:mm:ss`` with ``d.`` and ``.fffffff`` only when needed."""
    total = span.total_seconds()
    sign = "-" if total < 0 else ""
    total = abs(total)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    whole = int(seconds)
    ticks = round((seconds - whole) * 10_000_000)
    text = f"{int(hours):02d}:{int(minutes):02d}:{whole:02d}"
    if ticks:
        text += f".{ticks:07d}"
    return f"{sign}{int(days)}.{text}" if days else f"{sign}{text}"


def _set_path(tree: dict[str, Any], path: list[str], value: str) -> None:
    """Set ``tree[a][b][c] = value`` matching existing keys case-insensitively (configuration keys are)."""
    node = tree
    for part in path[:-1]:
        key = next((k for k in node if k.lower() == part.lower()), part)
        child = node.get(key)
        if not isinstance(child, dict):
            child = node[key] = {}
        node = child
    last = next((k for k in node if k.lower() == path[-1].lower()), path[-1])
    node[last] = value


def _get(tree: Mapping[str, Any], *path: str) -> Any:
    node: Any = tree
    for part in path:
        if not isinstance(node, Mapping):
            return None
        node = next((v for k, v in node.items() if k.lower() == part.lower()), None)
    return node


def read_host_json(app_dir: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """host.json of ``app_dir`` with every ``AzureFunctionsJobHost__…`` app setting applied over it."""
    env = os.environ if env is None else env
    path = Path(app_dir) / "host.json"
    tree: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    for name, value in sorted(env.items()):
        if name.lower().startswith(OVERRIDE_PREFIX.lower()) and len(name) > len(OVERRIDE_PREFIX):
            _set_path(tree, name[len(OVERRIDE_PREFIX):].split("__"), value)
    return tree


def resolve_setting_names(value: str, env: Mapping[str, str]) -> str:
    """``%Name%`` → the app setting's value, as the Durable extension resolves ``hubName``.

    Upstream (azure-functions-durable-extension, ``DurableTaskOptions.ResolveAppSettingOptions``) calls the
    WebJobs SDK's ``INameResolver.TryResolveWholeString``: all or nothing. If any ``%Name%`` has no setting
    (or a ``%`` is unclosed) it fails and ``hubName`` keeps its literal text, which
    ``AzureStorageOptions.ValidateHubName`` then refuses at start-up. A setting set to ``""`` resolves.
    """
    names = re.findall(r"%([^%]*)%", value)
    if value.count("%") % 2 or any(env.get(name) is None for name in names):
        return value
    return re.sub(r"%([^%]*)%", lambda m: env[m.group(1)], value)


def _bool(value: Any, default: bool) -> bool:
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() == "true"


@dataclass(frozen=True)
class DurableConfig:
    """``extensions.durableTask`` of host.json, Azure Storage backend, as the double uses it."""

    hub_name: str
    partition_count: int = DEFAULT_PARTITIONS
    control_visibility: timedelta = DEFAULT_VISIBILITY
    work_item_visibility: timedelta = DEFAULT_VISIBILITY
    max_polling_interval: timedelta = DEFAULT_MAX_POLLING
    lease_interval: timedelta = LEASE_INTERVAL
    lease_renew_interval: timedelta = LEASE_RENEW_INTERVAL
    lease_acquire_interval: timedelta = LEASE_ACQUIRE_INTERVAL
    worker_id: str = field(default_factory=socket.gethostname)
    # extensions.durableTask.maxConcurrentActivityFunctions (DurableTaskOptions: 10 × the processor count)
    max_activities: int = field(default_factory=lambda: 10 * (os.cpu_count() or 1))


@dataclass(frozen=True)
class HostConfig:
    """What the double takes from host.json and the app settings."""

    route_prefix: str
    function_timeout: timedelta | None  # None = unbounded ("-1")
    durable: DurableConfig
    host_id: str


def durable_config(tree: Mapping[str, Any], env: Mapping[str, str]) -> DurableConfig:
    section = _get(tree, "extensions", "durableTask") or {}
    storage = _get(section, "storageProvider") or {}
    raw_hub = _get(section, "hubName")
    hub = resolve_setting_names(str(raw_hub), env) if raw_hub else DEFAULT_HUB
    if not _HUB_NAME.match(hub):
        unset = [name for name in re.findall(r"%([^%]*)%", hub) if env.get(name) is None]
        hint = f" (app setting {', '.join(unset)} is not set)" if unset else ""
        raise ConfigError(f"extensions.durableTask.hubName: {hub!r} is not a valid task hub name (3-45 letters or "
                          f"digits, starting with a letter){hint}")
    partitions = int(_get(storage, "partitionCount") or DEFAULT_PARTITIONS)
    if not 1 <= partitions <= 16:
        raise ConfigError(f"storageProvider.partitionCount must be 1..16, not {partitions}")

    def span(name: str, default: timedelta) -> timedelta:
        value = _get(storage, name)
        return default if value is None else parse_timespan(value, f"storageProvider.{name}")

    # WorkerId: the machine name, or "<stamp>:<role instance>" on App Service (AzureStorageDurabilityProviderFactory).
    stamp, role = env.get("WEBSITE_CURRENT_STAMPNAME"), env.get("RoleInstanceId")
    worker_id = f"{stamp}:{role}" if stamp and role else socket.gethostname()
    lease, renew, acquire = lease_timings(env)
    raw_activities = _get(section, "maxConcurrentActivityFunctions")
    max_activities = 10 * (os.cpu_count() or 1) if raw_activities is None else int(raw_activities)
    if max_activities < 1:
        raise ConfigError(f"durableTask.maxConcurrentActivityFunctions must be at least 1, not {max_activities}")
    return DurableConfig(
        hub_name=hub, partition_count=partitions, max_activities=max_activities,
        control_visibility=span("controlQueueVisibilityTimeout", DEFAULT_VISIBILITY),
        work_item_visibility=span("workItemQueueVisibilityTimeout", DEFAULT_VISIBILITY),
        max_polling_interval=max(span("maxQueuePollingInterval", DEFAULT_MAX_POLLING), timedelta(milliseconds=50)),
        worker_id=worker_id, lease_interval=lease, lease_renew_interval=renew, lease_acquire_interval=acquire,
    )


LEASE_TIMINGS_SETTING = "HOSTDOUBLE_LEASE_TIMINGS"


def lease_timings(env: Mapping[str, str]) -> tuple[timedelta, timedelta, timedelta]:
    """The partition leases' timings: DTFx's defaults (30 s lease, renewed every 10 s, acquire/balance every
    10 s), unless ``HOSTDOUBLE_LEASE_TIMINGS="<lease>,<renew>,<acquire>"`` (seconds) shortens them. That is
    the double's own option for time-bound tests, not a host setting (DTFx takes them from
    ``AzureStorageOrchestrationServiceSettings``, which the extension does not expose). A blob lease lasts
    15 to 60 s (Azure Storage's bounds), and the renewal must come well within it."""
    raw = env.get(LEASE_TIMINGS_SETTING, "").strip()
    if not raw:
        return LEASE_INTERVAL, LEASE_RENEW_INTERVAL, LEASE_ACQUIRE_INTERVAL
    try:
        lease, renew, acquire = (float(part) for part in raw.split(","))
    except ValueError:
        raise ConfigError(f"{LEASE_TIMINGS_SETTING} must be '<lease>,<renew>,<acquire>' seconds, not {raw!r}") from None
    if not 15 <= lease <= 60 or not 0 < renew <= lease / 2 or acquire <= 0:
        raise ConfigError(f"{LEASE_TIMINGS_SETTING}: the lease must last 15-60 s, renewed within half of it, "
                          f"acquired at a positive interval, not {raw!r}")
    return timedelta(seconds=lease), timedelta(seconds=renew), timedelta(seconds=acquire)


def function_timeout(tree: Mapping[str, Any]) -> timedelta | None:
    """``functionTimeout``: default 30 min (Flex Consumption, local); ``-1`` = unbounded; at least 1 s."""
    value = _get(tree, "functionTimeout")
    if value is None:
        return DEFAULT_FUNCTION_TIMEOUT
    span = parse_timespan(value, "functionTimeout")
    if span == timedelta(days=-1):
        return None
    if span < MIN_FUNCTION_TIMEOUT:
        raise ConfigError(f"functionTimeout must be greater than 00:00:01, not {value!r}")
    return span


def host_id(env: Mapping[str, str]) -> str:
    """The host id (``AzureFunctionsWebHost__hostid``, else derived from the machine name like the host does)."""
    explicit = env.get("AzureFunctionsWebHost__hostid") or env.get("AzureFunctionsWebHost__hostId")
    raw = explicit or env.get("WEBSITE_SITE_NAME") or socket.gethostname()
    cleaned = re.sub(r"[^a-z0-9-]", "", raw.lower()).strip("-")
    return (cleaned or "localhost")[:32].rstrip("-")


def load(app_dir: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> HostConfig:
    env = os.environ if env is None else env
    tree = read_host_json(app_dir, env)
    prefix = _get(tree, "extensions", "http", "routePrefix")
    return HostConfig(
        route_prefix=("api" if prefix is None else str(prefix)).strip("/"),
        function_timeout=function_timeout(tree),
        durable=durable_config(tree, env),
        host_id=host_id(env),
    )
