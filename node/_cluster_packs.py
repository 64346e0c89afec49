"""Packing small CLOSED ledgers into shared objects in cluster mode (docs/cluster.md §10.1).

The standalone packer (``offload.Packer``) runs unchanged on the cluster's
ledger source; what differs is who may change a ledger's offload state.  Here
it is the node holding the ledger's offload lock (``{scope}/offload-locks/{id}``,
under its lease), and every state it writes is an etcd transaction that also
compares the lock's lease (``ClusterOffload.set_states``): a node whose lease
expired mid-pack changes nothing after that, whatever it still uploads.

- **Gathering**: a closed ledger small enough to pack (``offload.packable``)
  waits here, its lock held, until ``pack_size_bytes`` are waiting or the first
  has waited ``pack_wait_s``; then one pack is written, and the locks go.
- **A pack cut short** (its node died, or lost its lease, between marking the
  members and marking them packed): whoever sweeps a member IN_PROGRESS takes
  its lock and resolves that member alone: kept if the pack's index is written
  and holds it (the data was checked before the index was written), else the
  pack is deleted and the member gathered again.  Members are resolved one by
  one, each under its own lock, so no walk over the ledgers finds them.
- **Rewriting**: a node that deletes a packed ledger looks at its pack (the
  pack's index names the members; the watched metadata says which still point
  at it) and, once less than ``pack_live_fraction_min`` is live, takes the
  pack's lock and every live member's, copies them into a new pack, repoints
  them and deletes the old pack ``pack_delete_delay_s`` later.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

from cluster import ClusterKeys, Compare, Etcd, Put
from common.errors import LedgerdError, MetadataUnavailable
from ledger import LedgerInfo, OffloadInfo, OffloadState
from offload import (
    ObjectNotFound,
    ObjectStore,
    OffloadSettings,
    Packer,
    PackTable,
    decode_pack_index,
    pack_frame_bytes,
    packable,
    points_into,
)

from ._bridge import blocking

log = logging.getLogger("ledgerd.cluster.pack")

# Locks taken in one etcd transaction (etcd refuses more than 128 operations).
LOCKS_PER_TXN = 64
# A pack no ledger points at is deleted by the audit once this old (its id
# starts with its epoch milliseconds); a rewrite repoints its members within
# half of it or gives up (``Packer.rewrite``'s ``mark_by``).
ORPHAN_AGE_S = 3600.0
# Deletions seen within this long are looked at together, per pack.
CHECK_DELAY_S = 1.0
DISCARDED_MAX = 64
# Gathering waits while ledgers keep coming: until none came for QUIET_S, or
# the first has waited WAIT_FACTOR_MAX x pack_wait_s.
QUIET_S = 1.0
WAIT_FACTOR_MAX = 4


@dataclass
class PackUsage:
    """What a full audit's walk over the ledgers' metadata found of packs: each
    pack's live bytes and size (``offload.PackTable``, as the standalone worker
    keeps them), and every pack a record names, members being packed included.
    A handful of entries per GiB of packs, whatever the ledgers."""

    table: PackTable = field(default_factory=PackTable)
    named: set[str] = field(default_factory=set)

    def add(self, info: OffloadInfo) -> None:
        if info.pack_key is not None:
            self.named.add(info.pack_key)
            self.table.add(info)


class ClusterPacks:
    def __init__(self, *, etcd: Etcd, keys: ClusterKeys, me: str,
                 lease: Callable[[], int | None], packer: Packer, store: ObjectStore,
                 settings: OffloadSettings,
                 get_ledger: Callable[[int], Awaitable[LedgerInfo | None]],
                 records: Callable[[Collection[int]], dict[int, OffloadInfo]],
                 fresh_records: Callable[[Collection[int]],
                                         Awaitable[dict[int, OffloadInfo]]],
                 set_states: Callable[[Mapping[int, OffloadInfo]], Awaitable[object]],
                 spawn: Callable[[Coroutine[Any, Any, None]], None],
                 offload_alone: Callable[[int, bytes], None],
                 on_done: Callable[[int], None]) -> None:
        """``get_ledger``: a ledger's info, None once deleted; ``records``: the
        watched metadata's offload record of each ledger that still has one
        (``fresh_records``: the same read from etcd);
        ``set_states``: ``ClusterOffload.set_states`` (fenced by the locks);
        ``offload_alone``: offload a ledger (its lock held) with objects of its
        own; ``on_done``: a ledger's lock is about to go."""
        self._etcd, self._keys, self._me, self._lease = etcd, keys, me, lease
        self._packer, self._store, self._settings = packer, store, settings
        self._get_ledger, self._records, self._set_states = get_ledger, records, set_states
        self._fresh_records = fresh_records
        self._spawn, self._offload_alone, self._on_done = spawn, offload_alone, on_done
        self._waiting: dict[int, bytes] = {}  # ledger id -> its offload lock
        self._waiting_bytes = 0
        self._timer: asyncio.TimerHandle | None = None
        self._first_added = self._last_added = 0.0
        self._one_at_a_time = asyncio.Lock()
        self._to_check: set[str] = set()
        # Packs cut short that this node deleted (oldest first): their other
        # members go straight back to gathering.
        self._discarded: dict[str, None] = {}

    # --- gathering --------------------------------------------------------------------

    def add(self, ledger: LedgerInfo, lock: bytes) -> None:
        """Pack ``ledger`` (its offload lock held) with the next pack."""
        if ledger.ledger_id in self._waiting:
            return
        now = time.monotonic()
        if not self._waiting:
            self._first_added = now
        self._last_added = now
        self._waiting[ledger.ledger_id] = lock
        self._waiting_bytes += pack_frame_bytes(ledger)
        if self._waiting_bytes >= self._settings.pack_size_bytes:
            self._flush_soon(0.0)
        elif self._timer is None:
            self._flush_soon(self._settings.pack_wait_s)

    def _flush_soon(self, delay_s: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(delay_s, self._on_timer)

    def _on_timer(self) -> None:
        """Pack what waits, unless ledgers are still coming (one came within the
        last ``QUIET_S``): then wait on, up to ``WAIT_FACTOR_MAX`` x
        ``pack_wait_s`` in all, so that a stream of closes makes full packs,
        as the standalone worker packs once its queue is empty."""
        self._timer = None
        now = time.monotonic()
        quiet = min(QUIET_S, self._settings.pack_wait_s)
        if (self._waiting and self._waiting_bytes < self._settings.pack_size_bytes
                and now - self._last_added < quiet
                and now - self._first_added < WAIT_FACTOR_MAX * self._settings.pack_wait_s):
            self._flush_soon(quiet)
            return
        self._spawn(self._flush())

    async def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        waiting, self._waiting, self._waiting_bytes = self._waiting, {}, 0
        if not waiting:
            return
        try:
            async with self._one_at_a_time:
                await blocking(self._packer.pack, sorted(waiting))
        except Exception as exc:
            log.error("packing failed", extra={"ledgers": len(waiting), "error": str(exc)})
            await self._mark_failed(waiting, exc)
        finally:
            await self._release(waiting)

    async def _mark_failed(self, locks: dict[int, bytes], exc: Exception) -> None:
        """Members the failed pack marked IN_PROGRESS go FAILED (a later request
        packs them again); those it did not reach keep their state."""
        failed = OffloadInfo(state=OffloadState.FAILED, error=f"{type(exc).__name__}: {exc}")
        records = self._records(list(locks))
        changes = {lid: failed for lid, info in records.items()
                   if info.state is not OffloadState.OFFLOADED}
        with contextlib.suppress(LedgerdError):
            await self._set_states(changes)

    # --- a pack cut short ---------------------------------------------------------------

    async def resolve(self, ledger_id: int, pack_key: str, lock: bytes) -> None:
        """``ledger_id`` is IN_PROGRESS naming ``pack_key`` and its lock is ours."""
        again: LedgerInfo | None = None
        try:
            ledger = await self._get_ledger(ledger_id)
            if ledger is not None and ledger.offload.pack_key == pack_key \
                    and ledger.offload.state is OffloadState.IN_PROGRESS:
                if pack_key in self._discarded:  # its other members need no S3 call
                    again = ledger
                else:
                    async with self._one_at_a_time:
                        if await blocking(self._packer.recover, {pack_key: [ledger]}):
                            self._discarded[pack_key] = None
                            while len(self._discarded) > DISCARDED_MAX:
                                del self._discarded[next(iter(self._discarded))]
                            again = await self._get_ledger(ledger_id)
        except Exception as exc:
            log.warning("resolving a pack cut short failed", extra={
                "ledger_id": ledger_id, "pack_key": pack_key, "error": str(exc)})
        if again is None:
            await self._release({ledger_id: lock})
        elif packable(again, self._settings):
            log.info("a pack cut short is gone: its member waits for the next",
                     extra={"ledger_id": ledger_id, "pack_key": pack_key})
            self.add(again, lock)
        else:  # OFFLOAD_PACK turned off since: objects of its own
            self._offload_alone(ledger_id, lock)

    # --- rewriting ------------------------------------------------------------------

    def member_deleted(self, info: OffloadInfo) -> None:
        """A packed ledger was deleted: look at its pack soon."""
        if info.pack_key is None or info.state is not OffloadState.OFFLOADED:
            return
        first = not self._to_check
        self._to_check.add(info.pack_key)
        if first:
            asyncio.get_running_loop().call_later(
                CHECK_DELAY_S, lambda: self._spawn(self._check_packs()))

    async def _check_packs(self) -> None:
        checking, self._to_check = self._to_check, set()
        for pack_key in sorted(checking):
            try:
                await self._check(pack_key)
            except Exception as exc:
                log.warning("pack check failed", extra={"pack_key": pack_key,
                                                        "error": str(exc)})

    async def _check(self, pack_key: str) -> None:
        directory, pack_id = self._packer.layout.pack_of(pack_key)
        index_key = directory + "index"
        try:
            raw = await blocking(self._store.get_object, index_key)
        except ObjectNotFound:
            return  # rewritten and deleted by another node meanwhile
        pack = decode_pack_index(raw, key=index_key)
        members = {m.ledger_id: m for m in pack.members}
        records = self._records(list(members))
        live_bytes = sum(members[lid].length_bytes for lid, info in records.items()
                         if points_into(info, pack_key, members[lid]))
        if pack.data_length_bytes and \
                live_bytes / pack.data_length_bytes >= self._settings.pack_live_fraction_min:
            return
        pack_lock = self._keys.pack_lock(pack_id)
        if not await self._lock([pack_lock]):
            return  # another node is rewriting it
        rewritten = False
        try:
            # Every member's lock, not only those the watched metadata shows live:
            # it may lag, and a live member left unlocked could not be repointed.
            rewritten = await self._rewrite(pack_key, members)
        finally:
            if rewritten:
                self._spawn(self._delete_later(pack_key, pack_lock, list(members)))
            else:
                await self._unlock(pack_lock)

    async def _delete_later(self, pack_key: str, pack_lock: bytes,
                            members: list[int]) -> None:
        """Delete a pack nothing points at any more, ``pack_delete_delay_s`` from
        now: reads that located a member in it just before still find it.  Its
        members are read from etcd first: one still pointing at it (a repoint
        that did not land) keeps it, for the audit to look at again."""
        try:
            await asyncio.sleep(self._settings.pack_delete_delay_s)
            still = [lid for lid, info in (await self._fresh_records(members)).items()
                     if info.pack_key == pack_key]
            if still:
                log.warning("a pack rewritten is still pointed at: kept", extra={
                    "pack_key": pack_key, "ledgers": still[:10]})
                return
            await blocking(self._packer.delete_pack, pack_key)
        except Exception as exc:  # the audit's sweep deletes it later
            log.warning("deleting a pack failed", extra={"pack_key": pack_key,
                                                         "error": str(exc)})
        finally:
            await self._unlock(pack_lock)

    async def _unlock(self, key: bytes) -> None:
        with contextlib.suppress(MetadataUnavailable):
            await self._etcd.delete(key)

    async def _rewrite(self, pack_key: str, members: Collection[int]) -> bool:
        """Copy the live members into a new pack, under every member's lock;
        whether the old pack may go (after the delay and a last look)."""
        wanted = {lid: self._keys.offload_lock(lid) for lid in members}
        got = await self._lock(list(wanted.values()))
        locks = {lid: key for lid, key in wanted.items() if key in got}
        try:
            if len(locks) < len(wanted):
                return False  # a member is busy: a later deletion or audit looks again
            mark_by = time.time() + ORPHAN_AGE_S / 2
            async with self._one_at_a_time:
                await blocking(self._packer.rewrite, pack_key, mark_by=mark_by)
            return True
        finally:
            await self._release(locks)

    # --- the audit ---------------------------------------------------------------------

    async def audit(self, usage: PackUsage, bookies: Collection[str]) -> None:
        """After a full audit's walk (the auditor, on membership changes and
        every AUDIT_FULL_INTERVAL): look again at packs mostly dead (their
        deleting node may have been away) and delete packs no ledger points at
        that ``bookies`` wrote (a rewriter that died before deleting the old
        one), once older than ``ORPHAN_AGE_S``."""
        for pack_key in usage.table.live_bytes:
            if usage.table.live_fraction(pack_key) < self._settings.pack_live_fraction_min:
                self._to_check.add(pack_key)
        oldest = (time.time() - ORPHAN_AGE_S) * 1000
        for bookie_id in sorted(bookies):
            found = await blocking(self._packer.packs_in_bucket, bookie_id)
            for data_key in sorted(found - usage.named):
                if int(self._packer.layout.pack_of(data_key)[1].partition("-")[0]) < oldest:
                    log.info("deleting a pack no ledger points at", extra={
                        "pack_key": data_key})
                    await blocking(self._packer.delete_pack, data_key)
        await self._check_packs()

    # --- locks and states -----------------------------------------------------------

    async def _lock(self, keys: list[bytes]) -> set[bytes]:
        """Create what of ``keys`` nobody holds, under this node's lease; those
        created."""
        lease = self._lease()
        if lease is None:
            return set()
        value = json.dumps({"bookie_id": self._me}).encode()
        got: set[bytes] = set()
        for at in range(0, len(keys), LOCKS_PER_TXN):
            chunk = keys[at:at + LOCKS_PER_TXN]
            result = await self._etcd.txn([Compare(k, "CREATE", 0) for k in chunk],
                                          [Put(k, value, lease=lease) for k in chunk])
            if result.succeeded:
                got.update(chunk)
                continue
            for key in chunk:  # one is held: each on its own
                if await self._etcd.create(key, value, lease=lease) is not None:
                    got.add(key)
        return got

    async def _release(self, locks: dict[int, bytes]) -> None:
        for ledger_id, key in locks.items():
            self._on_done(ledger_id)
            await self._unlock(key)

