"""Many idle ledgers in a bookie's stores, fast, for tests and benchmarks.

Creating a ledger through the engine pays one scrypt of its password (about
9 ms) and a journal record, so a test or benchmark that needs 100,000 idle
ledgers writes them straight into the stores a bookie opens instead: one
closed ledger record each (all sharing one password hash), optionally with
one entry each in the entry logs and its location in the index, then a
checkpoint mark past them.  ``Bookie.open`` on the directory afterwards sees
what it would after that many creates, adds, closes and a checkpoint.

A cluster's ledgers (``seed_cluster_ledgers``) cost more again: each create is
an etcd write, each add a replicated write to three nodes.  So their metadata
goes straight into etcd, in transactions of ``CREATE_BATCH_COUNT_MAX`` keys,
under ids taken from the id key as a node takes them (so a later create gets
an id past them), and each node's replicas straight into its stores: the
replica record and the entry at its index location, as the node's replica
path leaves them after the add, the close and a checkpoint.  The nodes must
be stopped (their stores are single-writer) and must have started once (their
cookie and the cluster's password key are in their data directories then).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

import crc32c

from app.settings import ServiceSettings
from cluster import (
    PASSWORD_SCHEME_KEYED,
    ClusterKeys,
    Compare,
    EtcdClient,
    Fragment,
    LedgerMetadata,
    Put,
    WriterRef,
    encode_metadata,
    parse_metadata_url,
    write_set,
)
from cluster import LedgerState as ClusterState
from cluster._store import CREATE_BATCH_COUNT_MAX, LEDGER_ID_BLOCK_SIZE
from ledger import EngineSettings, LedgerState, OffloadInfo, PasswordVerifier, read_key_file
from ledger._events import replica_stored
from ledger._ledger_record import LedgerRecord
from ledger._replica_table import ReplicaRecord, replica_storage_id
from ledger._stores import open_stores
from node._cluster_password_key import KEY_FILE_NAME
from node._cookie import read_local
from tools.local_cluster import ClusterNodeProcess
from tools.local_server import ServerProcess

# Index batch size: one synced RocksDB write per this many ledgers.
_BATCH = 10_000
# etcd transactions in flight at once while seeding metadata: enough to keep
# etcd's commits batched, few enough that none waits out the client's timeout.
_TXNS_IN_FLIGHT = 8


def seed_idle_ledgers(settings: EngineSettings, count: int, *, payload: bytes | None = b"x" * 64,
                      password: str = "", offload: OffloadInfo | None = None) -> list[int]:
    """Write ``count`` closed ledgers (the next ids the bookie would issue) into
    a bookie's stores (closed), each with one entry ``payload`` (None: empty)
    and ``offload`` as their offload state; returns their ids."""
    index, entry_log, journal, node_key = open_stores(settings)
    try:
        mark, start = index.checkpoint()
        # Keyed with the directory's own password key, as the bookie would hash it.
        hashed = PasswordVerifier(node_key.key).hash(password)
        crc = crc32c.crc32c(payload) if payload is not None else 0
        ids = list(range(start, start + count))
        # Every record is the same but for its id.
        template = LedgerRecord(
            ledger_id=0, state=LedgerState.CLOSED, password=hashed,
            last_entry_id=0 if payload is not None else -1,
            length=len(payload) if payload is not None else 0,
            created_at=0.0, closed_at=0.0, offload=offload or OffloadInfo())
        for at in range(0, count, _BATCH):
            batch = index.batch()
            for lid in ids[at:at + _BATCH]:
                if payload is not None:
                    batch.put_location(lid, 0, entry_log.append(lid, 0, payload, crc))
                batch.put_ledger(replace(template, ledger_id=lid))
            entry_log.sync()  # the entries durable before the index points at them
            batch.set_checkpoint(mark, start + count)
            index.commit(batch)
        return ids
    finally:
        entry_log.close()
        journal.close()
        index.close()


# --- a cluster's ledgers -------------------------------------------------------------

# What the replica record of a one-entry ledger holds after its add, its close
# and a checkpoint: fenced at the writer's epoch (1), the entry at that epoch,
# and the LAC the writer told the bookies once it idled (its one entry).
_EPOCH = 1
_REPLICA_LAC = 0


@dataclass(frozen=True, slots=True)
class ClusterSeed:
    """What :func:`seed_cluster_ledgers` wrote, and how long each part took."""

    ledger_ids: list[int]
    metadata_s: float   # ids and metadata into etcd
    replicas_s: float   # every node's replicas into its stores


def engine_settings_of(node: ServerProcess) -> EngineSettings:
    """The engine settings a ``ledgerd serve`` process runs with (its environment)."""
    return ServiceSettings.load(environ=node.environment())._engine()


def seed_stopped_cluster(metadata_url: str, nodes: Sequence[ClusterNodeProcess], count: int,
                         *, payload: bytes = b"x" * 100, password: str = "pw") -> ClusterSeed:
    """:func:`seed_cluster_ledgers` into the stores of ``nodes`` (stopped, each with
    the engine settings it runs with)."""
    running = [n.bookie_id for n in nodes if n.running]
    if running:
        raise RuntimeError(f"stop the nodes before seeding their stores: {running} run")
    settings = {n.bookie_id: engine_settings_of(n) for n in nodes}
    return seed_cluster_ledgers(metadata_url, settings, count, payload=payload,
                                password=password)


def seed_cluster_ledgers(metadata_url: str, nodes: Mapping[str, EngineSettings], count: int,
                         *, payload: bytes = b"x" * 100, password: str = "pw",
                         ensemble_size: int = 3, write_quorum: int = 3,
                         ack_quorum: int = 2) -> ClusterSeed:
    """Write ``count`` CLOSED ledgers of one entry ``payload`` each, as a cluster of
    ``nodes`` (bookie id → the engine settings of a node that has started once and
    is stopped now) holds them after their creates, adds and closes: metadata in
    the etcd at ``metadata_url`` (``etcd://host:port/scope``), the writers and
    ensembles taking the nodes in turn, and each replica in its node's stores.
    All share one password digest (of ``password``, keyed with the cluster's key)."""
    bookies = sorted(nodes)
    if not len(bookies) >= ensemble_size >= write_quorum >= ack_quorum >= 1:
        raise ValueError(f"{len(bookies)} nodes cannot hold ensembles of {ensemble_size}, "
                         f"Qw {write_quorum}, Qa {ack_quorum}")
    key = _cluster_password_key(nodes)
    hashed = PasswordVerifier(key).hash(password)
    now = time.time()
    templates = [LedgerMetadata(
        ledger_id=0, state=ClusterState.CLOSED, ensemble_size=ensemble_size,
        write_quorum=write_quorum, ack_quorum=ack_quorum,
        ensembles=(Fragment(0, _ensemble(bookies, turn, ensemble_size), _EPOCH),),
        writer=WriterRef(_ensemble(bookies, turn, ensemble_size)[0], _EPOCH),
        password_salt=hashed.salt, password_hash=hashed.digest,
        password_scheme=PASSWORD_SCHEME_KEYED, created_at=now, closed_at=now,
        last_entry_id=0, length=len(payload)) for turn in range(len(bookies))]
    started = time.monotonic()
    ids = asyncio.run(_seed_metadata(metadata_url, templates, count))
    metadata_s = time.monotonic() - started
    started = time.monotonic()
    # Entry 0's write set, per turn: the bookies its add went to.
    written = [set(write_set(t.ensembles[0], 0, write_quorum)) for t in templates]
    for bookie, settings in nodes.items():
        held = [lid for n, lid in enumerate(ids) if bookie in written[n % len(written)]]
        _seed_replicas(settings, held, payload)
    return ClusterSeed(ids, metadata_s, time.monotonic() - started)


def _ensemble(bookies: Sequence[str], turn: int, size: int) -> tuple[str, ...]:
    """The ``turn``-th rotation of the bookies, ``size`` of them: ledgers spread
    over the nodes as the least used first pick does."""
    return tuple(bookies[(turn + i) % len(bookies)] for i in range(size))


def _cluster_password_key(nodes: Mapping[str, EngineSettings]) -> bytes:
    """The cluster's password key, which every node agreed at its first start (with
    its cookie, which seeding must not leave without): refused if one has not."""
    keys: set[bytes] = set()
    for bookie, settings in nodes.items():
        key = read_key_file(settings.data_dir / KEY_FILE_NAME)
        if key is None or read_local(settings.data_dir) is None:
            raise RuntimeError(f"node {bookie} has not started once in {settings.data_dir} "
                               "(no cookie or cluster password key there): start the "
                               "cluster, stop it, then seed it")
        keys.add(key)
    if len(keys) != 1:
        raise RuntimeError("the nodes hold different cluster password keys")
    return keys.pop()


async def _seed_metadata(metadata_url: str, templates: Sequence[LedgerMetadata],
                         count: int) -> list[int]:
    """Take ids for ``count`` ledgers and create their keys, ledger ``n`` from
    ``templates[n % len(templates)]``; the ids."""
    endpoints, scope = parse_metadata_url(metadata_url)
    keys = ClusterKeys(scope)
    async with EtcdClient(endpoints, timeout_s=60.0) as etcd:
        ids = await _allocate_ids(etcd, keys, count)
        gate = asyncio.Semaphore(_TXNS_IN_FLIGHT)

        async def create(at: int) -> None:
            async with gate:
                # Encoded here, while other transactions are in flight.
                chunk = ids[at:at + CREATE_BATCH_COUNT_MAX]
                values = [encode_metadata(replace(templates[(at + i) % len(templates)],
                                                  ledger_id=lid))
                          for i, lid in enumerate(chunk)]
                created = await etcd.txn(
                    [Compare(keys.ledger(lid), "CREATE", 0) for lid in chunk],
                    [Put(keys.ledger(lid), v) for lid, v in zip(chunk, values, strict=True)])
                if not created.succeeded:
                    raise RuntimeError(f"ledger keys from {chunk[0]} exist already")
        await asyncio.gather(*(create(at)
                               for at in range(0, count, CREATE_BATCH_COUNT_MAX)))
    return ids


async def _allocate_ids(etcd: EtcdClient, keys: ClusterKeys, count: int) -> list[int]:
    """Ids in blocks taken as a node takes them (``EtcdMetadataStore.allocate_ledger_id``:
    block b is the id key's version after a put), so that the id key ends past them
    and a later create starts in a block above; the last block's rest is left unused."""
    ids: list[int] = []
    while len(ids) < count:
        block = await etcd.next_id(keys.ledger_ids)
        ids.extend(range(block * LEDGER_ID_BLOCK_SIZE, (block + 1) * LEDGER_ID_BLOCK_SIZE))
    return ids[:count]


def _seed_replicas(settings: EngineSettings, ledger_ids: Sequence[int], payload: bytes) -> None:
    """Each ledger's replica in a node's stores: its entry 0 as a replica stores it
    (the prefix of epoch and length after, then the payload; its CRC the stored
    bytes') in the entry logs under the replica's storage id, its location in the
    index, and its record, as a checkpoint after the add commits them."""
    stored = replica_stored(_EPOCH, len(payload), payload)
    crc = crc32c.crc32c(stored)
    index, entry_log, journal, _node_key = open_stores(settings)
    try:
        for chunk in _chunks(ledger_ids, _BATCH):
            batch = index.batch()
            for lid in chunk:
                storage_id = replica_storage_id(lid)
                batch.put_location(storage_id, 0, entry_log.append(storage_id, 0, stored, crc))
                batch.put_replica(ReplicaRecord(lid, _EPOCH, _REPLICA_LAC, _EPOCH))
            entry_log.sync()  # the entries durable before the index points at them
            index.commit(batch)
    finally:
        entry_log.close()
        journal.close()
        index.close()


def _chunks(items: Sequence[int], size: int) -> Iterator[Sequence[int]]:
    for at in range(0, len(items), size):
        yield items[at:at + size]
