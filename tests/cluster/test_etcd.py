"""etcd's contract (cluster.Etcd) and EtcdMetadataStore, each test run against a
REAL etcd (tools.local_etcd) and against cluster.InProcessEtcd: both must agree."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TypeVar

import pytest

from cluster import (
    ClusterKeys,
    Current,
    Etcd,
    EtcdClient,
    EtcdMetadataStore,
    Fragment,
    LedgerMetadata,
    LedgerState,
    WriterRef,
    Written,
    parse_metadata_url,
)
from cluster._store import CREATE_BATCH_COUNT_MAX, LEDGER_ID_BLOCK_SIZE, LIST_WINDOW
from common.errors import InvalidSetting, LeaseExpired, MetadataUnavailable
from tests.cluster.conftest import MakeEtcd
from tools.local_etcd import LocalEtcd
from tools.local_s3 import free_port

T = TypeVar("T")




def run(make: MakeEtcd, body: Callable[[Etcd, bytes], Awaitable[T]]) -> T:
    """Run ``body(client, fresh key prefix)`` on its own event loop."""
    async def main() -> T:
        async with make() as client:
            return await body(client, f"/test/{uuid.uuid4().hex}/".encode())
    return asyncio.run(main())


def test_put_get_delete_with_revisions(etcd_api: MakeEtcd) -> None:
    async def body(client: Etcd, p: bytes) -> None:
        assert await client.get(p + b"k") is None
        r1 = await client.put(p + b"k", b"v1")
        r2 = await client.put(p + b"k", b"v2")
        kv = await client.get(p + b"k")
        assert kv is not None and kv.value == b"v2"
        assert (kv.create_revision, kv.mod_revision, kv.version) == (r1, r2, 2)
        assert await client.delete(p + b"k") == 1
        assert await client.delete(p + b"k") == 0
        assert await client.get(p + b"k") is None
    run(etcd_api, body)


def test_create_once_and_compare_and_swap(etcd_api: MakeEtcd) -> None:
    async def body(client: Etcd, p: bytes) -> None:
        revision = await client.create(p + b"k", b"a")
        assert revision is not None
        assert await client.create(p + b"k", b"b") is None
        ok, new_revision, current = await client.compare_and_swap(p + b"k", b"c", revision)
        assert ok and current is None and new_revision > revision
        ok, _, current = await client.compare_and_swap(p + b"k", b"d", revision)  # stale
        assert not ok and current is not None
        assert (current.value, current.mod_revision) == (b"c", new_revision)
        assert not await client.compare_and_delete(p + b"k", revision)
        assert await client.compare_and_delete(p + b"k", new_revision)
    run(etcd_api, body)


def test_prefix_ranges_page_in_key_order(etcd_api: MakeEtcd) -> None:
    async def body(client: Etcd, p: bytes) -> None:
        keys = [p + f"{i:04d}".encode() for i in range(25)]
        for key in reversed(keys):
            await client.put(key, key[-4:])
        await client.put(p[:-1] + b"0", b"outside")  # shares the prefix minus the slash
        got = [kv.key async for kv in client.range_prefix(p, page_size=7)]
        assert got == keys
        after = [kv.key async for kv in client.range_prefix(p, start_after=keys[9],
                                                               page_size=4)]
        assert after == keys[10:]
    run(etcd_api, body)


def test_ids_are_unique_and_dense_under_concurrency(etcd_api: MakeEtcd) -> None:
    async def body(client: Etcd, p: bytes) -> list[int]:
        return list(await asyncio.gather(*(client.next_id(p + b"ids") for _ in range(40))))
    ids = run(etcd_api, body)
    assert sorted(ids) == list(range(1, 41))


def test_leases_keep_keys_alive_until_revoked(etcd_api: MakeEtcd) -> None:
    async def body(client: Etcd, p: bytes) -> None:
        lease = await client.lease_grant(30)
        await client.put(p + b"member", b"n1", lease=lease)
        assert await client.lease_keepalive(lease) == 30
        assert 0 < await client.lease_ttl(lease) <= 30
        kv = await client.get(p + b"member")
        assert kv is not None and kv.lease == lease
        await client.lease_revoke(lease)
        assert await client.get(p + b"member") is None
        assert await client.lease_ttl(lease) == -1
        with pytest.raises(LeaseExpired):
            await client.lease_keepalive(lease)
        await client.lease_revoke(lease)  # revoking twice is fine
    run(etcd_api, body)


def test_an_expired_lease_deletes_its_keys_and_the_watch_sees_it(etcd_api: MakeEtcd) -> None:
    async def body(client: Etcd, p: bytes) -> list[tuple[str, bytes]]:
        lease = await client.lease_grant(1)
        revision = await client.put(p + b"member", b"n1", lease=lease)
        seen: list[tuple[str, bytes]] = []
        async with asyncio.timeout(15):
            async for event in client.watch(p, prefix=True, start_revision=revision):
                seen.append((event.kind, event.kv.key))
                if event.kind == "DELETE":
                    break
        with pytest.raises(LeaseExpired):
            await client.lease_keepalive(lease)
        return seen
    assert run(etcd_api, body)[-1][0] == "DELETE"


def test_watch_reports_puts_and_deletes_in_order(etcd_api: MakeEtcd) -> None:
    async def body(client: Etcd, p: bytes) -> list[tuple[str, bytes, bytes]]:
        start = await client.put(p + b"a", b"1")
        await client.put(p + b"b", b"2")
        await client.delete(p + b"a")
        events = []
        async with asyncio.timeout(10):
            async for event in client.watch(p, prefix=True, start_revision=start):
                events.append((event.kind, event.kv.key[len(p):], event.kv.value))
                if len(events) == 3:
                    break
        return events
    assert run(etcd_api, body) == [("PUT", b"a", b"1"), ("PUT", b"b", b"2"),
                                     ("DELETE", b"a", b"")]


def metadata(ledger_id: int) -> LedgerMetadata:
    return LedgerMetadata(ledger_id=ledger_id, state=LedgerState.OPEN, ensemble_size=3,
                          write_quorum=2, ack_quorum=2,
                          ensembles=(Fragment(0, ("a", "b", "c"), 1),),
                          writer=WriterRef("a", 1), metadata={"k": "v"}, created_at=1.5)


def test_the_metadata_store_creates_cases_lists_and_deletes(etcd_api: MakeEtcd) -> None:
    async def body(client: Etcd, p: bytes) -> None:
        store = EtcdMetadataStore(client, ClusterKeys(p.decode()))
        ids = [1, 2, 3]
        for ledger_id in ids:
            assert await store.create(metadata(ledger_id)) is not None
        assert await store.create(metadata(1)) is None
        read = await store.read(2)
        assert read is not None and read[0] == metadata(2)
        md, revision = read
        closed = replace(md, state=LedgerState.CLOSED, last_entry_id=-1, length=0)
        result = await store.compare_and_swap(closed, revision)
        assert isinstance(result, Written)
        lost = await store.compare_and_swap(md, revision)
        assert isinstance(lost, Current) and lost.metadata == closed
        assert lost.revision == result.revision
        listed = [m.ledger_id async for m, _ in store.list_ledgers(after=1)]
        assert listed == [2, 3]
        assert await store.delete(2, result.revision)
        assert await store.read(2) is None
        gone = await store.compare_and_swap(md, result.revision)
        assert isinstance(gone, Current) and gone.metadata is None
    run(etcd_api, body)


def test_a_listing_reads_windows_of_ids_and_jumps_the_gaps(etcd_api: MakeEtcd) -> None:
    """A listing reads the ledgers in windows of ids (etcd counts every key to a
    range's end to answer a page): across window edges, over gaps of many empty
    windows, and from any ``after``, it lists every ledger once, in id order,
    with one request per gap rather than one per empty window."""
    async def body(client: Etcd, p: bytes) -> None:
        store = EtcdMetadataStore(client, ClusterKeys(p.decode()))
        ids = [0, 1, LIST_WINDOW - 1, LIST_WINDOW, LIST_WINDOW + 1, 5 * LIST_WINDOW + 7,
               2**40, 2**62 + 3]
        for ledger_id in ids:
            assert await store.create(metadata(ledger_id)) is not None
        for after in (None, 0, LIST_WINDOW - 1, LIST_WINDOW + 1, 2**40, 2**62 + 3):
            listed = [m.ledger_id async for m, _ in store.list_ledgers(after=after)]
            assert listed == [i for i in ids if after is None or i > after], after
    run(etcd_api, body)


def test_ledger_ids_come_in_blocks_no_two_nodes_share(etcd_api: MakeEtcd) -> None:
    async def body(client: Etcd, p: bytes) -> None:
        keys = ClusterKeys(p.decode())
        # Ids made one per version before blocks: 1, 2, 3.
        assert [await client.next_id(keys.ledger_ids) for _ in range(3)] == [1, 2, 3]
        first, second = EtcdMetadataStore(client, keys), EtcdMetadataStore(client, keys)
        count = LEDGER_ID_BLOCK_SIZE + 10  # each store needs a second block
        got = await asyncio.gather(*(store.allocate_ledger_id()
                                     for _ in range(count) for store in (first, second)))
        assert len(set(got)) == 2 * count
        assert min(got) > 3  # above every id made before blocks
        # Four blocks in all: etcd wrote the id key once per block, not per id.
        kv = await client.get(keys.ledger_ids)
        assert kv is not None and kv.version == 3 + 4
        assert all(i // LEDGER_ID_BLOCK_SIZE in (4, 5, 6, 7) for i in got)
    run(etcd_api, body)


def test_creations_waiting_together_are_one_etcd_transaction(etcd_api: MakeEtcd) -> None:
    async def body(client: Etcd, p: bytes) -> None:
        store = EtcdMetadataStore(client, ClusterKeys(p.decode()))
        assert await store.create(metadata(7)) is not None
        count = 2 * CREATE_BATCH_COUNT_MAX + 44
        # Ledger 7 exists: its creation alone answers None, the rest are created.
        revisions = await asyncio.gather(*(store.create(metadata(i))
                                           for i in range(1, count + 1)))
        assert revisions[6] is None
        created = [r for r in revisions if r is not None]
        assert len(created) == count - 1
        # The first creation goes alone and the rest wait for it, then follow in
        # transactions of at most CREATE_BATCH_COUNT_MAX: ledgers 2 … 129 (that
        # one holds ledger 7, so it is retried one by one), then two more.
        after = revisions[CREATE_BATCH_COUNT_MAX + 1:]
        assert len(set(after)) == 2
        for ledger_id in (1, 100, count):
            read = await store.read(ledger_id)
            assert read is not None and read[0] == metadata(ledger_id)
    run(etcd_api, body)


def test_a_creation_given_up_leaves_the_others_created(etcd_api: MakeEtcd) -> None:
    async def body(client: Etcd, p: bytes) -> None:
        store = EtcdMetadataStore(client, ClusterKeys(p.decode()))
        tasks = [asyncio.create_task(store.create(metadata(i))) for i in range(1, 21)]
        await asyncio.sleep(0)  # every creation queued
        tasks[3].cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        assert isinstance(results[3], asyncio.CancelledError)
        assert all(isinstance(r, int) for i, r in enumerate(results) if i != 3)
        # etcd may or may not have written the one given up, as for any
        # request cancelled in flight; the next creation still works.
        assert await store.create(metadata(100)) is not None
    run(etcd_api, body)


def test_an_unreachable_etcd_is_metadata_unavailable() -> None:
    async def main() -> None:
        async with EtcdClient([f"http://127.0.0.1:{free_port()}"], timeout_s=1.0) as client:
            with pytest.raises(MetadataUnavailable):
                await client.get(b"/x")
    asyncio.run(main())


def test_the_next_endpoint_answers_when_the_first_is_down(local_etcd: LocalEtcd) -> None:
    async def main() -> None:
        endpoints = [f"http://127.0.0.1:{free_port()}", local_etcd.endpoint]
        async with EtcdClient(endpoints, timeout_s=1.0) as client:
            await client.put(b"/failover", b"ok")
            kv = await client.get(b"/failover")
            assert kv is not None and kv.value == b"ok"
    asyncio.run(main())


@pytest.mark.parametrize(("url", "endpoints", "scope"), [
    ("etcd://127.0.0.1:2379/ledgerd", ["http://127.0.0.1:2379"], "ledgerd"),
    ("etcd://a:1,b:2/x/y/", ["http://a:1", "http://b:2"], "x/y"),
])
def test_metadata_urls_parse(url: str, endpoints: list[str], scope: str) -> None:
    assert parse_metadata_url(url) == (endpoints, scope)


@pytest.mark.parametrize("url", ["http://a:1/x", "etcd://a:1", "etcd:///x", "a:1/x"])
def test_bad_metadata_urls_name_the_setting(url: str) -> None:
    with pytest.raises(InvalidSetting, match="METADATA_URL"):
        parse_metadata_url(url)
