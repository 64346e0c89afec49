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
import json
import logging
from collections.abc import Callable
from typing import Any

from cluster import ClusterSettings
from common.errors import LedgerdError, MetadataUnavailable, NotReady, WriterSuperseded
from ledger import Bookie, LedgerLimits
from offload import ObjectStore, OffloadSettings, RemoteLedgerReader

from ._cluster_auditor import Auditor
from ._cluster_ledgers import ClusterLedgers
from ._cluster_membership import LocalStatus
from ._cluster_offload import ClusterOffload, sweep_replicas
from ._cluster_runtime import ClusterRuntime
from ._replica_server import ReplicaServer

log = logging.getLogger("ledgerd.cluster")

SWEEP_EVERY_S = 5.0


class ClusterNode:
    def __init__(self, settings: ClusterSettings, *, bookie_id: str, bookie: Bookie,
                 replica_server: ReplicaServer, limits: LedgerLimits,
                 disk_usage: Callable[[], float], offload: OffloadSettings | None,
                 object_store: ObjectStore | None, remote: RemoteLedgerReader | None) -> None:
        self.settings = settings
        self._bookie = bookie
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

    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        if self.offload is not None:
            self.offload.loop = asyncio.get_running_loop()
        await self.runtime.start()
        self.runtime.spawn(self.auditor.run())
        self.runtime.spawn(self._resume_loop())
        self.runtime.spawn(self._sweep_loop())
        log.info("cluster node started", extra={"bookie_id": self.runtime.me,
                                                "url": self.settings.advertised_url})

    async def stop(self) -> None:
        if not self._started:
            return
        self._started = False
        self.ledgers.writers.drop_all(NotReady("the node is shutting down"))
        await self.runtime.stop()
        if self.offload is not None:
            self.offload.close()

    def _status(self) -> LocalStatus:
        return LocalStatus(read_only=self._bookie.read_only, disk_usage=self._disk_usage(),
                           replicas=len(self._bookie.replicas.ledger_ids()))

    def _lease_lost(self) -> None:
        # §6.6: every ledger this node writes may have been taken over meanwhile.
        self.ledgers.writers.drop_all(WriterSuperseded("this node's membership lease expired"))

    async def _resume_loop(self) -> None:
        """Ledgers the metadata says this node writes, but it holds no writer of (it
        restarted, or lost its lease): take them over again, so that a restarted
        writer's ledgers do not wait for a client to come by (§7)."""
        while True:
            await asyncio.sleep(self.settings.audit_interval_s)
            if not self.runtime.membership.lease_ok:
                continue
            for md, _revision in self.runtime.metadata.cached():
                if md.writer.node == self.runtime.me and md.state.value != "CLOSED" \
                        and self.ledgers.writer_of(md.ledger_id) is None:
                    self.runtime.spawn(self._resume(md.ledger_id))

    async def _resume(self, ledger_id: int) -> None:
        with contextlib.suppress(LedgerdError):
            await self.ledgers.resume_abandoned(ledger_id)

    async def _sweep_loop(self) -> None:
        lag = None if self._offload_settings is None else self._offload_settings.deletion_lag_s
        while True:
            await asyncio.sleep(SWEEP_EVERY_S)
            with contextlib.suppress(MetadataUnavailable):
                try:
                    if self.offload is not None:
                        await self.offload.sweep(self._bookie, deletion_lag_s=lag or 0.0)
                    else:
                        await sweep_replicas(self.runtime, self._bookie, deletion_lag_s=lag)
                except MetadataUnavailable:
                    raise
                except Exception:
                    log.exception("replica sweep failed")

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
            under.append({"ledger_id": int(kv.key.decode().rsplit("/", 1)[-1]),
                          "fragments": int(doc["fragments"]),
                          "bytes_done": int(doc["bytes_done"]),
                          "bytes_total": int(doc["bytes_total"])})
        held = await self.runtime.etcd.get(keys.auditor)
        auditor = json.loads(held.value)["bookie_id"] if held is not None else None
        return {"nodes": nodes, "under_replicated": under, "auditor": auditor}

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
            "ledgers_written": len(self.ledgers.writers.writing()),
        }
        stats.update(self.auditor.statistics())
        return stats
