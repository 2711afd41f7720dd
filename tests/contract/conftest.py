"""The contract suite's app: the unmodified function_app.py under the host double, on Azurite, with a
storage prefix of its own (removed at the end) and the crash endpoint off (a fuzzer finds every route)."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from azure.data.tables import TableServiceClient
from azure.storage.blob import BlobServiceClient
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from tests import live
from tests.hostdouble.api import HostDouble

ROOT = Path(__file__).resolve().parents[2]
OPENAPI = ROOT / "docs" / "openapi.yaml"
CONNECTION = os.environ.get("AzureWebJobsStorage") or "UseDevelopmentStorage=true"


@cache
def spec() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(OPENAPI.read_text())
    return loaded


@cache
def validator(schema_name: str) -> Draft202012Validator:
    """A JSON Schema validator for ``#/components/schemas/<schema_name>`` of docs/openapi.yaml."""
    registry: Registry[Any] = Registry().with_resource(
        "urn:openapi", Resource.from_contents(spec(), default_specification=DRAFT202012))
    return Draft202012Validator({"$ref": f"urn:openapi#/components/schemas/{schema_name}"}, registry=registry)


def valid(schema_name: str, value: Any) -> bool:
    return validator(schema_name).is_valid(value)


def delete_prefix(prefix: str) -> None:
    """Remove every table and container of ``prefix`` (what the app created under it)."""
    tables = TableServiceClient.from_connection_string(CONNECTION)
    for table in tables.list_tables():
        if table.name.lower().startswith(prefix):
            tables.delete_table(table.name)
    blobs = BlobServiceClient.from_connection_string(CONNECTION)
    for container in blobs.list_containers(name_starts_with=prefix):
        blobs.delete_container(container.name)


@pytest.fixture(scope="module")
def contract_started_double() -> Iterator[HostDouble | None]:
    """The host double the module runs against, or None when ``RESILIENT_BASE_URL`` names a running host
    (which then needs RESILIENT_AGENT_DELTA_DELAY_MS=0 and RESILIENT_ENABLE_CRASH_ENDPOINT=false)."""
    if live.base_url() is not None:
        yield None
        return
    prefix = "c" + secrets.token_hex(4)
    env = {
        "AzureWebJobsStorage": CONNECTION,
        "RESILIENT_STORAGE_PREFIX": prefix,
        "RESILIENT_AGENT_DELTA_DELAY_MS": "0",
        "RESILIENT_ENABLE_CRASH_ENDPOINT": "false",
        "RESILIENT_STEERABLE_CONVERSATIONS": "true",
    }
    with HostDouble(ROOT, env=env, settings=None) as running:
        yield running
    delete_prefix(prefix)


@pytest.fixture(scope="module")
def contract_double(contract_started_double: HostDouble | None) -> HostDouble:
    """The double itself, for tests that read its counters (skipped against a running host)."""
    live.skip_if_live("it reads the double's counters")
    assert contract_started_double is not None
    return contract_started_double


@pytest.fixture(scope="module")
def contract_base_url(contract_started_double: HostDouble | None) -> str:
    return contract_started_double.base_url if contract_started_double is not None else str(live.base_url())
