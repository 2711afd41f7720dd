"""Partition (control queue) ownership by blob leases, as ``BlobPartitionLeaseManager`` +
``LeaseCollectionBalancer`` do it (the Durable extension's default: ``useTablePartitionManagement`` false).

One blob per control queue in ``<hub>-leases/default/``, holding ``{"PartitionId", "Owner", "Token"}``.
A host owns a partition while it holds the blob's lease (30 s, renewed every 10 s); only the owner polls
that control queue. What decides how long a restarted host waits before it can resume work:

* a host that stopped cleanly released its leases: the next one takes them at once;
* a host that died keeps its leases until they expire (≤ 30 s) — unless the new host has the **same
  worker id** (machine name, or ``<WEBSITE_CURRENT_STAMPNAME>:<RoleInstanceId>``): then it finds itself
  as the owner in the blob and renews the old lease with the stored token, at once
  (``LeaseCollectionBalancer.InitializeAsync``). ``func start`` restarted on the same machine is that
  case; a new container in Azure usually is not.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import Callable
from typing import Any

from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceNotFoundError
from azure.storage.blob.aio import BlobLeaseClient

from ..config import DurableConfig
from .store import Storage


class PartitionLeases:
    """Acquires, renews and releases the control-queue leases; tells the runtime what it owns."""

    def __init__(self, storage: Storage, config: DurableConfig, log: Callable[[str], None],
                 on_acquired: Callable[[int], None], on_lost: Callable[[int], None]) -> None:
        self.storage = storage
        self.config = config
        self.log = log
        self.on_acquired = on_acquired
        self.on_lost = on_lost
        self.container = storage.blobs.get_container_client(storage.names.lease_container)
        self.owned: dict[int, BlobLeaseClient] = {}
        self._task: asyncio.Task[None] | None = None

    def _blob(self, partition: int) -> Any:
        return self.container.get_blob_client(f"default/{self.storage.names.control_queue(partition)}")

    async def _ensure_blobs(self) -> None:
        for partition in range(self.config.partition_count):
            body = json.dumps({"PartitionId": self.storage.names.control_queue(partition), "Owner": "", "Token": ""})
            self.storage.calls.add("blob.upload")
            with contextlib.suppress(ResourceExistsError):
                await self._blob(partition).upload_blob(body.encode(), overwrite=False)

    async def _try_take(self, partition: int) -> bool:
        blob = self._blob(partition)
        self.storage.calls.add("blob.download")
        downloaded = await blob.download_blob()
        content = json.loads((await downloaded.readall()) or b"{}")
        lease_state = downloaded.properties.lease.state
        if content.get("Owner") == self.config.worker_id and content.get("Token"):
            lease = BlobLeaseClient(blob, lease_id=content["Token"])
            self.storage.calls.add("blob.lease")
            try:
                await lease.renew()  # our own lease from before a restart (expired is fine if nobody took it)
                self.owned[partition] = lease
                return True
            except HttpResponseError:
                pass
        if lease_state == "leased":
            return False
        lease = BlobLeaseClient(blob, lease_id=str(uuid.uuid4()))
        self.storage.calls.add("blob.lease")
        try:
            await lease.acquire(lease_duration=int(self.config.lease_interval.total_seconds()))
        except HttpResponseError:
            return False  # someone else was faster
        body = json.dumps({"PartitionId": self.storage.names.control_queue(partition),
                           "Owner": self.config.worker_id, "Token": lease.id})
        self.storage.calls.add("blob.upload")
        await blob.upload_blob(body.encode(), overwrite=True, lease=lease)
        self.owned[partition] = lease
        return True

    async def _cycle(self) -> None:
        for partition, lease in list(self.owned.items()):
            self.storage.calls.add("blob.lease")
            try:
                await lease.renew()
            except (HttpResponseError, ResourceNotFoundError) as error:
                self.owned.pop(partition, None)
                self.log(f"lost the lease of partition {partition} ({type(error).__name__})")
                self.on_lost(partition)
        for partition in range(self.config.partition_count):
            if partition in self.owned:
                continue
            try:
                taken = await self._try_take(partition)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # storage unreachable: try again next cycle
                self.log(f"partition {partition}: lease attempt failed ({type(error).__name__})")
                taken = False
            if taken:
                self.log(f"acquired the lease of partition {partition} "
                         f"({self.storage.names.control_queue(partition)})")
                self.on_acquired(partition)

    async def start(self) -> None:
        """Take what can be taken now (so a fresh host owns its partitions before it says it is ready),
        then keep renewing and acquiring in the background."""
        await self._ensure_blobs()
        await self._cycle()
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        interval = min(self.config.lease_renew_interval, self.config.lease_acquire_interval).total_seconds()
        while True:
            # on a wall-clock grid, like the idle queue polls (see Poller._wait): calls made together are cheaper
            await asyncio.sleep(interval - (time.time() % interval))
            try:
                await self._cycle()
            except asyncio.CancelledError:
                raise
            except Exception as error:
                self.log(f"lease cycle failed ({type(error).__name__}: {error})")

    async def stop(self, release: bool) -> None:
        """Stop renewing; with ``release`` give the leases back so the next host takes them at once."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if not release:
            return
        for partition, lease in list(self.owned.items()):
            body = json.dumps({"PartitionId": self.storage.names.control_queue(partition), "Owner": "", "Token": ""})
            with contextlib.suppress(Exception):
                self.storage.calls.add("blob.upload")
                await self._blob(partition).upload_blob(body.encode(), overwrite=True, lease=lease)
                self.storage.calls.add("blob.lease")
                await lease.release()
        self.owned.clear()
