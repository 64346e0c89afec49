"""A node in cluster mode: everything it runs besides the engine (docs/cluster.md).

:class:`ClusterNode` is built by ``Node.open`` when ``METADATA_URL`` is set, owns
the etcd client, the membership, the writers, recoveries and repairs it drives,
the auditor, the offload of closed ledgers and the sweep of garbage replicas, and
starts and stops them on the serving event loop (``start``/``stop``).  Its
``ledgers`` is the node's ledger API, backed by replication.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cluster import ClusterSettings, LedgerMetadata
from common.errors import (
    IdentityMismatch,
    LedgerdError,
    MetadataUnavailable,
    NotReady,
    WriterSuperseded,
)
from ledger import Bookie, LedgerLimits, OffloadState
from offload import ObjectStore, OffloadSettings, RemoteLedgerReader

from ._cluster_auditor import Auditor
from ._cluster_ledgers import ClusterLedgers
from ._cluster_membership import LocalStatus
from ._cluster_offload import ClusterOffload, offload_due, sweep_replicas
from ._cluster_password_key import agree_password_key
from ._cluster_reads import offload_info
from ._cluster_runtime import ClusterRuntime
from ._cookie import check_cookie, decommission, decommissioned
from ._replica_server import ReplicaServer

log = logging.getLogger("ledgerd.cluster")

SWEEP_EVERY_S = 5.0


class ClusterNode:
    def __init__(self, settings: ClusterSettings, *, bookie_id: str, bookie: Bookie,
                 data_dir: Path, replica_server: ReplicaServer, limits: LedgerLimits,
                 disk_usage: Callable[[], float], offload: OffloadSettings | None,
                 object_store: ObjectStore | None, remote: RemoteLedgerReader | None) -> None:
        self.settings = settings
        self._bookie = bookie
        self._data_dir = data_dir
        self._disk_usage = disk_usage
        self._offload_settings = offload
        self.runtime = ClusterRuntime(settings, me=bookie_id, replica_server=replica_server,
                                      limits=limits, remote=remote, status=self._status,
                                      on_lease_lost=self._lease_lost)
        self.ledgers = ClusterLedgers(self.runtime, limits=limits)
        self.auditor = Auditor(self.runtime, self.ledgers)
        self.offload: ClusterOffload | None = None
        if offload is not None and object_store is not None:
            self.offload = ClusterOffload(self.runtime, self.ledgers, object_store, offload)
            self.runtime.offload = self.offload
            self.ledgers.writers.on_closed.append(self.offload.after_close)
        self._started = False
        self._password_key: bytes | None = None  # the cluster's, once agreed at start
        self._sweep_all = True  # once at start: what changed while this node was down
        self._sweep_generation = -1
        self._sweep_ids: set[int] = set()
        self._sweep_due: list[tuple[float, int]] = []
        self.runtime.metadata.on_change.append(self._ledger_changed)
        self.runtime.metadata.on_reload.append(self._sweep_everything)

    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        if self.offload is not None:
            self.offload.loop = asyncio.get_running_loop()
        rt = self.runtime
        try:
            await check_cookie(rt.etcd, rt.keys, bookie_id=rt.me, data_dir=self._data_dir,
                               journal_id=self._bookie.journal.journal_id)
            # Before the node registers: no create or password check runs without it.
            key = await agree_password_key(rt.etcd, rt.keys, bookie_id=rt.me,
                                           data_dir=self._data_dir,
                                           fetch=rt.forward.password_key)
        except IdentityMismatch as exc:
            log.critical("refusing to serve: %s", exc, extra={"bookie_id": rt.me})
            raise
        self.ledgers.writers.use_password_key(key)
        self._password_key = key
        await self.runtime.start()
        if self.offload is not None:
            self.offload.start()
        self.runtime.spawn(self.auditor.run())
        self.runtime.spawn(self._resume_loop())
        self.runtime.spawn(self._sweep_loop())
        log.info("cluster node started", extra={"bookie_id": self.runtime.me,
                                                "url": self.settings.advertised_url})

    @property
    def password_key(self) -> bytes:
        """The cluster's password key, for another node that asks for it
        (``GET /internal/v1/password-key``); ``NotReady`` until this node agreed it."""
        if self._password_key is None:
            raise NotReady("this node has not agreed the cluster's password key yet; "
                           "ask another node, or retry")
        return self._password_key

    async def decommission(self, bookie_id: str) -> None:
        """Take a lost bookie out for good (docs/cluster.md §13.1)."""
        rt = self.runtime
        await decommission(rt.etcd, rt.keys, bookie_id, by=rt.me, at=time.time())

    async def stop(self) -> None:
        if not self._started:
            return
        self._started = False
        if self.offload is not None:
            await self.offload.stop()
        self.ledgers.writers.drop_all(NotReady("the node is shutting down"))
        await self.runtime.stop()
        if self.offload is not None:
            self.offload.close()

    def _status(self) -> LocalStatus:
        return LocalStatus(read_only=self._bookie.read_only, disk_usage=self._disk_usage(),
                           replicas=self._bookie.replicas.count())

    def _lease_lost(self) -> None:
        # §6.6: every ledger this node writes may have been taken over meanwhile.
        self.ledgers.writers.drop_all(WriterSuperseded("this node's membership lease expired"))

    async def _resume_loop(self) -> None:
        """Ledgers the metadata says this node writes, but it holds no writer of (it
        restarted, or lost its lease): take them over again, so that a restarted
        writer's ledgers do not wait for a client to come by (§7).  Looked for once
        per lease (a restart or a lost lease is a new one), not on a timer."""
        resumed_under: int | None = None
        while True:
            await asyncio.sleep(self.settings.audit_interval_s)
            membership = self.runtime.membership
            lease = membership.lease_id
            if not membership.lease_ok or lease is None or lease == resumed_under \
                    or not self.runtime.metadata.synced:
                continue
            resumed_under = lease
            async for md, _revision in self.runtime.metadata.walk(unclosed=True):
                if md.writer.node == self.runtime.me \
                        and self.ledgers.writer_of(md.ledger_id) is None:
                    self.runtime.spawn(self._resume(md.ledger_id))

    async def _resume(self, ledger_id: int) -> None:
        with contextlib.suppress(LedgerdError):
            await self.ledgers.resume_abandoned(ledger_id)

    # --- the replica sweep: driven by the metadata watch ---------------------------

    def _sweep_everything(self) -> None:
        self._sweep_all = True

    def _ledger_changed(self, ledger_id: int, md: LedgerMetadata | None) -> None:
        """A deleted ledger's replica is garbage now; an offloaded one once the lag
        has passed (a timer per ledger, not a walk); an offload to resume, now."""
        if md is None:
            self._sweep_ids.add(ledger_id)
            return
        if offload_due(md):
            self._sweep_ids.add(ledger_id)
        elif offload_info(md).state is OffloadState.OFFLOADED:
            self._sweep_later(time.time(), ledger_id)  # checks the lag itself

    def _sweep_later(self, when: float, ledger_id: int) -> None:
        heapq.heappush(self._sweep_due, (when, ledger_id))

    def _sweep_now(self) -> set[int] | None:
        """The ledgers to sweep now, or None: every one."""
        generation = self.runtime.membership.members_generation
        if self._sweep_all or generation != self._sweep_generation:
            if not self.runtime.metadata.synced:
                # Not before the cache holds every ledger: a full sweep would read
                # each from etcd (its load's end asks for a full sweep again anyway).
                return set()
            # A member left or came (an offload lock may have gone with it), or the
            # watch broke (changes may have been missed): look at everything, once.
            self._sweep_all = False
            self._sweep_generation = generation
            self._sweep_ids.clear()
            return None
        due, self._sweep_ids = self._sweep_ids, set()
        now = time.time()
        while self._sweep_due and self._sweep_due[0][0] <= now:
            due.add(heapq.heappop(self._sweep_due)[1])
        return due

    async def _sweep_loop(self) -> None:
        lag = None if self._offload_settings is None else self._offload_settings.deletion_lag_s
        while True:
            await asyncio.sleep(SWEEP_EVERY_S)
            ledger_ids = self._sweep_now()
            if ledger_ids is not None and not ledger_ids:
                continue
            try:
                if self.offload is not None:
                    await self.offload.sweep(self._bookie, deletion_lag_s=lag or 0.0,
                                             ledger_ids=ledger_ids, later=self._sweep_later)
                else:
                    await sweep_replicas(self.runtime, self._bookie, deletion_lag_s=lag,
                                         ledger_ids=ledger_ids, later=self._sweep_later)
            except Exception as exc:
                if not isinstance(exc, MetadataUnavailable):
                    log.exception("replica sweep failed")
                if ledger_ids is None:
                    self._sweep_all = True
                else:
                    self._sweep_ids |= ledger_ids

    # --- views ------------------------------------------------------------------------

    async def describe(self) -> dict[str, Any]:
        """``GET /api/v1/cluster`` (DESIGN §10 Precisions)."""
        nodes = [{"bookie_id": b.bookie_id, "url": b.url, "state": b.state,
                  "disk_usage": b.disk_usage}
                 for b in sorted(self.runtime.membership.view.values(),
                                 key=lambda b: b.bookie_id)]
        under = []
        keys = self.runtime.keys
        prefix = keys.rereplication(0).rsplit(b"/", 1)[0] + b"/"
        async for kv in self.runtime.etcd.range_prefix(prefix):
            doc = json.loads(kv.value)
            under.append({"ledger_id": keys.ledger_id_of(kv.key),
                          "fragments": int(doc["fragments"]),
                          "bytes_done": int(doc["bytes_done"]),
                          "bytes_total": int(doc["bytes_total"])})
        gone = sorted(await decommissioned(self.runtime.etcd, keys))
        held = await self.runtime.etcd.get(keys.auditor)
        auditor = json.loads(held.value)["bookie_id"] if held is not None else None
        return {"nodes": nodes, "under_replicated": under, "auditor": auditor,
                "decommissioned": gone}

    async def placement(self, ledger_id: int) -> dict[str, Any]:
        """``GET /api/v1/cluster/ledgers/{id}``: where the ledger's entries live
        (its fragments, each with its bookies and the writer epoch that made it),
        its quorums and its writer; ``NoSuchLedger`` when it has no metadata."""
        md, revision = await self.runtime.metadata.read(ledger_id)
        return {"ledger_id": md.ledger_id, "state": md.state.value, "revision": revision,
                "ensemble_size": md.ensemble_size, "write_quorum": md.write_quorum,
                "ack_quorum": md.ack_quorum, "writer": md.writer.node, "epoch": md.epoch,
                "fragments": [{"first_entry_id": f.first_entry_id, "bookies": list(f.bookies),
                               "epoch": f.epoch} for f in md.ensembles]}

    def statistics(self) -> dict[str, float]:
        stats: dict[str, float] = {
            "members": len(self.runtime.membership.view),
            "lease_held": float(self.runtime.membership.lease_ok),
            # 1 once the watched metadata cache holds every ledger (it loads after
            # the node is ready: until then reads of metadata go to etcd).
            "metadata_synced": float(self.runtime.metadata.synced),
            "ledgers_written": len(self.ledgers.writers.writing()),
            "machines_ticking": len(self.runtime.ticking),
            "writers_idle": self.ledgers.writers.idle_count,
        }
        stats.update(self.auditor.statistics())
        return stats
