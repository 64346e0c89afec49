"""Every limit and knob of the engine, declared once (STYLE 4).

The journal and the entry logs declare their own (``journal.JournalSettings``,
``entrylog.EntryLogSettings``); the engine's settings hold them.  ``app/`` loads
the user-facing names of DESIGN.md §9 (``LEDGERD_*`` / TOML) into these; tests
build them directly.  Fields are keyword-only with the unit last;
:meth:`EngineSettings.check` relates the limits to each other before anything runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from common.errors import BadRequest, EntryTooLarge
from common.settings import require
from common.units import KiB, MiB
from entrylog import EntryLogSettings
from journal import ALIGNMENT_BYTES, JournalSettings

from ._events import add_record_bytes
from ._index import INDEX_MEMORY_BYTES


@dataclass(frozen=True, kw_only=True)
class WriteCacheSettings:
    # Both buffers together, as in DESIGN.md §9 WRITE_CACHE_SIZE.
    size_bytes: int = 256 * MiB
    # Adds wait this long for a free buffer (or journal space) before
    # WriteCacheFull / JournalFull (HTTP 503).
    wait_s_max: float = 2.0
    flush_interval_s: float = 10.0
    # A checkpoint syncs the entry log every this many bytes it writes
    # (BookKeeper's flushEntrylogBytes), not once for the whole buffer at the
    # end: a journal sharing the disk then slips its fdatasync between small
    # writebacks instead of queueing behind one of the whole buffer.
    sync_every_bytes: int = 4 * MiB


@dataclass(frozen=True, kw_only=True)
class ReadCacheSettings:
    size_bytes: int = 128 * MiB
    # Read-ahead of following entries of the same ledger from the same log.
    readahead_bytes_max: int = 1 * MiB
    readahead_entry_count_max: int = 256


@dataclass(frozen=True, kw_only=True)
class LedgerLimits:
    """What one caller may ask of the engine; each is checked once, here."""

    entry_size_bytes_max: int = 5 * MiB
    # Payload bytes of one batch; a batch is one journal record, so it must fit
    # the journal's in-flight window with its framing.
    batch_size_bytes_max: int = 8 * MiB
    batch_entry_count_max: int = 10_000
    metadata_entry_count_max: int = 64
    # Keys plus values, UTF-8 bytes.
    metadata_size_bytes_max: int = 16 * KiB
    password_size_bytes_max: int = 1024
    ledger_count_max: int = 1_000_000

    def check_create(self, password: str, metadata: Mapping[str, str]) -> None:
        if len(password.encode()) > self.password_size_bytes_max:
            raise BadRequest(f"password exceeds {self.password_size_bytes_max} bytes "
                             "(MAX_PASSWORD_SIZE)")
        if len(metadata) > self.metadata_entry_count_max:
            raise BadRequest(f"metadata has more than {self.metadata_entry_count_max} pairs "
                             "(MAX_METADATA_ENTRIES)")
        size = sum(len(k.encode()) + len(v.encode()) for k, v in metadata.items())
        if size > self.metadata_size_bytes_max:
            raise BadRequest(f"metadata exceeds {self.metadata_size_bytes_max} bytes "
                             "(MAX_METADATA_SIZE)")

    def check_entry(self, size: int) -> None:
        if size > self.entry_size_bytes_max:
            raise EntryTooLarge(f"entry of {size} bytes exceeds {self.entry_size_bytes_max} "
                                "(MAX_ENTRY_SIZE)")

    def check_batch(self, payloads: Sequence[bytes]) -> int:
        """The batch's payload bytes, once it is within the limits."""
        if not payloads:
            raise BadRequest("a batch needs at least one entry")
        if len(payloads) > self.batch_entry_count_max:
            raise BadRequest(f"a batch holds at most {self.batch_entry_count_max} entries "
                             "(MAX_BATCH_ENTRIES)")
        total = 0
        for payload in payloads:
            self.check_entry(len(payload))
            total += len(payload)
        if total > self.batch_size_bytes_max:
            raise EntryTooLarge(f"batch of {total} payload bytes exceeds "
                                f"{self.batch_size_bytes_max} (MAX_BATCH_SIZE)")
        return total


@dataclass(frozen=True, kw_only=True)
class EngineSettings:
    data_dir: Path
    journal: JournalSettings
    entry_log: EntryLogSettings
    write_cache: WriteCacheSettings = field(default_factory=WriteCacheSettings)
    read_cache: ReadCacheSettings = field(default_factory=ReadCacheSettings)
    limits: LedgerLimits = field(default_factory=LedgerLimits)
    index_memory_bytes: int = INDEX_MEMORY_BYTES

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
        j, w, lim = self.journal, self.write_cache, self.limits
        j.check()
        self.entry_log.check()
        require(lim.entry_size_bytes_max > 0, "max_entry_size", "must be positive")
        require(lim.entry_size_bytes_max + ALIGNMENT_BYTES <= j.capacity_bytes // 4,
                "max_entry_size", "must fit four times in the journal capacity")
        require(0 < add_record_bytes(lim.batch_size_bytes_max, lim.batch_entry_count_max)
                <= j.record_size_bytes_max, "max_batch_size",
                "with the framing of max_batch_entries entries must fit the journal "
                "sliding window")
        require(lim.entry_size_bytes_max <= lim.batch_size_bytes_max, "max_entry_size",
                "must not exceed max_batch_size")
        require(lim.batch_entry_count_max > 0, "max_batch_entries", "must be positive")
        require(lim.ledger_count_max > 0, "max_ledgers", "must be positive")
        require(w.size_bytes >= 2 * ALIGNMENT_BYTES, "write_cache_size", "is too small")
        require(w.flush_interval_s > 0, "flush_interval", "must be positive")
        require(w.sync_every_bytes > 0, "checkpoint_sync_bytes", "must be positive")
        require(self.read_cache.size_bytes >= 0, "read_cache_size", "must not be negative")
        require(self.index_memory_bytes >= 4 * MiB, "index_memory", "must be at least 4MiB")
