"""StorageClients configuration: identity-based endpoints are derived without any network call."""

from __future__ import annotations

import pytest

from resilient.settings import Settings
from resilient.storage.connection import StorageClients

pytestmark = pytest.mark.azurite


async def test_identity_endpoints_from_account_name() -> None:
    settings = Settings.from_env(
        {"AzureWebJobsStorage__accountName": "acct1", "AzureWebJobsStorage__clientId": "00000000-0000-0000-0000-1"}
    )
    async with StorageClients(settings) as clients:
        assert clients.blobs.url.startswith("https://acct1.blob.core.windows.net")
        assert clients.tables.url.startswith("https://acct1.table.core.windows.net")
        assert clients.events_container_name == "resilient-events"
        assert clients.responses_table_name == "resilientresponses"


async def test_identity_endpoints_from_explicit_uris() -> None:
    settings = Settings.from_env(
        {
            "AzureWebJobsStorage__blobServiceUri": "https://b.example.net",
            "AzureWebJobsStorage__tableServiceUri": "https://t.example.net",
            "RESILIENT_STORAGE_PREFIX": "abc1",
        }
    )
    async with StorageClients(settings) as clients:
        assert clients.blobs.url.startswith("https://b.example.net")
        assert clients.tables.url.startswith("https://t.example.net")
        assert clients.spill_container_name == "abc1-spill" and clients.items_table_name == "abc1items"


def test_missing_configuration_is_an_error() -> None:
    with pytest.raises(ValueError):
        StorageClients(Settings.from_env({}))
