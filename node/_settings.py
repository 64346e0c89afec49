"""What the node needs to run a bookie and the services beside it."""

from __future__ import annotations

from dataclasses import dataclass

from cluster import ClusterSettings
from common.settings import require
from compaction import CompactionSettings
from ledger import EngineSettings
from offload import OffloadSettings


@dataclass(frozen=True, kw_only=True)
class DiskWatchSettings:
    # At or above this used fraction of the data disk the bookie turns read-only
    # by itself (and leaves that mode once usage drops below it again).
    readonly_threshold: float = 0.95
    check_interval_s: float = 5.0

    def check(self) -> None:
        require(0.0 < self.readonly_threshold <= 1.0, "readonly_disk_usage_threshold",
                "must be in (0, 1]")
        require(self.check_interval_s > 0, "disk_check_interval", "must be positive")


@dataclass(frozen=True, kw_only=True)
class NodeSettings:
    engine: EngineSettings
    bookie_id: str
    cluster: str = "default"
    # None: garbage collection is switched off.
    compaction: CompactionSettings | None = None
    # None: no S3 bucket, offload is switched off.
    offload: OffloadSettings | None = None
    disk: DiskWatchSettings = DiskWatchSettings()
    # None: standalone; else cluster mode (METADATA_URL, docs/cluster.md).
    cluster_mode: ClusterSettings | None = None

    def check(self) -> None:
        self.engine.check()
        self.disk.check()
        if self.compaction is not None:
            self.compaction.check()
        if self.offload is not None:
            self.offload.check()
        if self.cluster_mode is not None:
            self.cluster_mode.check()
