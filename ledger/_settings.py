"""Every limit and knob of the engine, declared once.

``app/`` loads the user-facing names of DESIGN.md §9 (``LEDGERD_*`` / TOML) and
builds an :class:`EngineSettings`; tests build one directly.  Fields are
keyword-only with the unit last; :meth:`EngineSettings.check` relates the limits
to each other before anything runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from common.settings import require
from common.units import MiB
from entrylog import EntryLogSettings
from journal import ALIGNMENT_BYTES, JournalSettings


@dataclass(frozen=True, kw_only=True)
class WriteCacheSettings:
    # Both buffers together, as in DESIGN.md §9 WRITE_CACHE_SIZE.
    size_bytes: int = 256 * MiB
    # Adds wait this long for a free buffer before WriteCacheFull (HTTP 503).
    wait_s_max: float = 2.0
    flush_interval_s: float = 10.0


@dataclass(frozen=True, kw_only=True)
class ReadCacheSettings:
    size_bytes: int = 128 * MiB
    # Read-ahead of following entries of the same ledger from the same log.
    readahead_bytes_max: int = 1 * MiB
    readahead_entry_count_max: int = 256


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


@dataclass(frozen=True, kw_only=True)
class EngineSettings:
    data_dir: Path
    journal: JournalSettings
    entry_log: EntryLogSettings
    write_cache: WriteCacheSettings = field(default_factory=WriteCacheSettings)
    read_cache: ReadCacheSettings = field(default_factory=ReadCacheSettings)
    compaction: CompactionSettings = field(default_factory=CompactionSettings)
    entry_size_bytes_max: int = 5 * MiB
    # A batch is one journal record, so it must fit the journal's in-flight window.
    batch_size_bytes_max: int = 8 * MiB

    @property
    def index_path(self) -> Path:
        return self.data_dir / "index"

    @classmethod
    def in_directory(cls, data_dir: Path, **overrides: object) -> EngineSettings:
        """Embedded defaults rooted at ``data_dir`` (journal on a preallocated file)."""
        journal = overrides.pop("journal", None) or JournalSettings(
            device_path=data_dir / "journal.dev"
        )
        entry_log = overrides.pop("entry_log", None) or EntryLogSettings(
            directory=data_dir / "entrylogs"
        )
        settings = cls(data_dir=data_dir, journal=journal, entry_log=entry_log, **overrides)  # type: ignore[arg-type]
        settings.check()
        return settings

    def check(self) -> None:
        """Relate the limits to each other; raise naming the setting that is wrong."""
        j, w = self.journal, self.write_cache
        j.check()
        self.entry_log.check()
        require(self.entry_size_bytes_max > 0, "max_entry_size", "must be positive")
        require(self.entry_size_bytes_max + ALIGNMENT_BYTES <= j.capacity_bytes // 4,
                "max_entry_size", "must fit four times in the journal capacity")
        require(0 < self.batch_size_bytes_max <= j.record_size_bytes_max, "max_batch_size",
                "must be positive and fit the journal sliding window")
        require(self.entry_size_bytes_max <= self.batch_size_bytes_max, "max_entry_size",
                "must not exceed max_batch_size")
        require(w.size_bytes >= 2 * ALIGNMENT_BYTES, "write_cache_size", "is too small")
        require(w.flush_interval_s > 0, "flush_interval", "must be positive")
        require(self.read_cache.size_bytes >= 0, "read_cache_size", "must not be negative")
        c = self.compaction
        require(0.0 <= c.minor_threshold <= 1.0, "minor_compaction_threshold", "must be in [0, 1]")
        require(0.0 <= c.major_threshold <= 1.0, "major_compaction_threshold", "must be in [0, 1]")
        require(c.minor_threshold < c.major_threshold or c.major_threshold == 0.0,
                "minor_compaction_threshold", "must be below major_compaction_threshold")
        require(c.gc_wait_time_s > 0, "gc_wait_time", "must be positive")
        require(c.minor_interval_s >= c.gc_wait_time_s, "minor_compaction_interval",
                "must be at least gc_wait_time")
        require(c.major_interval_s >= c.gc_wait_time_s, "major_compaction_interval",
                "must be at least gc_wait_time")
        require(c.rate_bytes_per_s >= 0, "compaction_rate", "must not be negative")
        require(c.run_time_s_max > 0, "compaction_max_run_time", "must be positive")
        require(0.0 < c.disk_warn_threshold <= c.disk_hard_threshold <= 1.0,
                "disk_usage_warn_threshold",
                "must be in (0, 1] and not above readonly_disk_usage_threshold")
        require(c.commit_bytes > 0, "compaction_commit_bytes", "must be positive")
