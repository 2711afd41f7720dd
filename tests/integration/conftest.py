"""Fixtures for the storage integration tests: against the running Azurite emulator, in memory, or both.

Every session uses its own ``storage_prefix`` (``t`` + 8 random characters), so runs never collide
and the session's tables and containers are removed at the end.

Which adapter a test's ``storage`` fixture is: a module sets ``STORAGE_ADAPTERS`` (default
``("azurite",)``); a test narrows it with ``@pytest.mark.adapters("azurite")``. A test with two adapters
runs once on each (``test_x[azurite]``, ``test_x[memory]``): that is how the storage contract tests hold
the in-memory adapter to the Azurite one. Tests that read Azure internals (round-trip counts, spill blobs,
raw table rows) or wire faults stay ``azurite`` only.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import string
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from resilient.ids import new_response_id
from resilient.settings import Settings
from resilient.storage.connection import RetryConfig, StorageClients
from resilient.storage.controls import ControlBoard
from resilient.storage.factory import Storage, build_storage, open_storage
from resilient.storage.feed import CommittedFeed
from tests.memory_storage import MemoryBackend, build_memory_storage, storage_over

_ALPHABET = string.ascii_lowercase + string.digits
CONNECTION = os.environ.get("AzureWebJobsStorage") or "UseDevelopmentStorage=true"
# Azurite's well-known development account key (public, documented).
DEV_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
FAST_FAIL = RetryConfig(total=2, backoff_s=0.05, backoff_max_s=0.1, connection_timeout_s=1.0, read_timeout_s=1.0)


def unique_prefix() -> str:
    return "t" + "".join(secrets.choice(_ALPHABET) for _ in range(8))


def rebuilt(storage: Storage) -> Storage:
    """Stores built again over the same clients or backend, reporting to the same feed and control board
    (another engine or service of the same worker: no kept writers of its own yet)."""
    return storage_over(storage.clients, feed=storage.feed, controls=storage.controls)


async def new_conversation(storage: Storage) -> str:
    """A conversation as ``POST /conversations`` creates it: a turn's ``conversation`` must name one."""
    from resilient.engine.chain import conversations

    return (await conversations.create(storage, {}, [])).conversation_id


def unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def dead_settings(prefix: str) -> Settings:
    """Settings whose blob and table endpoints are a closed port on loopback."""
    port = unused_port()
    conn = (
        f"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={DEV_KEY};"
        f"BlobEndpoint=http://127.0.0.1:{port}/devstoreaccount1;"
        f"TableEndpoint=http://127.0.0.1:{port}/devstoreaccount1"
    )
    return Settings.from_env({"AzureWebJobsStorage": conn, "RESILIENT_STORAGE_PREFIX": prefix})


@pytest.fixture(scope="session")
def settings() -> Settings:
    return Settings.from_env({"AzureWebJobsStorage": CONNECTION, "RESILIENT_STORAGE_PREFIX": unique_prefix()})


ADAPTERS = ("azurite", "memory")


def adapters_for(node: Any, module: Any) -> tuple[str, ...]:
    """The adapters a test runs on: its ``adapters`` mark, else its module's ``STORAGE_ADAPTERS``."""
    mark = node.get_closest_marker("adapters") if hasattr(node, "get_closest_marker") else None
    chosen = tuple(mark.args) if mark is not None else tuple(getattr(module, "STORAGE_ADAPTERS", ("azurite",)))
    unknown = set(chosen) - set(ADAPTERS)
    if unknown or not chosen:
        raise ValueError(f"unknown storage adapters {sorted(unknown)} (known: {ADAPTERS})")
    return chosen


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "storage_adapter" in metafunc.fixturenames:
        names = adapters_for(metafunc.definition, metafunc.module)
        metafunc.parametrize("storage_adapter", names, ids=list(names), scope="session")


@contextlib.asynccontextmanager
async def stores_for(adapter: str, settings: Settings) -> AsyncIterator[Storage]:
    """The stores of ``adapter``: in memory over a backend of their own, or on Azurite under ``settings``'s
    prefix (its tables and containers removed at the end)."""
    if adapter == "memory":
        yield build_memory_storage(MemoryBackend(), feed=CommittedFeed(), controls=ControlBoard())
        return
    opened = await open_storage(settings, feed=CommittedFeed(), controls=ControlBoard())
    try:
        yield opened
    finally:
        await opened.clients.delete_all()
        await opened.close()


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def azurite_storage(settings: Settings) -> AsyncIterator[Storage]:
    async with stores_for("azurite", settings) as opened:
        yield opened


@pytest.fixture(scope="session")
def memory_storage() -> Storage:
    """The in-memory stores over one backend for the session (ids are unique, as on Azurite)."""
    return build_memory_storage(MemoryBackend(), feed=CommittedFeed(), controls=ControlBoard())


@pytest.fixture(scope="session")
def storage(storage_adapter: str, request: pytest.FixtureRequest) -> Storage:
    """The stores of the adapter this test instance runs on (see the module docstring)."""
    chosen: Storage = request.getfixturevalue(f"{storage_adapter}_storage")
    return chosen


@pytest_asyncio.fixture(loop_scope="session")
async def dead_storage() -> AsyncIterator[Storage]:
    """Stores over a closed port with a short retry budget: any storage call fails within ~1 s."""
    clients = StorageClients(dead_settings(unique_prefix()), retry=FAST_FAIL)
    try:
        yield build_storage(clients, feed=CommittedFeed(), controls=ControlBoard())
    finally:
        await clients.close()


@pytest.fixture
def rid() -> str:
    return new_response_id()


class NoDurable:
    """The Durable runtime of a service whose runs the test drives itself (through the engine): starting an
    orchestration and raising an event do nothing."""

    async def start(self, instance_id: str, payload: dict[str, Any]) -> None:
        return None

    async def raise_event(self, instance_id: str, name: str, data: Any) -> None:
        return None
