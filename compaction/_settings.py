"""Every knob of garbage collection and compaction, declared once (STYLE 4)."""

from __future__ import annotations

from dataclasses import dataclass

from common.settings import require
from common.units import MiB


@dataclass(frozen=True, kw_only=True)
class CompactionSettings:
    gc_wait_time_s: float = 600.0
    minor_threshold: float = 0.2
    minor_interval_s: float = 3600.0
    major_threshold: float = 0.8
    major_interval_s: float = 86400.0
    # Bytes per second compaction may read plus write (0: unlimited), so adds
    # and reads keep the disk while it runs.
    rate_bytes_per_s: int = 16 * MiB
    # Longest one compaction run may take; the rest waits for the next run.
    run_time_s_max: float = 600.0
    # Data-disk usage fractions: past ``disk_warn_threshold`` major compaction is
    # suspended, past ``disk_hard_threshold`` both are (forced GC still runs).
    disk_warn_threshold: float = 0.90
    disk_hard_threshold: float = 0.95
    # Index updates of moved entries are committed every this many bytes copied.
    commit_bytes: int = 4 * MiB

    def check(self) -> None:
        """Relate the knobs to each other; raise naming the setting that is wrong."""
        require(0.0 <= self.minor_threshold <= 1.0, "minor_compaction_threshold",
                "must be in [0, 1]")
        require(0.0 <= self.major_threshold <= 1.0, "major_compaction_threshold",
                "must be in [0, 1]")
        require(self.minor_threshold < self.major_threshold or self.major_threshold == 0.0,
                "minor_compaction_threshold", "must be below major_compaction_threshold")
        require(self.gc_wait_time_s > 0, "gc_wait_time", "must be positive")
        require(self.minor_interval_s >= self.gc_wait_time_s, "minor_compaction_interval",
                "must be at least gc_wait_time")
        require(self.major_interval_s >= self.gc_wait_time_s, "major_compaction_interval",
                "must be at least gc_wait_time")
        require(self.rate_bytes_per_s >= 0, "compaction_rate", "must not be negative")
        require(self.run_time_s_max > 0, "compaction_max_run_time", "must be positive")
        require(0.0 < self.disk_warn_threshold <= self.disk_hard_threshold <= 1.0,
                "disk_usage_warn_threshold",
                "must be in (0, 1] and not above readonly_disk_usage_threshold")
        require(self.commit_bytes > 0, "compaction_commit_bytes", "must be positive")
