"""The reliability proxy forwards to the Azurite that ``AzureWebJobsStorage`` names, on any ports."""

from __future__ import annotations

import pytest

from tests.reliability.conftest import azurite_ports


def test_development_storage_means_the_default_ports() -> None:
    assert azurite_ports("UseDevelopmentStorage=true") == {"blob": 10000, "queue": 10001, "table": 10002}


def test_explicit_endpoints_give_their_ports() -> None:
    connection = ("DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=k==;"
                  "BlobEndpoint=http://127.0.0.1:41001/devstoreaccount1;"
                  "QueueEndpoint=http://127.0.0.1:41002/devstoreaccount1;"
                  "TableEndpoint=http://127.0.0.1:41003/devstoreaccount1;")
    assert azurite_ports(connection) == {"blob": 41001, "queue": 41002, "table": 41003}


def test_an_endpoint_without_a_port_is_refused() -> None:
    with pytest.raises(ValueError, match="TableEndpoint"):
        azurite_ports("TableEndpoint=https://acct.table.core.windows.net/")
