"""The node's Membership (lease, view, registration) over cluster.InProcessEtcd,
whose contract tests/cluster/test_etcd.py checks against a real etcd."""

from __future__ import annotations

import asyncio

from cluster import ClusterKeys, InProcessEtcd
from node import ClusterMembership, LocalStatus


def membership(etcd: InProcessEtcd, bookie_id: str, lost: list[str]) -> ClusterMembership:
    return ClusterMembership(etcd.client(), ClusterKeys("t"), bookie_id=bookie_id,
                             url=f"http://{bookie_id}", ttl_s=2,
                             status=lambda: LocalStatus(False, 0.0, 0),
                             on_lease_lost=lambda: lost.append(bookie_id),
                             clock=lambda: asyncio.get_running_loop().time())


def test_registered_asks_etcd_and_the_view_follows_by_the_watch() -> None:
    async def main() -> None:
        etcd, lost = InProcessEtcd(), []
        one = membership(etcd, "n1", lost)
        await one.start()
        two = membership(etcd, "n2", lost)
        await two.start()
        # etcd knows n2 at once; n1's view learns of it from the watch.
        assert await one.registered("n2")
        while not one.is_live("n2"):
            await one.changed()
        assert one.writable_bookies() == ["n1", "n2"] and one.lease_ok
        await two.stop()  # revokes its lease: gone from etcd, then from the view
        assert not await one.registered("n2")
        while one.is_live("n2"):
            await one.changed()
        assert "n2" in one.absent_since
        await one.stop()
        assert not lost
    asyncio.run(main())


def test_a_halted_node_is_dropped_when_its_lease_expires() -> None:
    async def main() -> None:
        etcd, lost = InProcessEtcd(), []
        one, two = membership(etcd, "n1", lost), membership(etcd, "n2", lost)
        await one.start()
        await two.start()
        two.halt()  # a crash: no revoke
        assert await one.registered("n2")
        async with asyncio.timeout(10):
            while await one.registered("n2") or one.is_live("n2"):
                await one.changed()
        await one.stop()
    asyncio.run(main())
