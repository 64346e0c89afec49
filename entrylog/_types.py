"""Plain values and the ``EntryLog`` seam."""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Protocol


class Location(NamedTuple):
    """Where a record lives: the log and the offset of the record's first byte."""

    log_id: int
    offset: int


class LocationRun(NamedTuple):
    """Where consecutive records went in one log: the log and each one's offset
    (a flush of thousands of entries builds one of these per ledger and log
    rather than a Location per entry)."""

    log_id: int
    offsets: list[int]


@dataclass(frozen=True)
class LedgerUsage:
    """How much of one log a ledger occupies (``byte_count`` includes record headers)."""

    entry_count: int
    byte_count: int


class ScannedRecord(NamedTuple):
    location: Location
    ledger_id: int
    entry_id: int
    payload: bytes
    crc32c: int


class FollowingRecord(NamedTuple):
    entry_id: int
    payload: bytes
    crc32c: int
    location: Location


class ScanStop(enum.StrEnum):
    """Why a scan of one log stopped."""

    END_OF_DATA = "end_of_data"  # clean end: every byte up to the end was a valid record
    LEDGERS_MAP = "ledgers_map"  # reached the ledgers map of a sealed log
    TORN_TAIL = "torn_tail"  # an incomplete (or zero-filled) record at the end: a crash
    CORRUPT = "corrupt"  # a complete record that fails its checks


@dataclass(frozen=True)
class ScanEnd:
    """Where and why a scan stopped; ``offset`` is the end of the valid records."""

    log_id: int
    path: str
    offset: int
    stop: ScanStop
    reason: str = ""
    record_count: int = 0

    @property
    def clean(self) -> bool:
        return self.stop in (ScanStop.END_OF_DATA, ScanStop.LEDGERS_MAP)


@dataclass(frozen=True)
class EntryLogStatistics:
    log_count: int
    current_log_id: int
    bytes_written: int  # record bytes appended since the store was opened
    entry_count_written: int  # records appended since the store was opened
    total_size_bytes: int  # on-disk size of every log plus unwritten buffered bytes
    rotation_count: int
    read_fd_open_count: int  # cached read descriptors, bounded by read_fd_count_max
    disk_full_count: int = 0  # writes refused with DiskFull (each rolled back) since open


class RecordScanner(Protocol):
    """An iterator over a log's valid records that tells where it stopped."""

    @property
    def end(self) -> ScanEnd | None: ...

    def __iter__(self) -> Iterator[ScannedRecord]: ...

    def __next__(self) -> ScannedRecord: ...


class EntryLog(Protocol):
    """The data-path seam the engine, GC and compaction use (STYLE habit 2)."""

    @property
    def current_log_id(self) -> int: ...

    def append(self, ledger_id: int, entry_id: int, payload: bytes, crc32c: int) -> Location: ...

    def sync(self) -> None: ...

    def read(self, location: Location, ledger_id: int, entry_id: int) -> tuple[bytes, int]: ...

    def read_following(
        self, location: Location, ledger_id: int, *, bytes_max: int, count_max: int
    ) -> list[FollowingRecord]: ...

    def scan(self, log_id: int) -> RecordScanner: ...

    def scan_end(self, log_id: int) -> ScanEnd: ...

    def ledgers_map(self, log_id: int) -> dict[int, LedgerUsage]: ...

    def flushed_log_ids(self) -> list[int]: ...

    def log_ids(self) -> list[int]: ...

    def log_size_bytes(self, log_id: int) -> int: ...

    def path_of(self, log_id: int) -> Path: ...

    def remove(self, log_id: int) -> None: ...

    def seal_unsealed(self) -> list[ScanEnd]: ...

    def close(self) -> None: ...

    def statistics(self) -> EntryLogStatistics: ...
