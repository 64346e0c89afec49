"""Value types the journal hands out: records, appends, reports, statistics."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass

# What a record's parts may be: referenced until written, never copied before.
Buffer = bytes | bytearray | memoryview


@dataclass(frozen=True, slots=True)
class JournalRecord:
    """One record returned by replay: it lived at [offset, end_offset); its parts
    come with the CRC32C each was checked against."""

    offset: int
    end_offset: int
    parts: tuple[bytes, ...]
    crcs: tuple[int, ...]

    @property
    def body(self) -> bytes:
        """The parts joined (a record appended as one body has one part)."""
        return self.parts[0] if len(self.parts) == 1 else b"".join(self.parts)

    @property
    def body_length(self) -> int:
        return sum(len(p) for p in self.parts)


@dataclass(frozen=True, slots=True)
class JournalAppend:
    """A queued append of ``record_count`` consecutive records from ``offset`` to
    ``end_offset``.  ``future`` resolves once an fdatasync covers them, or fails
    with DeviceBroken; it never resolves otherwise.  Appends that went into the
    same group-commit block share one future, which resolves with the end of
    that block's last record (>= ``end_offset``) and cannot be cancelled."""

    offset: int
    end_offset: int
    future: Future[int]
    record_count: int = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class RecoveryReport:
    clean_shutdown: bool
    start_offset: int  # the trim offset the scan started from
    end_offset: int  # end of the last valid record
    write_offset: int  # where writing resumes: end_offset aligned up to 4 KiB
    record_count: int
    bytes: int  # body bytes of the records returned
    holes: tuple[int, ...]  # first invalid offsets of holes followed by valid records
    torn_tail_offset: int | None  # where torn bytes after the last valid record start
    duration_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class JournalStatistics:
    appended_offset: int
    synced_offset: int
    trim_offset: int
    capacity_bytes: int
    used_bytes: int  # ring bytes between the trim offset and the next write position
    record_count: int  # records appended since open
    block_count: int  # blocks written since open
    bytes_written: int  # ring bytes written since open (padding included)
    sync_count: int
    queue_depth: int  # appended records whose future has not resolved yet
