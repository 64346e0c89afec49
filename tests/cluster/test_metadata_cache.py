"""node._cluster_metadata.LedgerMetadataView against a REAL etcd: the watched cache
holds other nodes' ledgers packed and hands them back decoded, never a value older
than the watch delivered; a ledger this node created is handed back as made."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace

import pytest

from cluster import (
    ClusterKeys,
    EtcdClient,
    EtcdMetadataStore,
    Fragment,
    LedgerMetadata,
    LedgerState,
    Written,
    unpack_recent,
)
from cluster import WriterRef as Writer
from common.errors import NoSuchLedger
from node._cluster_metadata import LedgerMetadataView
from tools.local_etcd import LocalEtcd

WAIT_S = 10.0


def metadata(ledger_id: int, **changes: object) -> LedgerMetadata:
    base = LedgerMetadata(ledger_id=ledger_id, state=LedgerState.OPEN, ensemble_size=2,
                          write_quorum=2, ack_quorum=1, ensembles=(Fragment(0, ("a", "b"), 1),),
                          writer=Writer("a", 1), password_salt=bytes(16),
                          password_hash=bytes(32), metadata={"owner": "x"})
    return replace(base, **changes)  # type: ignore[arg-type]


async def until(condition: Callable[[], Awaitable[bool]]) -> None:
    async with asyncio.timeout(WAIT_S):
        while not await condition():
            await asyncio.sleep(0.01)  # polling the cache the watch fills


def run(etcd: LocalEtcd, body: Callable[[LedgerMetadataView, EtcdMetadataStore],
                                        Awaitable[None]]) -> None:
    async def main() -> None:
        async with EtcdClient([etcd.endpoint]) as client:
            keys = ClusterKeys(f"test-{uuid.uuid4().hex}")
            store = EtcdMetadataStore(client, keys)
            view = LedgerMetadataView(client, keys, store)
            watching = asyncio.create_task(view.watch())
            try:
                await until(lambda: _true(view.synced))
                await body(view, store)
            finally:
                watching.cancel()
    asyncio.run(main())


async def _true(value: bool) -> bool:
    return value


def test_watched_values_come_back_decoded_and_never_older(local_etcd: LocalEtcd) -> None:
    async def body(view: LedgerMetadataView, store: EtcdMetadataStore) -> None:
        made = [metadata(i) for i in range(1, 13)]
        revisions = {md.ledger_id: await store.create(md) for md in made}

        async def all_seen() -> bool:
            return len(view.cached()) == len(made)
        await until(all_seen)
        assert view.cached() == [(md, revisions[md.ledger_id]) for md in made]
        first = made[0]
        assert await view.read(1) == (first, revisions[1])  # decoded, and kept so
        closed = replace(first, state=LedgerState.CLOSED, closed_at=5.0, last_entry_id=3,
                         length=12)
        written = await store.compare_and_swap(closed, revisions[1])
        assert isinstance(written, Written)

        async def closed_seen() -> bool:
            return (await view.read(1)) == (closed, written.revision)
        await until(closed_seen)  # the decoded copy of the old revision is not served
        assert view.cached((1, 2)) == [(closed, written.revision), (made[1], revisions[2])]
        assert await store.delete(2, revisions[2])

        async def gone() -> bool:
            return view.cached((2,)) == []
        await until(gone)
        with pytest.raises(NoSuchLedger):
            await view.read(2)
    run(local_etcd, body)


def test_a_ledger_this_node_created_is_the_value_it_made(local_etcd: LocalEtcd) -> None:
    async def body(view: LedgerMetadataView, store: EtcdMetadataStore) -> None:
        made = metadata(7)
        revision = await store.create(made)
        assert revision is not None
        view.remember(made, revision)
        changes: list[LedgerMetadata | None] = []
        view.on_change.append(lambda _id, md: changes.append(md))

        async def echoed() -> bool:
            return bool(changes)
        other = await store.create(metadata(8))
        await until(echoed)
        found, at = await view.read(7)
        assert found is made and at == revision
        assert (await view.read(8))[1] == other
    run(local_etcd, body)


def test_an_idle_writer_shares_the_packed_value_the_cache_holds(local_etcd: LocalEtcd) -> None:
    async def body(view: LedgerMetadataView, store: EtcdMetadataStore) -> None:
        changes: list[LedgerMetadata | None] = []
        view.on_change.append(lambda _id, md: changes.append(md))
        made = metadata(7)
        revision = await store.create(made)
        assert revision is not None
        view.remember(made, revision)
        packed = view.packed(made, revision)  # its writer went idle
        assert view.packed(made, revision) is packed  # the cache keeps these very bytes
        assert await view.read(7) == (made, revision)

        async def echoed() -> bool:
            return bool(changes)
        await until(echoed)  # the echo of the create (met by the packed value, or not)
        assert changes == [made]
        closed = replace(made, state=LedgerState.CLOSED, closed_at=5.0, last_entry_id=-1,
                         length=0)
        written = await store.compare_and_swap(closed, revision)
        assert isinstance(written, Written)

        async def closed_seen() -> bool:
            return (await view.read(7)) == (closed, written.revision)
        await until(closed_seen)
        older = view.packed(made, revision)  # an older value is packed, not cached
        assert older is not packed and older == packed
        assert await view.read(7) == (closed, written.revision)
        assert await store.delete(7, written.revision)

        async def gone() -> bool:
            return view.cached((7,)) == []
        await until(gone)
        view.packed(closed, written.revision)  # a writer retiring after the delete
        assert view.cached((7,)) == []  # is not put back in the cache
    run(local_etcd, body)


def test_which_ledgers_note_an_offload_is_read_from_the_flags_alone(
        local_etcd: LocalEtcd) -> None:
    """A sweep of every ledger asks each whether its metadata holds an offload
    record or a tier position: answered from the packed value's flags (nothing
    unpacked) and from a decoded one alike; None for a ledger the cache lacks."""
    async def body(view: LedgerMetadataView, store: EtcdMetadataStore) -> None:
        plain = metadata(1)
        offloaded = metadata(2, offload={"state": "PENDING"})
        tiered = metadata(3, tier={"bookie_id": "a", "position": [0, 5, 0, 0, 0]})
        for md in (plain, offloaded, tiered):
            assert await store.create(md) is not None

        async def all_seen() -> bool:
            return len(view.cached()) == 3
        await until(all_seen)
        unpacked = unpack_recent.cache_info().misses + unpack_recent.cache_info().hits
        assert [view.notes_offload(i) for i in (1, 2, 3, 4)] == [False, True, True, None]
        assert sorted(view.noting_offload()) == [2, 3]
        assert view.noting_offload([1, 3, 9]) == [3]
        assert unpack_recent.cache_info().misses + unpack_recent.cache_info().hits == unpacked
        await view.read(2)  # decoded now, and kept so
        revision = await store.create(metadata(5))
        assert revision is not None
        view.remember(metadata(5, tier={"bookie_id": "a", "position": [0, 1, 0, 0, 0]}),
                      revision)
        assert (view.notes_offload(2), view.notes_offload(5)) == (True, True)
    run(local_etcd, body)


def test_a_walk_of_the_unclosed_passes_over_closed_ledgers_unpacked(
        local_etcd: LocalEtcd, monkeypatch: pytest.MonkeyPatch) -> None:
    """A restarted node looks for the open ledgers it writes among every ledger: the
    closed ones (most of a million) are passed over from the packed state byte.
    (The spy counts calls to the real unpacking.)"""
    import node._cluster_metadata as cache_module

    unpacked: list[int] = []
    real = cache_module.unpack_metadata

    def counted(packed: bytes) -> tuple[LedgerMetadata, int]:
        found = real(packed)
        unpacked.append(found[0].ledger_id)
        return found
    monkeypatch.setattr(cache_module, "unpack_metadata", counted)

    async def body(view: LedgerMetadataView, store: EtcdMetadataStore) -> None:
        closed = [metadata(i, state=LedgerState.CLOSED, closed_at=1.0, last_entry_id=-1,
                           length=0) for i in range(1, 41)]
        unclosed = [metadata(41), metadata(42, state=LedgerState.IN_RECOVERY,
                                           writer=Writer("a", 2))]
        for md in closed + unclosed:
            assert await store.create(md) is not None

        async def all_seen() -> bool:
            return len(view.cached()) == 42
        await until(all_seen)
        unpacked.clear()
        walked = [md async for md, _ in view.walk(unclosed=True)]
        assert [md.ledger_id for md in walked] == [41, 42]
        assert unpacked == [41, 42]
        assert [md.ledger_id async for md, _ in view.walk()] == list(range(1, 43))
    run(local_etcd, body)
