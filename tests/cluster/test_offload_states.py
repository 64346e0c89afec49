"""Offload states in cluster mode are written only by the holder of each
ledger's offload lock (docs/cluster.md §10): ``ClusterOffload.set_states`` on a
real etcd and on the in-process one.  The runtime is reduced to what the call
uses (etcd, keys, the watched-metadata view, this node's lease); the node's
other parts are not built, and no S3 request is made."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

from cluster import (
    ClusterKeys,
    Etcd,
    EtcdMetadataStore,
    Fragment,
    LedgerMetadata,
    LedgerState,
    WriterRef,
)
from ledger import OffloadInfo, OffloadState
from node._cluster_metadata import LedgerMetadataView
from node._cluster_offload import READS_PER_TXN, STATES_PER_TXN, ClusterOffload
from node._cluster_reads import offload_info
from offload import OffloadSettings
from tests.cluster.conftest import MakeEtcd


def closed(ledger_id: int) -> LedgerMetadata:
    return LedgerMetadata(ledger_id=ledger_id, state=LedgerState.CLOSED, ensemble_size=1,
                          write_quorum=1, ack_quorum=1, ensembles=(Fragment(0, ("n0",), 1),),
                          writer=WriterRef("n0", 1), metadata={}, created_at=1.0,
                          closed_at=2.0, last_entry_id=0, length=10)


def packed(n: int) -> OffloadInfo:
    return OffloadInfo(state=OffloadState.OFFLOADED, bucket="b", key_prefix=f"p/{n}",
                       segment_bytes=26, offloaded_at=3.0,
                       pack_key="ledgerd/default/n0/packs/1-0123456789ab/data",
                       pack_offset=100 * n, pack_index_bytes=50, pack_bytes=10_000)


def run(make: MakeEtcd, body: Callable[[Etcd, ClusterKeys, EtcdMetadataStore],
                                       Any]) -> None:
    async def main() -> None:
        async with make() as client:
            keys = ClusterKeys(f"/test/{uuid.uuid4().hex}")
            await body(client, keys, EtcdMetadataStore(client, keys))
    asyncio.run(main())


def offload_of(etcd: Etcd, keys: ClusterKeys, lease: int) -> ClusterOffload:
    store = EtcdMetadataStore(etcd, keys)
    rt: Any = SimpleNamespace(etcd=etcd, keys=keys, me="n0",
                              membership=SimpleNamespace(lease_id=lease),
                              metadata=LedgerMetadataView(etcd, keys, store),
                              spawn=lambda coro: None)
    return ClusterOffload(rt, None, None, OffloadSettings(bucket="bucket"))  # type: ignore[arg-type]


async def states(store: EtcdMetadataStore, ids: range) -> dict[int, OffloadInfo]:
    found = {i: await store.read(i) for i in ids}
    return {i: offload_info(value[0]) for i, value in found.items() if value is not None}


def test_only_ledgers_whose_lock_this_node_holds_change(etcd_api: MakeEtcd) -> None:
    async def body(etcd: Etcd, keys: ClusterKeys, store: EtcdMetadataStore) -> None:
        count = 2 * STATES_PER_TXN + 5  # past etcd's 128 operations per transaction
        for ledger_id in range(1, count + 1):
            assert await store.create(closed(ledger_id)) is not None
        mine, theirs = await etcd.lease_grant(60), await etcd.lease_grant(60)
        for ledger_id in range(1, count + 1):
            owner = theirs if ledger_id % 10 == 0 else mine
            assert await etcd.create(keys.offload_lock(ledger_id), b"{}", lease=owner)
        offload = offload_of(etcd, keys, mine)
        # The cached view is stale for one (another change since it read it)...
        md, revision = await offload._rt.metadata.read(7)
        await store.compare_and_swap(replace(md, metadata={"x": "y"}), revision)
        # ... and one is deleted meanwhile.
        _, revision = await offload._rt.metadata.read(8)
        assert await store.delete(8, revision)
        wanted = {i: packed(i) for i in range(1, count + 1)}
        written = await offload.set_states(wanted)
        assert sorted(info.ledger_id for info in written) == [
            i for i in range(1, count + 1) if i % 10 and i != 8]
        now = await states(store, range(1, count + 1))
        for ledger_id, info in now.items():
            assert info == (OffloadInfo() if ledger_id % 10 == 0 else wanted[ledger_id])
        assert (await store.read(7))[0].metadata == {"x": "y"}  # type: ignore[index]
        # Read back from etcd, READS_PER_TXN a round trip (two here), 8 left out.
        assert await offload._fresh_records(range(1, count + 1)) == now
        assert 8 not in now and len(now) == count - 1 > READS_PER_TXN

        # Its lease gone (a partition), the node changes nothing any more.
        await etcd.lease_revoke(mine)
        assert await offload.set_states({1: OffloadInfo(state=OffloadState.FAILED)}) == []
        assert (await states(store, range(1, 2)))[1] == wanted[1]
    run(etcd_api, body)
