"""The replica sweep of every ledger (at start, after a membership change) over
many replicas: it drops the replica of a ledger deleted while the node was away
and of one offloaded past the lag, keeps the rest without unpacking their
metadata (the packed flags say no offload), and lets other tasks run while it
goes.  At a million replicas the sweep once held the event loop for tens of
seconds, and the node lost its etcd lease."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from cluster import ClusterKeys, EtcdMetadataStore, InProcessEtcd, unpack_recent
from ledger import Bookie, OffloadInfo, OffloadState, ReplicaEntry
from node._cluster_metadata import WALK_TURN, LedgerMetadataView
from node._cluster_offload import sweep_replicas
from tests.cluster.test_metadata_cache import metadata
from tests.conftest import small_engine_settings

REPLICAS = 6 * WALK_TURN


def test_a_sweep_of_every_replica_unpacks_nothing_it_keeps_and_yields(tmp_path: Path) -> None:
    bookie = Bookie.open(small_engine_settings(tmp_path / "data"))
    try:
        offloaded, deleted = REPLICAS + 1, REPLICAS + 2
        pending = [bookie.replicas.add(lid, [ReplicaEntry(0, 1, b"x", 1)], epoch=1, lac=-1)
                   for lid in range(1, deleted + 1)]
        for each in pending:
            each.result(30)
        dropped, turns, unpacked = asyncio.run(_sweep(bookie, offloaded))
        assert dropped == [offloaded, deleted]
        assert sorted(bookie.replicas.ledger_ids()) == list(range(1, REPLICAS + 1))
        assert unpacked <= 1             # the offloaded ledger's, not the others'
        assert turns >= REPLICAS // WALK_TURN - 1  # the ticker ran while it swept
    finally:
        bookie.close()


async def _sweep(bookie: Bookie, offloaded: int) -> tuple[list[int], int, int]:
    etcd = InProcessEtcd()
    client = etcd.client()
    keys = ClusterKeys("sweep")
    store = EtcdMetadataStore(client, keys)
    view = LedgerMetadataView(client, keys, store)
    info = OffloadInfo(state=OffloadState.OFFLOADED, offloaded_at=1.0, key_prefix="p/")
    for lid in range(1, offloaded + 1):
        md = metadata(lid, offload=info.to_doc() if lid == offloaded else None)
        assert await store.create(md) is not None
    watching = asyncio.create_task(view.watch())
    turns = 0

    async def ticker() -> None:
        nonlocal turns
        while True:
            await asyncio.sleep(0)
            turns += 1
    try:
        async with asyncio.timeout(10):
            while not view.synced or len(view.noting_offload()) < 1:
                await asyncio.sleep(0.01)  # the watch loads the cache
        before = unpack_recent.cache_info()
        ticking = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        turns = 0
        rt: Any = SimpleNamespace(metadata=view)
        dropped = await sweep_replicas(rt, bookie, deletion_lag_s=0.0)
        ticking.cancel()
        after = unpack_recent.cache_info()
        return dropped, turns, (after.hits + after.misses) - (before.hits + before.misses)
    finally:
        watching.cancel()
