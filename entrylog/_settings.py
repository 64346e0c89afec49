"""Every knob of the entry logs, declared once (STYLE 4)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from common.settings import require
from common.units import GiB, KiB, MiB


@dataclass(frozen=True, kw_only=True)
class EntryLogSettings:
    directory: Path
    size_bytes_limit: int = 1 * GiB
    # Appends gather in memory up to this much before one write to the file.
    write_buffer_size_bytes: int = 1 * MiB
    # Open read descriptors kept (least recently used closed first).
    read_fd_count_max: int = 64

    def check(self) -> None:
        require(self.size_bytes_limit >= 64 * KiB, "entry_log_size_limit",
                "must be at least 64 KiB")
        require(self.write_buffer_size_bytes > 0, "entry_log_write_buffer", "must be positive")
        require(self.read_fd_count_max > 0, "entry_log_read_fds", "must be positive")
