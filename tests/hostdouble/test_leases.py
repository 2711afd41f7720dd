"""Partition leases shared out between workers as ``LeaseCollectionBalancer.TakeLeasesAsync`` does (real
Azurite, the balancer's steps called one by one instead of on its timers)."""

from __future__ import annotations

import asyncio
import os
import secrets
from datetime import timedelta

import pytest

from tests.hostdouble.api import delete_task_hub
from tests.hostdouble.config import ConfigError, DurableConfig, lease_timings
from tests.hostdouble.durable.leases import PartitionLeases
from tests.hostdouble.durable.store import Storage, TaskHubNames

CONNECTION = os.environ.get("AzureWebJobsStorage", "UseDevelopmentStorage=true")
FAR = timedelta(seconds=300)


def test_a_new_worker_steals_one_lease_per_round_from_the_busiest_until_each_has_its_share() -> None:
    hub = "lb" + secrets.token_hex(5)
    names = TaskHubNames(hub, 4)
    log: list[str] = []

    def worker(worker_id: str) -> PartitionLeases:
        config = DurableConfig(hub_name=hub, partition_count=4, worker_id=worker_id, lease_renew_interval=FAR,
                               lease_acquire_interval=FAR)
        return PartitionLeases(Storage(CONNECTION, names), config, log.append, lambda p: None, lambda p: None)

    async def begin(leases: PartitionLeases) -> None:
        await leases.start()  # initialize and one renew-and-take step, then...
        assert leases._task is not None
        leases._task.cancel()  # ...no background cycle: the test calls each step by hand

    async def scenario() -> None:
        a, b, c = worker("stamp:a"), worker("stamp:b"), worker("stamp:c")
        try:
            await a.storage.create_task_hub()
            await begin(a)
            assert sorted(a.owned) == [0, 1, 2, 3]  # alone: target 4, every lease free
            await begin(b)  # target 2, nothing free: one stolen from a (4 > 2 - 1)
            assert len(b.owned) == 1 and b.stolen == 1
            await a._renew_owned()  # a learns it at its next renewal
            assert len(a.owned) == 3 and a.lost == 1
            await b._take()  # still one short: a holds 3 > 2
            await a._renew_owned()
            assert (len(a.owned), len(b.owned)) == (2, 2)
            await b._take()  # at its share: takes nothing
            assert len(b.owned) == 2 and b.stolen == 2
            await begin(c)  # target ceil(4 / 3) = 2, two short: steals one from a worker holding 2 (> 2 - 1)
            await c._take()  # one short: nobody holds more than 2, nothing to steal
            await a._renew_owned()
            await b._renew_owned()
            assert sorted(len(w.owned) for w in (a, b, c)) == [1, 1, 2] and c.stolen == 1
            assert not set(a.owned) & set(b.owned) | set(a.owned) & set(c.owned) | set(b.owned) & set(c.owned)
            await c.stop(release=True)  # a clean stop gives its lease back: an expired one is taken, not stolen
            for w in (a, b):
                await w._take()
            assert sorted(p for w in (a, b) for p in w.owned) == [0, 1, 2, 3]
            assert a.stolen + b.stolen == 2
        finally:
            for w in (a, b, c):
                await w.stop(release=True)
                await w.storage.close()

    try:
        asyncio.run(scenario())
    finally:
        delete_task_hub(CONNECTION, hub)
    assert any("stolen from stamp:a" in line for line in log), log


def test_lease_timings_are_the_dtfx_defaults_unless_the_explicit_option_shortens_them() -> None:
    assert lease_timings({}) == (timedelta(seconds=30), timedelta(seconds=10), timedelta(seconds=10))
    assert lease_timings({"HOSTDOUBLE_LEASE_TIMINGS": "15,2,2"}) == (
        timedelta(seconds=15), timedelta(seconds=2), timedelta(seconds=2))
    for bad in ("10,2,2", "15,8,2", "15,2", "a,b,c"):
        with pytest.raises(ConfigError):
            lease_timings({"HOSTDOUBLE_LEASE_TIMINGS": bad})
