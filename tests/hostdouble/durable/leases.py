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
import math
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
        self._blobs: dict[int, Any] = {}  # one client per lease blob, made once (each costs ~0.06 ms to build)
        self.stolen = 0  # leases this host took from another live owner
        self.lost = 0  # leases this host could not renew (stolen from it, or expired)
        self._next_renew = self._next_take = 0.0
        self._task: asyncio.Task[None] | None = None

    def _blob(self, partition: int) -> Any:
        blob = self._blobs.get(partition)
        if blob is None:
            name = f"default/{self.storage.names.control_queue(partition)}"
            blob = self._blobs[partition] = self.container.get_blob_client(name)
        return blob

    async def _ensure_blobs(self) -> None:
        for partition in range(self.config.partition_count):
            body = json.dumps({"PartitionId": self.storage.names.control_queue(partition), "Owner": "", "Token": ""})
            self.storage.calls.add("blob.upload")
            with contextlib.suppress(ResourceExistsError):
                await self._blob(partition).upload_blob(body.encode(), overwrite=False)

    async def _read(self, partition: int) -> tuple[dict[str, Any], bool]:
        """The lease blob's content (``PartitionId``, ``Owner``, ``Token``) and whether it is leased now."""
        self.storage.calls.add("blob.download")
        downloaded = await self._blob(partition).download_blob()
        content: dict[str, Any] = json.loads((await downloaded.readall()) or b"{}")
        return content, downloaded.properties.lease.state == "leased"

    async def _write_owner(self, partition: int, lease: BlobLeaseClient) -> None:
        body = json.dumps({"PartitionId": self.storage.names.control_queue(partition),
                           "Owner": self.config.worker_id, "Token": lease.id})
        self.storage.calls.add("blob.upload")
        await self._blob(partition).upload_blob(body.encode(), overwrite=True, lease=lease)

    async def _initialize(self) -> None:
        """``LeaseCollectionBalancer.InitializeAsync``: every lease whose blob names this worker id as its owner
        is renewed with the stored token at once (a restart on the same machine keeps its partitions)."""
        for partition in range(self.config.partition_count):
            try:
                content, _ = await self._read(partition)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                self.log(f"partition {partition}: reading its lease failed ({type(error).__name__})")
                continue
            if content.get("Owner") != self.config.worker_id or not content.get("Token"):
                continue
            lease = BlobLeaseClient(self._blob(partition), lease_id=content["Token"])
            self.storage.calls.add("blob.lease")
            try:
                await lease.renew()  # expired is fine as long as nobody took it since
            except HttpResponseError:
                continue
            self._gained(partition, lease, "on startup")

    def _gained(self, partition: int, lease: BlobLeaseClient, how: str) -> None:
        self.owned[partition] = lease
        self.log(f"acquired the lease of partition {partition} ({self.storage.names.control_queue(partition)}) {how}")
        self.on_acquired(partition)

    async def _renew_owned(self) -> None:
        """``LeaseRenewer``: a lease that cannot be renewed (taken by another worker, or gone) is closed:
        the partition's poller stops. Other storage errors count as renewed, as upstream does."""
        for partition, lease in list(self.owned.items()):
            self.storage.calls.add("blob.lease")
            try:
                await lease.renew()
            except (HttpResponseError, ResourceNotFoundError) as error:
                self.owned.pop(partition, None)
                self.lost += 1
                self.log(f"lost the lease of partition {partition} ({type(error).__name__}: another worker took it, "
                         "or it expired)")
                self.on_lost(partition)

    async def _take(self) -> None:
        """``LeaseCollectionBalancer.TakeLeasesAsync``: count the live leases per owner (this worker counted
        with 0 if it owns none), target = ceil(partitions / workers) (1 when there are more workers than
        partitions). Short of the target: take expired or ownerless leases up to it; when there are none,
        steal **one** lease (``ChangeLease`` with the owner's token) from the worker holding the most, if it
        holds more than target (target − 1 when two or more are missing)."""
        me = self.config.worker_id
        blobs: dict[int, tuple[dict[str, Any], bool]] = {}
        for partition in range(self.config.partition_count):
            blobs[partition] = await self._read(partition)
        expired = [p for p, (content, leased) in blobs.items() if not leased or not content.get("Owner")]
        counts: dict[str, int] = {}
        for content, leased in blobs.values():
            if leased and content.get("Owner"):
                counts[content["Owner"]] = counts.get(content["Owner"], 0) + 1
        counts.setdefault(me, 0)
        shards, workers = len(blobs), len(counts)
        target = math.ceil(shards / workers) if shards > workers else 1
        needed = target - counts[me]
        if needed <= 0:
            return
        if expired:
            for partition in expired:
                if needed == 0:
                    break
                if partition in self.owned:
                    continue
                lease = BlobLeaseClient(self._blob(partition), lease_id=str(uuid.uuid4()))
                self.storage.calls.add("blob.lease")
                try:
                    await lease.acquire(lease_duration=int(self.config.lease_interval.total_seconds()))
                    await self._write_owner(partition, lease)
                except HttpResponseError:
                    continue  # someone else was faster
                self._gained(partition, lease, "(expired or free)")
                needed -= 1
            return
        victim, most = "", 0
        for owner, count in counts.items():  # the first worker with the most leases, as upstream iterates
            if count > most:
                victim, most = owner, count
        if most <= target - (1 if needed > 1 else 0):
            return
        for partition, (content, _) in blobs.items():
            if content.get("Owner") != victim or partition in self.owned:
                continue
            lease = BlobLeaseClient(self._blob(partition), lease_id=str(content.get("Token") or ""))
            self.storage.calls.add("blob.lease")
            try:
                await lease.change(proposed_lease_id=str(uuid.uuid4()))  # BlobPartitionLeaseManager.AcquireAsync
                await self._write_owner(partition, lease)
            except HttpResponseError:
                continue  # the owner changed it meanwhile
            self.stolen += 1
            self._gained(partition, lease, f"(stolen from {victim}: {most} leases, target {target})")
            return  # only one lease at a time

    async def _cycle(self) -> None:
        """Renew and balance, each when its interval is due. The loop wakes every ``tick`` (the shorter
        interval) on a wall-clock grid, so a step whose interval is the tick runs at every wake-up."""
        now = time.monotonic()
        tick = min(self.config.lease_renew_interval, self.config.lease_acquire_interval).total_seconds()
        if now >= self._next_renew:
            self._next_renew = now + self.config.lease_renew_interval.total_seconds() - tick + 0.05
            await self._renew_owned()
        if now >= self._next_take:
            self._next_take = now + self.config.lease_acquire_interval.total_seconds() - tick + 0.05
            try:
                await self._take()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # storage unreachable: try again next time
                self.log(f"lease balancing failed ({type(error).__name__}: {error})")

    async def start(self) -> None:
        """Take what can be taken now (so a fresh host owns its partitions before it says it is ready),
        then keep renewing and acquiring in the background."""
        await self._ensure_blobs()
        await self._initialize()
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
