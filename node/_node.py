"""The node: the one object that owns the running service.

It builds the engine with its collaborators through constructors (the S3 reader
of offloaded ledgers before the bookie, the offload service and the garbage
collector after it), starts and stops their threads and the disk watcher, and
holds the policies around the engine (:class:`Ledgers`).  The HTTP layer only
translates requests into calls of a node.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from common.errors import NotConfigured, NotReady
from compaction import GarbageCollector, LogUsage, entry_log_usage
from ledger import Bookie, CheckpointHook
from offload import OffloadService, RemoteLedgerReader, open_object_store

from ._cluster import ClusterNode
from ._cluster_ledgers import ClusterLedgers
from ._disk import DiskWatcher, used_fraction
from ._ledgers import Ledgers
from ._replica_server import ReplicaServer
from ._settings import NodeSettings

log = logging.getLogger("ledgerd.node")


class Node:
    def __init__(self, settings: NodeSettings, *, bookie: Bookie,
                 offload: OffloadService | None, gc: GarbageCollector | None,
                 reader: RemoteLedgerReader | None = None) -> None:
        self.settings = settings
        self.bookie = bookie
        self.offload = offload
        self._gc = gc
        self._background = ThreadPoolExecutor(1, thread_name_prefix="ledgerd-node")
        # The bookie side of cluster mode (other nodes' /internal/v1/ calls).
        self.replica_server = ReplicaServer(bookie)
        self.cluster: ClusterNode | None = None
        self.ledgers: Ledgers | ClusterLedgers
        if settings.cluster_mode is None:
            self.ledgers = Ledgers(bookie, offload=offload, background=self._background)
        else:
            self.cluster = ClusterNode(
                settings.cluster_mode, bookie_id=settings.bookie_id, bookie=bookie,
                data_dir=settings.engine.data_dir,
                replica_server=self.replica_server, limits=settings.engine.limits,
                disk_usage=functools.partial(used_fraction, settings.engine.data_dir),
                offload=settings.offload, remote=reader,
                object_store=None if reader is None else reader.store)
            self.ledgers = self.cluster.ledgers
        self.disk = DiskWatcher(bookie, settings.disk, offload=offload,
                                usage=functools.partial(used_fraction,
                                                        settings.engine.data_dir))
        self.shutting_down = False

    @classmethod
    def open(cls, settings: NodeSettings, *,
             checkpoint_hook: CheckpointHook | None = None) -> Node:
        """Open the bookie (replaying its journal) and start every service."""
        settings.check()
        reader = None
        if settings.offload is not None:
            reader = RemoteLedgerReader(open_object_store(settings.offload), settings.offload)
        bookie = Bookie.open(settings.engine, remote=reader, checkpoint_hook=checkpoint_hook)
        try:
            offload = None
            # In cluster mode offload runs on the replicated ledgers (ClusterNode).
            if settings.offload is not None and settings.cluster_mode is None:
                offload = OffloadService.from_settings(bookie, settings.offload, reader=reader)
                offload.start()
            gc = None
            if settings.compaction is not None:
                lag = None if settings.offload is None else settings.offload.deletion_lag_s
                gc = GarbageCollector(
                    bookie, settings.compaction, offload_deletion_lag_s=lag,
                    disk_usage=functools.partial(used_fraction, settings.engine.data_dir))
                gc.start()
        except BaseException:
            bookie.close()
            raise
        node = cls(settings, bookie=bookie, offload=offload, gc=gc, reader=reader)
        node.disk.start()
        log.info("node ready", extra={"bookie_id": settings.bookie_id,
                                      "offload": offload is not None, "gc": gc is not None})
        return node

    async def start(self) -> None:
        """Start what runs on the serving event loop (cluster mode: membership,
        writers, the auditor); the app's lifespan calls it after ``open``."""
        if self.cluster is not None:
            await self.cluster.start()

    async def stop(self) -> None:
        """Stop what :meth:`start` started, before :meth:`close`."""
        if self.cluster is not None:
            await self.cluster.stop()

    def close(self) -> None:
        """Stop the services (newest first), then close the bookie cleanly."""
        self.shutting_down = True
        self.disk.stop()
        self._background.shutdown(wait=True)
        if self._gc is not None:
            self._gc.stop()
        if self.offload is not None:
            self.offload.stop()
        self.bookie.close()

    def __enter__(self) -> Node:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- services beside the engine ---------------------------------------

    @property
    def gc(self) -> GarbageCollector:
        """The garbage collector; NotConfigured when GC_ENABLED is off."""
        if self._gc is None:
            raise NotConfigured("garbage collection is switched off (GC_ENABLED=false)")
        return self._gc

    def check_ready(self) -> None:
        if self.shutting_down:
            raise NotReady("the bookie is shutting down")

    # --- admin views -----------------------------------------------------

    def entry_logs(self) -> list[LogUsage]:
        return entry_log_usage(self.bookie.relocations)

    def disk_files(self) -> list[tuple[str, int]]:
        """(path relative to the data directory, size) of every file in it."""
        root = self.settings.engine.data_dir
        files = []
        for dirpath, _dirs, names in os.walk(root):
            for name in sorted(names):
                path = Path(dirpath) / name
                files.append((str(path.relative_to(root)), path.stat().st_size))
        return files

    def info(self) -> dict[str, Any]:
        usage = shutil.disk_usage(self.settings.engine.data_dir)
        return {
            "bookie_id": self.settings.bookie_id, "cluster": self.settings.cluster,
            "data_dir": str(self.settings.engine.data_dir),
            "journal_device": str(self.settings.engine.journal.device_path),
            "total_space": usage.total, "free_space": usage.free,
            "read_only": self.bookie.read_only, "offload_enabled": self.offload is not None,
            "gc_enabled": self._gc is not None,
        }

    def statistics_sources(self) -> dict[str, Callable[[], Mapping[str, float]]]:
        """What metrics expose, by prefix (``ledgerd_<prefix>_<name>``)."""
        sources: dict[str, Callable[[], Mapping[str, float]]] = {
            "bookie": lambda: self.bookie.statistics().as_dict()}
        if self._gc is not None:
            sources["gc"] = self._gc.statistics
        if self.offload is not None:
            sources["offload"] = self.offload.statistics
        if self.cluster is not None:
            sources["cluster"] = self.cluster.statistics
            if self.cluster.offload is not None:
                sources["offload"] = self.cluster.offload.statistics
        return sources
