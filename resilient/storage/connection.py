"""Storage clients from :class:`~resilient.settings.Settings`, their retry policy, and error mapping.

Why here: every store needs the same two aio service clients (Tables, Blobs), configured once with
the SDKs' own retry policies, and the same translation of transport faults into
:class:`~resilient.storage.errors.StorageUnavailable` (the HTTP layer answers 503 + Retry-After).
No store runs its own retry loop for transport faults: the SDK pipeline already retries, with
backoff, and only then raises.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

from azure.core.exceptions import (
    HttpResponseError,
    ResourceExistsError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.core.pipeline.policies import RetryMode
from azure.data.tables.aio import TableClient, TableServiceClient
from azure.storage.blob.aio import BlobServiceClient, ContainerClient, ExponentialRetry

from resilient.settings import Settings
from resilient.storage.errors import StorageUnavailable

# Statuses that mean "the service is (temporarily) not able to answer", surfaced after the SDK retried.
_UNAVAILABLE_STATUSES = frozenset({408, 429})


@dataclass(frozen=True)
class RetryConfig:
    """SDK retry and timeout knobs.

    Defaults bridge a few seconds of outage (backoff 0.25, 0.5, 1, 2, 2 s ≈ 6 s in total) without
    letting a dead endpoint hang a caller for minutes (the SDK defaults wait up to ~1 min per call).
    """

    total: int = 5
    backoff_s: float = 0.25
    backoff_max_s: float = 2.0
    connection_timeout_s: float = 3.0
    read_timeout_s: float = 15.0


class _BoundedExponentialRetry(ExponentialRetry):
    """The Blob SDK's exponential retry with a sub-second start and a cap.

    Why a subclass: ``ExponentialRetry`` only takes whole seconds and grows without bound
    (``initial + base**n``); we want 0.25 s, 0.5 s, 1 s, ... capped, like the Tables policy.
    """

    def __init__(self, config: RetryConfig) -> None:
        super().__init__(
            retry_total=config.total,
            retry_to_secondary=False,
            retry_connect=config.total,
            retry_read=config.total,
            retry_status=config.total,
        )
        self._config = config

    def get_backoff_time(self, settings: dict[str, Any]) -> float:
        count = int(settings.get("count", 0))
        backoff = min(self._config.backoff_max_s, self._config.backoff_s * (2.0**count))
        return backoff * random.uniform(0.8, 1.2)


def table_name(prefix: str, kind: str) -> str:
    """``<prefix><kind>`` (Table names are alphanumeric, so no separator)."""
    return f"{prefix}{kind}"


def container_name(prefix: str, kind: str) -> str:
    """``<prefix>-<kind>`` (container names allow dashes)."""
    return f"{prefix}-{kind}"


def is_unavailable(error: BaseException) -> bool:
    """True for faults that mean "storage is unreachable or overloaded", after the SDK's retries."""
    if isinstance(error, ServiceRequestError | ServiceResponseError):
        return True
    if isinstance(error, HttpResponseError):
        status = error.status_code
        return status is not None and (status >= 500 or status in _UNAVAILABLE_STATUSES)
    return False


@contextmanager
def storage_errors() -> Iterator[None]:
    """Translate transport faults into :class:`StorageUnavailable`; let everything else through."""
    try:
        yield
    except (ServiceRequestError, ServiceResponseError, HttpResponseError) as error:
        if is_unavailable(error):
            raise StorageUnavailable(f"storage unavailable: {type(error).__name__}: {error}") from error
        raise


def translate_errors[**P, T](fn: Callable[P, Awaitable[T]]) -> Callable[P, Coroutine[Any, Any, T]]:
    """Decorator form of :func:`storage_errors` for every public store method."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        with storage_errors():
            return await fn(*args, **kwargs)

    return wrapper


class StorageClients:
    """The aio Table and Blob service clients for one storage account, plus resource names.

    Connection string (Azurite's ``UseDevelopmentStorage=true`` or an account key) when set;
    otherwise identity-based: service URIs from settings (or derived from the account name) with
    ``DefaultAzureCredential`` (user-assigned managed identity when a client id is configured).
    """

    def __init__(self, settings: Settings, *, retry: RetryConfig | None = None) -> None:
        self.settings = settings
        self.retry = retry or RetryConfig()
        self.prefix = settings.storage_prefix
        self._credential: Any = None
        table_kwargs = self._table_kwargs(self.retry)
        blob_kwargs: dict[str, Any] = {
            "retry_policy": _BoundedExponentialRetry(self.retry),
            "connection_timeout": self.retry.connection_timeout_s,
            "read_timeout": self.retry.read_timeout_s,
        }
        # aiohttp's trust_env makes every request look up proxy variables and ~/.netrc (in a thread pool), a
        # cost paid per storage call for a setting few deployments need. Opt in with RESILIENT_STORAGE_TRUST_ENV.
        table_kwargs["use_env_settings"] = blob_kwargs["use_env_settings"] = settings.storage_trust_env
        conn = settings.storage_connection_string
        if conn:
            self.tables = TableServiceClient.from_connection_string(conn, **table_kwargs)
            self.blobs = BlobServiceClient.from_connection_string(conn, **blob_kwargs)
            return
        blob_uri, table_uri = self._service_uris(settings)
        from azure.identity.aio import DefaultAzureCredential

        self._credential = DefaultAzureCredential(managed_identity_client_id=settings.managed_identity_client_id)
        self.tables = TableServiceClient(endpoint=table_uri, credential=self._credential, **table_kwargs)
        self.blobs = BlobServiceClient(account_url=blob_uri, credential=self._credential, **blob_kwargs)

    @staticmethod
    def _table_kwargs(retry: RetryConfig) -> dict[str, Any]:
        return {
            "retry_total": retry.total,
            "retry_connect": retry.total,
            "retry_read": retry.total,
            "retry_status": retry.total,
            "retry_backoff_factor": retry.backoff_s,
            "retry_backoff_max": retry.backoff_max_s,
            "retry_mode": RetryMode.Exponential,
            "connection_timeout": retry.connection_timeout_s,
            "read_timeout": retry.read_timeout_s,
        }

    @staticmethod
    def _service_uris(settings: Settings) -> tuple[str, str]:
        account = settings.storage_account_name
        blob_uri = settings.blob_service_uri or (f"https://{account}.blob.core.windows.net" if account else None)
        table_uri = settings.table_service_uri or (f"https://{account}.table.core.windows.net" if account else None)
        if not blob_uri or not table_uri:
            raise ValueError(
                "storage is not configured: set AzureWebJobsStorage, or AzureWebJobsStorage__accountName, "
                "or both AzureWebJobsStorage__blobServiceUri and AzureWebJobsStorage__tableServiceUri"
            )
        return blob_uri, table_uri

    # -- resource names and clients -------------------------------------------------------------
    @property
    def responses_table_name(self) -> str:
        return table_name(self.prefix, "responses")

    @property
    def items_table_name(self) -> str:
        return table_name(self.prefix, "items")

    @property
    def chains_table_name(self) -> str:
        return table_name(self.prefix, "chains")

    @property
    def active_table_name(self) -> str:
        return table_name(self.prefix, "active")

    @property
    def events_container_name(self) -> str:
        return container_name(self.prefix, "events")

    @property
    def spill_container_name(self) -> str:
        return container_name(self.prefix, "spill")

    def table(self, name: str) -> TableClient:
        return self.tables.get_table_client(name)

    def container(self, name: str) -> ContainerClient:
        return self.blobs.get_container_client(name)

    @property
    def table_names(self) -> tuple[str, ...]:
        return (self.responses_table_name, self.items_table_name, self.chains_table_name, self.active_table_name)

    @property
    def container_names(self) -> tuple[str, ...]:
        return (self.events_container_name, self.spill_container_name)

    @translate_errors
    async def ensure_created(self) -> None:
        """Create the tables and containers if absent (409 = someone else did, which is fine)."""
        for name in self.table_names:
            with suppress(ResourceExistsError):
                await self.tables.create_table(name)
        for name in self.container_names:
            with suppress(ResourceExistsError):
                await self.blobs.create_container(name)

    @translate_errors
    async def delete_all(self) -> None:
        """Delete every table and container of this prefix (test teardown; absent is fine)."""
        for name in self.table_names:
            with suppress(ResourceNotFoundError):
                await self.tables.delete_table(name)
        for name in self.container_names:
            with suppress(ResourceNotFoundError):
                await self.blobs.delete_container(name)

    # -- lifetime ---------------------------------------------------------------------------------
    async def close(self) -> None:
        """Close both transports (and the credential, when we created one)."""
        await self.tables.close()
        await self.blobs.close()
        if self._credential is not None:
            await self._credential.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
