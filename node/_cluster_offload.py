"""Offload, GC and the orphan sweep in cluster mode (docs/cluster.md §10).

- **Offload**: a CLOSED ledger is offloaded once, by the node that holds
  ``{scope}/offload-locks/{id}`` (created under its lease).  That node runs the
  standalone ``offload.Offloader`` state machine on a worker thread, on a
  :class:`_ClusterSource` that reads entries through the cluster read path and
  CASes each offload state into the ledger's metadata; the lock goes with the
  run (or with the lease of a node that dies; a later round resumes it from the
  state in the metadata).  The objects live under the uploader's key prefix,
  recorded in the metadata, so any node reads them back.
- **GC**: every node drops its replica of a ledger whose metadata says
  OFFLOADED for longer than ``OFFLOAD_DELETION_LAG``; reads then go to S3.
- **Orphans**: every node drops its replica of a ledger that has no metadata
  any more (deleted while it was away).
- **Tiering** (``TIER_OPEN_LEDGERS``): the writer of an open ledger runs the
  standalone ``offload.TierWorker`` over the ledgers it writes.  Each step holds
  the ledger's offload lock (so it never overlaps the ledger's offload, on any
  node) and ends by CASing the position into the ledger's metadata (``tier``,
  naming this node, whose key prefix holds the chunks).  At close the ledger
  is offloaded whatever ``OFFLOAD_AFTER_CLOSE`` says, by whichever node takes
  its lock, under the tiering node's key prefix, so the chunks are
  consolidated rather than sent again.  A new writer after a takeover does not
  tier a ledger another node tiered.  Replicas keep the tiered entries until
  the ledger is offloaded (the standalone engine drops them earlier).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import Callable, Collection, Coroutine, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from cluster import (
    Compare,
    Get,
    LedgerMetadata,
    LedgerState,
    Put,
    decode_metadata,
    encode_metadata,
)
from common.errors import (
    BadRequest,
    LedgerdError,
    MetadataConflict,
    MetadataUnavailable,
    NoSuchLedger,
    NotSealed,
)
from ledger import Bookie, Entry, LedgerInfo, OffloadInfo, OffloadState, TierPosition
from ledger import LedgerState as InfoState
from offload import (
    ObjectStore,
    Offloader,
    OffloadSettings,
    Packer,
    Progress,
    TierWorker,
    frame_bytes,
    packable,
    tiered_bytes,
)

from ._bridge import blocking, settle
from ._cluster_ledgers import ClusterLedgers, info_of_closed
from ._cluster_metadata import WALK_TURN
from ._cluster_packs import ClusterPacks, PackUsage
from ._cluster_reads import offload_info, tier_doc, tier_of, tier_owner
from ._cluster_runtime import ClusterRuntime

log = logging.getLogger("ledgerd.cluster")

T = TypeVar("T")
CAS_ATTEMPTS_MAX = 8
# Ledgers whose offload states one etcd transaction writes: two compares, one
# put and two gets each, under etcd's 128 operations of each kind.
STATES_PER_TXN = 60
# Ledgers one etcd transaction reads back (a Get each, under those 128).
READS_PER_TXN = 120
SWEEP_EVERY_S = 5.0
READ_BATCH = 64


class ClusterOffload:
    def __init__(self, rt: ClusterRuntime, ledgers: ClusterLedgers, store: ObjectStore,
                 settings: OffloadSettings) -> None:
        self._rt = rt
        self._ledgers = ledgers
        self._store = store
        self._settings = settings
        self._executor = ThreadPoolExecutor(4, thread_name_prefix="ledgerd-cluster-offload")
        source = self._source = _ClusterSource(self)
        self._offloader = Offloader(source, store, settings, executor=self._executor)
        self._progress: dict[int, Progress] = {}
        packer = Packer(source, store, settings, executor=self._executor,
                        delete_ledger_objects=source.delete_ledger_objects,
                        delete_unindexed=False)
        self.packs = ClusterPacks(
            etcd=rt.etcd, keys=rt.keys, me=rt.me, lease=lambda: rt.membership.lease_id,
            packer=packer, store=store, settings=settings, get_ledger=self._ledger_or_none,
            records=self._records, fresh_records=self._fresh_records,
            set_states=self.set_states, spawn=rt.spawn,
            offload_alone=self._offload_alone, on_done=self._done)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.offloaded = 0
        # Offloaders of ledgers another node tiered, by that node: under its prefix.
        self._offloaders = {rt.me: self._offloader}
        # Positions this node recorded, of open ledgers it writes (few: each one
        # tiered holds a chunk or more).
        self._tiered: dict[int, TierPosition] = {}
        self.tiering: TierWorker | None = None
        if settings.tier_open_ledgers:
            self.tiering = TierWorker(
                _TierSource(self), store, settings, executor=self._executor,
                guard=_OffloadLocks(self), on_closed=self._tiered_closed,
                on_deleted=lambda ledger_id: None,  # ledger_deleted removes the chunks
                on_tiered=lambda ledger_id: None)

    def start(self) -> None:
        """Start tiering (the calls its thread makes run on ``loop``, which the node
        set as it began to start)."""
        assert self.loop is not None
        if self.tiering is not None:
            self.tiering.start()

    async def stop(self) -> None:
        """Stop tiering after its step under way (its thread waits on this loop)."""
        if self.tiering is not None:
            await blocking(self.tiering.stop, 30.0)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    def statistics(self) -> dict[str, float]:
        """What metrics expose as ``ledgerd_offload_<name>``, as a standalone node's
        offload service does: offloads under way here, the object store's requests
        by kind (``requests_put`` ...), reads of offloaded ledgers included, and
        tiering's steps and backlog when it runs."""
        tiering = {} if self.tiering is None else self.tiering.statistics()
        return {"offloads_in_progress": len(self._progress), **tiering,
                **self._store.statistics()}

    def _offloader_of(self, md: LedgerMetadata) -> Offloader:
        """The offloader whose keys are the ledger's: those of the node that tiered
        it while open (its chunks are consolidated in place), else this node's."""
        owner = tier_owner(md) or self._rt.me
        found = self._offloaders.get(owner)
        if found is None:
            found = self._offloaders[owner] = Offloader(
                self._source, self._store,
                dataclasses.replace(self._settings, bookie_id=owner), executor=self._executor)
        return found

    # --- triggers --------------------------------------------------------------------

    async def request(self, md: LedgerMetadata) -> OffloadInfo:
        """Offload a CLOSED ledger unless it is offloaded or another node holds its
        lock (idempotent); answers the ledger's offload state."""
        if md.state is not LedgerState.CLOSED:
            raise NotSealed(f"ledger {md.ledger_id} is {md.state}; only CLOSED ledgers can "
                            "be offloaded")
        info = offload_info(md)
        if info.state is OffloadState.OFFLOADED or md.ledger_id in self._progress:
            return info
        lease = self._rt.membership.lease_id
        if lease is None:
            return info
        lock = self._rt.keys.offload_lock(md.ledger_id)
        value = json.dumps({"bookie_id": self._rt.me}).encode()
        if await self._rt.etcd.create(lock, value, lease=lease) is None:
            return info  # another node is on it
        self._progress[md.ledger_id] = Progress(0)
        if info.state is OffloadState.IN_PROGRESS and info.pack_key is not None:
            # A pack cut short (its node died or lost its lease before marking it).
            self._rt.spawn(self.packs.resolve(md.ledger_id, info.pack_key, lock))
            return info
        pending = OffloadInfo(state=OffloadState.PENDING, bucket=self._store.bucket,
                              key_prefix=self._offloader_of(md).layout.ledger_prefix(
                                  md.ledger_id),
                              failures=info.failures)
        try:
            if info.state in (OffloadState.NONE, OffloadState.FAILED):
                await self.set_state(md.ledger_id, pending)
                info = pending
        except BaseException:
            self._progress.pop(md.ledger_id, None)
            with contextlib.suppress(MetadataUnavailable):
                await self._rt.etcd.delete(lock)
            raise
        ledger = info_of_closed(md)
        if packable(ledger, self._settings):
            self.packs.add(ledger, lock)
        else:
            self._offload_alone(md.ledger_id, lock)
        return info

    def _offload_alone(self, ledger_id: int, lock: bytes) -> None:
        """Offload a ledger (its lock held) with objects of its own."""
        self._rt.spawn(self._run(ledger_id, lock))

    def after_close(self, md: LedgerMetadata) -> None:
        """Offload a ledger once closed with OFFLOAD_AFTER_CLOSE, or when it was
        tiered while open (its chunks are consolidated), as standalone does."""
        if self._settings.after_close or (
                md.tier is not None and offload_info(md).state is OffloadState.NONE):
            self._rt.spawn(self._quietly(self.request(md)))

    def _tiered_closed(self, ledger_id: int) -> None:
        """The tiering thread saw a ledger it tiered closed (maybe while a step ran,
        when the close's own request found the lock taken by that step)."""
        async def closed() -> None:
            with contextlib.suppress(NoSuchLedger):
                md, _revision = await self._rt.metadata.read(ledger_id, fresh=True)
                self.after_close(md)
        self._wait(closed())

    def _wait(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the serving loop from a worker thread and wait for it."""
        loop = self.loop
        assert loop is not None
        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(coro, loop)
        return future.result()

    async def _run(self, ledger_id: int, lock: bytes) -> None:
        offloader = self._offloader
        try:
            with contextlib.suppress(NoSuchLedger):
                offloader = self._offloader_of((await self._rt.metadata.read(ledger_id))[0])
            progress = self._progress[ledger_id]
            await blocking(offloader.offload, ledger_id, progress)
            self.offloaded += 1
        except NoSuchLedger:
            await self.delete_objects(ledger_id, offloader.layout.ledger_prefix(ledger_id))
        except Exception as exc:
            log.error("offload failed", extra={"ledger_id": ledger_id, "error": str(exc)})
            with contextlib.suppress(LedgerdError):
                await self.set_state(ledger_id, OffloadInfo(
                    state=OffloadState.FAILED, bucket=self._store.bucket,
                    key_prefix=offloader.layout.ledger_prefix(ledger_id),
                    error=f"{type(exc).__name__}: {exc}"))
        finally:
            self._progress.pop(ledger_id, None)
            with contextlib.suppress(MetadataUnavailable):
                await self._rt.etcd.delete(lock)

    def progress(self, ledger_id: int) -> tuple[int, int] | None:
        running = self._progress.get(ledger_id)
        return None if running is None else running.snapshot()

    def _done(self, ledger_id: int) -> None:
        self._progress.pop(ledger_id, None)

    async def audit_packs(self, usage: PackUsage, bookies: Collection[str]) -> None:
        """A full audit's tally of the packs (the auditor's node only)."""
        try:
            await self.packs.audit(usage, bookies)
        except Exception as exc:
            log.warning("pack audit failed", extra={"error": str(exc)})

    async def ledger_deleted(self, md: LedgerMetadata) -> None:
        """A deleted ledger's objects go: those of its offload (a packed one lowers
        its pack's live bytes instead; the pack is rewritten once too little of it
        is live) and the chunks tiered while it was open."""
        prefixes = set()
        if md.offload:
            info = offload_info(md)
            self.packs.member_deleted(info)
            prefixes.add(info.key_prefix or self._offloader.layout.ledger_prefix(md.ledger_id))
        if md.tier is not None:
            prefixes.add(self._offloader_of(md).layout.ledger_prefix(md.ledger_id))
        for prefix in sorted(prefixes):
            await self.delete_objects(md.ledger_id, prefix)

    async def delete_objects(self, ledger_id: int, key_prefix: str | None = None) -> None:
        prefix = key_prefix or self._offloader.layout.ledger_prefix(ledger_id)

        def delete() -> None:
            keys = [o.key for o in self._store.list_objects(prefix)]
            self._store.delete_objects(keys)
        try:
            await blocking(delete)
        except Exception as exc:
            log.warning("deleting the S3 objects of deleted ledger %d failed: %s", ledger_id,
                        exc)

    # --- the metadata's offload state -------------------------------------------------

    async def set_state(self, ledger_id: int, info: OffloadInfo) -> LedgerInfo:
        """Write ``info`` into the ledger's metadata, this node holding its lock."""
        written = await self.set_states({ledger_id: info})
        if not written:
            raise MetadataConflict(f"ledger {ledger_id}: deleted, or this node no longer "
                                   "holds its offload lock")
        return written[0]

    async def set_states(self, infos: Mapping[int, OffloadInfo]) -> list[LedgerInfo]:
        """Write each ledger's offload record into its metadata, in transactions of
        ``STATES_PER_TXN`` ledgers, each change on the condition that this node
        still holds the ledger's offload lock under its lease: a node that lost
        its lease mid-offload (a partition) changes nothing after that.  Leaves
        out, and returns without, a ledger deleted or whose lock is gone."""
        ids = sorted(infos)
        written: list[LedgerInfo] = []
        for at in range(0, len(ids), STATES_PER_TXN):
            written += await self._set_some({i: infos[i] for i in ids[at:at + STATES_PER_TXN]})
        return written

    async def _set_some(self, infos: dict[int, OffloadInfo]) -> list[LedgerInfo]:
        lease = self._rt.membership.lease_id
        keys = self._rt.keys
        known: dict[int, tuple[LedgerMetadata, int]] = {}
        for ledger_id in infos:
            with contextlib.suppress(NoSuchLedger):
                known[ledger_id] = await self._rt.metadata.read(ledger_id)
        for _ in range(CAS_ATTEMPTS_MAX):
            if not known or lease is None:
                return []
            proposals: dict[int, LedgerMetadata] = {}
            compares: list[Compare] = []
            for ledger_id, (md, revision) in known.items():
                if md.state is not LedgerState.CLOSED:
                    raise BadRequest(f"ledger {ledger_id} is not closed")
                proposals[ledger_id] = dataclasses.replace(md, offload=infos[ledger_id].to_doc())
                compares += [Compare(keys.ledger(ledger_id), "MOD", revision),
                             Compare(keys.offload_lock(ledger_id), "LEASE", lease)]
            ids = list(proposals)
            result = await self._rt.etcd.txn(
                compares, [Put(keys.ledger(i), encode_metadata(proposals[i])) for i in ids],
                [op for i in ids for op in (Get(keys.ledger(i)), Get(keys.offload_lock(i)))])
            if result.succeeded:
                return [info_of_closed(proposals[i]) for i in ids]
            # Why not: take each ledger's current value; leave out those gone and
            # those whose lock this node lost.
            known = {}
            for n, ledger_id in enumerate(ids):
                ledger_kv, lock_kv = result.gets[2 * n], result.gets[2 * n + 1]
                if ledger_kv is None or lock_kv is None or lock_kv.lease != lease:
                    continue
                md = decode_metadata(ledger_kv.value, key=ledger_kv.key.decode())
                known[ledger_id] = (md, ledger_kv.mod_revision)
        raise MetadataConflict(f"ledgers {sorted(infos)}: their offload states kept changing")

    async def _ledger_or_none(self, ledger_id: int) -> LedgerInfo | None:
        try:
            return await self._ledgers.get(ledger_id)
        except NoSuchLedger:
            return None

    def _records(self, ledger_ids: Collection[int]) -> dict[int, OffloadInfo]:
        return {md.ledger_id: offload_info(md) for md, _ in self._rt.metadata.cached(ledger_ids)}

    async def _fresh_records(self, ledger_ids: Collection[int]) -> dict[int, OffloadInfo]:
        """``_records`` read from etcd now, ``READS_PER_TXN`` ledgers per round
        trip (a pack of small ledgers has thousands of members)."""
        ids, keys = list(ledger_ids), self._rt.keys
        found: dict[int, OffloadInfo] = {}
        for at in range(0, len(ids), READS_PER_TXN):
            some = ids[at:at + READS_PER_TXN]
            result = await self._rt.etcd.txn((), [Get(keys.ledger(i)) for i in some])
            for ledger_id, kv in zip(some, result.gets, strict=True):
                if kv is not None:
                    found[ledger_id] = offload_info(
                        decode_metadata(kv.value, key=kv.key.decode()))
        return found

    # --- tiering of open ledgers ------------------------------------------------------

    def tier_candidates(self) -> list[int]:
        """Open ledgers this node writes that may hold a chunk to tier: a full chunk
        of acknowledged frames beyond what this node recorded, or a position of
        its own (the tiering thread then sees each close).  From the writers'
        own figures: no metadata is unpacked for a ledger with nothing to tier."""
        writers, chunk = self._ledgers.writers, self._settings.chunk_size_bytes
        writing = writers.writing()
        if self._tiered:
            held = set(writing)
            self._tiered = {i: p for i, p in self._tiered.items() if i in held}
        found = []
        for ledger_id in writing:
            writer = writers.held(ledger_id)
            if writer is None:
                continue
            recorded = self._tiered.get(ledger_id)
            done = 0 if recorded is None else tiered_bytes(recorded)
            if recorded is None and frame_bytes(writer.lac, writer.lac_length) - done < chunk:
                continue
            if tier_owner(writer.metadata) in (None, self._rt.me):
                found.append(ledger_id)
        return found

    async def record_tier(self, ledger_id: int, position: TierPosition) -> LedgerInfo:
        """Record ``position`` in the ledger's metadata (``tier``, naming this node),
        on the condition that this node holds the ledger's offload lock: positions
        only grow, and none is written once an offload began."""
        keys, lease = self._rt.keys, self._rt.membership.lease_id
        for _ in range(CAS_ATTEMPTS_MAX):
            md, revision = await self._rt.metadata.read(ledger_id, fresh=True)
            if lease is None:
                break
            recorded = tier_of(md)
            if _order(position) <= _order(recorded):
                return await self._ledgers.get(ledger_id)
            if tier_owner(md) not in (None, self._rt.me) \
                    or offload_info(md).state is not OffloadState.NONE:
                raise MetadataConflict(f"ledger {ledger_id}: tiered by another node, or "
                                       "its offload began")
            proposal = dataclasses.replace(md, tier=tier_doc(self._rt.me, position))
            result = await self._rt.etcd.txn(
                [Compare(keys.ledger(ledger_id), "MOD", revision),
                 Compare(keys.offload_lock(ledger_id), "LEASE", lease)],
                [Put(keys.ledger(ledger_id), encode_metadata(proposal))])
            if result.succeeded:
                self._rt.metadata.remember(proposal, result.revision)
                self._ledgers.writers.adopt(proposal, result.revision, base_revision=revision)
                if proposal.state is LedgerState.CLOSED:
                    self._tiered.pop(ledger_id, None)
                else:
                    self._tiered[ledger_id] = position
                return await self._ledgers.get(ledger_id)
        raise MetadataConflict(f"ledger {ledger_id}: its tier position could not be recorded "
                               "(its metadata kept changing, or this node lost its lease)")

    # --- resume, GC, orphans (every node, every few seconds) ----------------------------

    async def sweep(self, bookie: Bookie, *, deletion_lag_s: float,
                    ledger_ids: Collection[int] | None = None,
                    later: Callable[[float, int], None] | None = None) -> None:
        """Resume offloads nobody holds; drop local replicas that are garbage.  Of
        ``ledger_ids`` only, else of every ledger (from the watched metadata)."""
        metadata = self._rt.metadata
        for md, _revision in metadata.cached(metadata.noting_offload(ledger_ids)):
            if offload_due(md):
                await self._quietly(self.request(md))
        await sweep_replicas(self._rt, bookie, deletion_lag_s=deletion_lag_s,
                             ledger_ids=ledger_ids, later=later)

    @staticmethod
    async def _quietly(call: Coroutine[Any, Any, Any]) -> None:
        try:
            await call
        except LedgerdError as exc:
            log.info("offload not started: %s", exc)


async def sweep_replicas(rt: ClusterRuntime, bookie: Bookie, *,
                         deletion_lag_s: float | None,
                         ledger_ids: Collection[int] | None = None,
                         later: Callable[[float, int], None] | None = None) -> list[int]:
    """Drop this bookie's replicas of deleted ledgers and, past the lag, of offloaded
    ones — of ``ledger_ids`` only, else of every replica it holds; ``later(when,
    ledger_id)`` hears of an offloaded one not due yet.  The metadata comes from the
    watched cache (etcd only for a ledger the cache lacks).  Returns those dropped."""
    dropped: list[int] = []
    now = time.time()
    held = bookie.replicas.ledger_ids() if ledger_ids is None else [
        i for i in ledger_ids if bookie.replicas.holds(i)]
    metadata = rt.metadata
    for n, ledger_id in enumerate(held):
        if n % WALK_TURN == WALK_TURN - 1:
            await asyncio.sleep(0)  # a million replicas: other tasks run meanwhile
        if metadata.synced and metadata.notes_offload(ledger_id) is False:
            continue  # a live ledger never offloaded: the flags say so, nothing unpacked
        try:
            md: LedgerMetadata | None = (await rt.metadata.read(ledger_id))[0]
        except NoSuchLedger:
            md = None
        except MetadataUnavailable:
            return dropped
        if md is not None:
            info = offload_info(md)
            if deletion_lag_s is None or info.state is not OffloadState.OFFLOADED \
                    or info.offloaded_at is None:
                continue
            due = info.offloaded_at + deletion_lag_s
            if due > now:
                if later is not None:
                    later(due, ledger_id)
                continue
        await settle(bookie.replicas.delete, ledger_id)
        dropped.append(ledger_id)
        log.info("local replica dropped", extra={
            "ledger_id": ledger_id, "reason": "offloaded" if md else "deleted"})
    return dropped


async def _first(batches: Any) -> list[Entry]:
    try:
        return list(await anext(batches, []))
    finally:
        await batches.aclose()


class _ClusterSource:
    """``offload.LedgerSource`` for the Offloader's worker thread: each call runs on
    the serving event loop and waits there."""

    def __init__(self, offload: ClusterOffload) -> None:
        self._offload = offload

    def _wait(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._offload._wait(coro)

    def get_ledger(self, ledger_id: int) -> LedgerInfo:
        return self._wait(self._offload._ledgers.get(ledger_id))

    def list_ledgers(self, *, state: Any = None, after: int | None = None,
                     limit: int = 100) -> tuple[list[LedgerInfo], int | None]:
        return self._wait(self._offload._ledgers.list_ledgers(state=state, after=after,
                                                              limit=limit))

    def scan_entries(self, ledger_id: int, start: int = 0,
                     end: int | None = None) -> Iterator[Entry]:
        ledgers = self._offload._ledgers
        info = self.get_ledger(ledger_id)
        last = info.last_add_confirmed if end is None else min(end, info.last_add_confirmed)
        entry_id = start
        while entry_id <= last:
            batches = ledgers.read_range(ledger_id, entry_id, last, count_max=READ_BATCH,
                                         bytes_max=8 << 20)
            batch = self._wait(_first(batches))
            if not batch:
                return
            yield from batch
            entry_id = batch[-1].entry_id + 1

    def set_offload(self, ledger_id: int, info: OffloadInfo) -> LedgerInfo:
        return self._wait(self._offload.set_state(ledger_id, info))

    def set_offloads(self, infos: Mapping[int, OffloadInfo]) -> list[LedgerInfo]:
        return self._wait(self._offload.set_states(infos))

    def delete_ledger_objects(self, ledger_id: int) -> None:
        self._wait(self._offload.delete_objects(ledger_id))

    def record_tier_position(self, ledger_id: int, position: TierPosition) -> LedgerInfo:
        return self._wait(self._offload.record_tier(ledger_id, position))

    @property
    def next_ledger_id(self) -> int:
        return 2**63 - 1


def offload_due(md: LedgerMetadata) -> bool:
    """Whether a sweep (re)starts the ledger's offload: one under way whose node
    let go of it, or a ledger tiered while open and closed since, whose close
    found its lock taken (a tiering step) and whose tiering node died since."""
    state = offload_info(md).state
    return state in (OffloadState.PENDING, OffloadState.IN_PROGRESS) or (
        state is OffloadState.NONE and md.tier is not None
        and md.state is LedgerState.CLOSED)


def _order(position: TierPosition) -> tuple[int, int]:
    """Tier positions only grow, ordered by (segment, byte position)."""
    return position.segment_first_entry_id, position.byte_position


class _TierSource(_ClusterSource):
    """What the tiering thread sees: as OPEN, the candidates among the ledgers this
    node writes (``ClusterOffload.tier_candidates``); nothing else is listed (a
    ledger in recovery is another node's to close, and closed ones reach the
    thread as the open ones it saw close)."""

    def list_ledgers(self, *, state: Any = None, after: int | None = None,
                     limit: int = 100) -> tuple[list[LedgerInfo], int | None]:
        if state is not InfoState.OPEN or after is not None:
            return [], None
        found: list[LedgerInfo] = []
        for ledger_id in self._wait(_on_loop(self._offload.tier_candidates)):
            with contextlib.suppress(NoSuchLedger):
                info = self.get_ledger(ledger_id)
                if info.state is InfoState.OPEN:
                    found.append(info)
        return found, None


class _OffloadLocks:
    """Each tiering step holds the ledger's offload lock (``{scope}/offload-locks/
    {id}`` under this node's lease), as an offload does: the two never overlap,
    on any node.  ``MetadataConflict`` (a ``Backpressure``) when it is taken."""

    def __init__(self, offload: ClusterOffload) -> None:
        self._offload = offload

    @contextlib.contextmanager
    def hold(self, ledger_id: int) -> Iterator[None]:
        offload = self._offload
        rt = offload._rt
        lease = rt.membership.lease_id
        if lease is None:
            raise MetadataConflict("this node holds no lease")
        lock = rt.keys.offload_lock(ledger_id)
        value = json.dumps({"bookie_id": rt.me, "for": "tiering"}).encode()
        if offload._wait(rt.etcd.create(lock, value, lease=lease)) is None:
            raise MetadataConflict(f"ledger {ledger_id}: its offload lock is taken")
        try:
            yield
        finally:
            with contextlib.suppress(MetadataUnavailable):
                offload._wait(rt.etcd.delete(lock))


async def _on_loop(call: Callable[[], T]) -> T:
    return call()
