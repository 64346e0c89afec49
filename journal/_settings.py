"""Every knob of the journal, declared once (STYLE 4)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path

from common.settings import require
from common.units import GiB, KiB, MiB

# Every journal I/O is aligned to this in offset, length and memory (O_DIRECT).
ALIGNMENT_BYTES = 4 * KiB


class SyncMode(enum.Enum):
    """How a journal write is made durable (every mode keeps the same promise:
    an append is acknowledged only once its bytes survive a power cut).

    ``DIRECT_FDATASYNC``: O_DIRECT pwrite, then fdatasync (the syncer thread
    covers every write that returned before it began).
    ``DIRECT_DSYNC``: O_DIRECT pwritev with RWF_DSYNC: each write returns durable
    (FUA or a cache flush in the kernel), so the sync step does nothing.
    ``BUFFERED_FDATASYNC``: pwrite into the page cache, then fdatasync (Redis's
    ``appendfsync always`` and BookKeeper's journal default): a power cut drops
    what was not fdatasynced, as with O_DIRECT.
    """

    DIRECT_FDATASYNC = "direct_fdatasync"
    DIRECT_DSYNC = "direct_dsync"
    BUFFERED_FDATASYNC = "buffered_fdatasync"


@dataclass(frozen=True, kw_only=True)
class JournalSettings:
    device_path: Path
    capacity_bytes: int = 1 * GiB
    # A group-commit block is written once it holds this many bytes...
    block_size_bytes_soft_limit: int = 256 * KiB
    # ...or once the oldest queued record has waited this long.
    group_wait_s_max: float = 0.001
    # Bytes written but not yet covered by an fdatasync; recovery scans this far
    # past the first hole because such writes can land out of order.
    sliding_window_bytes_max: int = 16 * MiB
    # How a write is made durable; the default is the fastest measured on the
    # disks we run on (docs/benchmarks.md, "journal sync modes").
    sync_mode: SyncMode = SyncMode.DIRECT_FDATASYNC

    @property
    def record_size_bytes_max(self) -> int:
        """The largest record body an append takes: one block, within the window."""
        return self.sliding_window_bytes_max - 2 * ALIGNMENT_BYTES

    def check(self) -> None:
        require(self.capacity_bytes % ALIGNMENT_BYTES == 0, "journal_capacity",
                f"must be a multiple of {ALIGNMENT_BYTES}")
        require(self.capacity_bytes >= 64 * ALIGNMENT_BYTES, "journal_capacity",
                "must be at least 256 KiB")
        require(self.sliding_window_bytes_max <= self.capacity_bytes // 2, "journal_capacity",
                "must be at least twice the journal sliding window")
        require(0 < self.block_size_bytes_soft_limit <= self.sliding_window_bytes_max,
                "journal_block_soft_limit", "must be positive and within the sliding window")
        require(self.group_wait_s_max >= 0, "journal_max_group_wait", "must not be negative")
