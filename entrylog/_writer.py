"""The log currently being appended to: pending records, handle, running map.

Appends keep references to each record's 28-byte header and to the caller's
payload (no copy into a buffer); ``write_pending`` hands them to one
``pwritev`` per ``IOV_MAX`` buffers.  Readers see pending records through
``read_pending``.

Three offsets, in this order: ``durable_bytes`` (covered by the last
fdatasync) <= ``written_bytes`` (handed to the kernel) <= ``end_offset``
(plus pending).  A write that fails with ``DiskFull`` rolls the log back to
``durable_bytes``: the file is truncated there, pending records are dropped
and the running map forgets every record appended since the last sync.

Not thread-safe by itself: ``EntryLogStore`` serialises every writer call.
The store's state lock (passed in) is taken around each change to what readers
look at (pending records, ``written_bytes``, the map); readers take it too.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import operator
import threading
from collections.abc import Sequence
from pathlib import Path

from common.errors import DeviceBroken, DiskFull, invariant

from . import _format as fmt
from ._device import BytesLike
from ._io import Files
from ._types import LedgerUsage

logger = logging.getLogger(__name__)


class CurrentLog:
    def __init__(self, files: Files, log_id: int, path: Path, handle: int,
                 lock: threading.Lock) -> None:
        self.log_id = log_id
        self.path = path
        self._files = files
        self._handle = handle
        self._lock = lock
        self.durable_bytes = fmt.HEADER_SIZE_BYTES
        self.written_bytes = fmt.HEADER_SIZE_BYTES
        # Record headers and payloads not yet written, by reference, and the
        # log offset of each (for reads); empty payloads are left out.
        self._pending: list[BytesLike] = []
        self._pending_starts: list[int] = []
        self.pending_bytes = 0
        self.record_count = 0
        self._durable_record_count = 0
        # ledger -> its entry count and byte count in this log, packed into one int
        # (``_pack``): one small object per ledger, not a list of two, as a log of
        # small entries names up to millions of ledgers.
        self._usage: dict[int, int] = {}
        self._usage_since_sync: dict[int, int] = {}
        # Set once the sealed header may have reached the page cache: a rollback
        # must then put the unsealed header back.
        self._header_touched = False
        self.sealed_header: fmt.FileHeader | None = None

    @classmethod
    def create(cls, files: Files, directory: Path, log_id: int, path: Path,
               lock: threading.Lock) -> CurrentLog:
        """Create the file with an unsealed header and make it (and its name) durable."""
        handle = files.create_exclusive(path)
        try:
            files.pwrite_all(handle, fmt.encode_file_header(fmt.FileHeader(log_id)), 0, path=path)
            files.sync(handle, path=path)
            # Without this a crash could forget the directory entry, and with it
            # every record the index later points at in this log.
            files.sync_directory(directory)
        except BaseException as exc:
            # Nothing points into a log whose creation failed: give the name and
            # the blocks back.  Left behind, a file too short to be a log would
            # be reported as not recognised at every open.
            files.close_quietly(handle)
            try:
                files.unlink(path)
            except DeviceBroken as cleanup_exc:
                if isinstance(exc, DiskFull):
                    raise cleanup_exc from exc  # Worse than a full disk: say so.
            raise
        return cls(files, log_id, path, handle, lock)

    @property
    def end_offset(self) -> int:
        """Logical size: bytes written plus bytes pending."""
        return self.written_bytes + self.pending_bytes

    def size_bytes_if_appended(self, record_size_bytes: int, ledger_id: int) -> int:
        """The sealed size of this log if one more record of this size were appended."""
        ledger_count = len(self._usage) + (ledger_id not in self._usage)
        return self.end_offset + record_size_bytes + fmt.ledgers_map_size_bytes(ledger_count)

    def append_run(self, ledger_id: int, headers: Sequence[bytes],
                   payloads: Sequence[bytes]) -> list[int]:
        """Queue consecutive records of one ledger (headers and payloads, by
        reference) under one acquisition of the state lock and one update of
        the running map; returns their offsets.  Built by ``map`` and ``zip``
        over the columns: a checkpoint queues every entry it flushes here."""
        invariant(self.sealed_header is None, f"append to sealed entry log {self.path}")
        invariant(len(headers) == len(payloads), "a header for every payload")
        header_size = fmt.RECORD_HEADER_SIZE_BYTES
        with self._lock:
            first = self.end_offset
            ends = list(itertools.accumulate(
                map(operator.add, map(len, payloads), itertools.repeat(header_size)),
                initial=first))
            offsets = ends[:-1]
            payload_starts = map(operator.add, offsets, itertools.repeat(header_size))
            if all(payloads):
                self._pending.extend(
                    itertools.chain.from_iterable(zip(headers, payloads, strict=True)))
                self._pending_starts.extend(
                    itertools.chain.from_iterable(zip(offsets, payload_starts, strict=True)))
            else:  # empty payloads are left out of the pending list
                for header, payload, offset, start in zip(headers, payloads, offsets,
                                                          payload_starts, strict=True):
                    self._pending.append(header)
                    self._pending_starts.append(offset)
                    if payload:
                        self._pending.append(payload)
                        self._pending_starts.append(start)
            size = ends[-1] - first
            self.pending_bytes += size
            added = _pack(len(offsets), size)
            for usage in (self._usage, self._usage_since_sync):
                usage[ledger_id] = usage.get(ledger_id, 0) + added
            self.record_count += len(offsets)
        return offsets

    def read_pending(self, offset: int, length: int) -> bytes:
        """Up to ``length`` pending bytes from ``offset`` (>= ``written_bytes``).

        The caller holds the state lock.
        """
        parts: list[BytesLike] = []
        index = max(0, bisect.bisect_right(self._pending_starts, offset) - 1)
        while index < len(self._pending) and length > 0:
            buffer = self._pending[index]
            skip = max(0, offset - self._pending_starts[index])
            piece = buffer[skip : skip + length]
            parts.append(piece)
            length -= len(piece)
            offset += len(piece)
            index += 1
        return b"".join(parts)

    def write_pending(self) -> None:
        """Hand the pending records to the kernel (``DiskFull``: rolled back first)."""
        if not self._pending:
            return
        # Only the writer changes the pending list, so it is written outside
        # the state lock; readers meanwhile still find the records in it.
        try:
            self._files.pwritev_all(self._handle, self._pending, self.written_bytes,
                                    path=self.path)
        except DiskFull:
            self._roll_back()
            raise
        with self._lock:
            self.written_bytes += self.pending_bytes
            self._pending = []
            self._pending_starts = []
            self.pending_bytes = 0

    def sync(self) -> None:
        invariant(not self._pending, "sync of an entry log with unwritten pending records")
        self._files.sync(self._handle, path=self.path)
        self._mark_durable()

    def _mark_durable(self) -> None:
        with self._lock:
            self.durable_bytes = self.written_bytes
            self._durable_record_count = self.record_count
            self._usage_since_sync = {}

    def _roll_back(self) -> None:
        """Undo everything since the last fdatasync after a write hit a full disk.

        A failure here leaves the tail of the file unknown: ``DeviceBroken``.
        """
        with self._lock:
            dropped_bytes = self.end_offset - self.durable_bytes
            dropped_count = self.record_count - self._durable_record_count
            self._files.truncate(self._handle, self.durable_bytes, path=self.path)
            if self._header_touched:
                unsealed = fmt.encode_file_header(fmt.FileHeader(self.log_id))
                try:
                    self._files.pwrite_all(self._handle, unsealed, 0, path=self.path)
                except DiskFull as exc:
                    raise DeviceBroken(f"entry log {self.path}: cannot restore the unsealed "
                                       f"header after a full disk: {exc}") from exc
                self._header_touched = False
            self.written_bytes = self.durable_bytes
            self._pending = []
            self._pending_starts = []
            self.pending_bytes = 0
            for ledger_id, dropped in self._usage_since_sync.items():
                left = self._usage[ledger_id] - dropped
                if _unpack(left)[0] == 0:
                    del self._usage[ledger_id]
                else:
                    self._usage[ledger_id] = left
            self._usage_since_sync = {}
            self.record_count = self._durable_record_count
        logger.warning(
            "entry log %s: disk full, rolled back to its last synced size %d "
            "(%d records, %d bytes dropped)", self.path, self.durable_bytes,
            dropped_count, dropped_bytes,
            extra={"path": str(self.path), "log_id": self.log_id, "offset": self.durable_bytes},
        )

    def usage(self) -> dict[int, LedgerUsage]:
        """The running map (the caller holds the state lock or is the writer)."""
        return {
            ledger_id: LedgerUsage(*_unpack(packed)) for ledger_id, packed in self._usage.items()
        }

    def seal(self) -> fmt.FileHeader:
        """Append the ledgers map, point the header at it, close the handle.

        The map is made durable before the header names it, so a crash leaves
        either an unsealed header (a scan finds the map, or rebuilds it) or a
        header whose map is on disk.  Pending records must already be written.
        ``DiskFull`` at either write rolls the log back and leaves it unsealed.
        """
        invariant(not self._pending, "seal of an entry log with unwritten pending records")
        usage = self.usage()
        map_bytes = fmt.encode_ledgers_map(usage)
        header = fmt.FileHeader(self.log_id, self.written_bytes, len(map_bytes), len(usage))
        try:
            self._files.pwrite_all(self._handle, map_bytes, self.written_bytes, path=self.path)
        except DiskFull:
            self._roll_back()
            raise
        self._files.sync(self._handle, path=self.path)
        self._mark_durable()  # The records are; the map is not counted in written_bytes.
        self._header_touched = True
        try:
            self._files.pwrite_all(self._handle, fmt.encode_file_header(header), 0,
                                   path=self.path)
        except DiskFull:
            self._roll_back()  # Truncates the map away, puts the unsealed header back.
            raise
        self._files.sync(self._handle, path=self.path)
        # Forget the number before closing: a second close after an error could
        # close whatever file the kernel gave that number to next.
        handle, self._handle = self._handle, -1
        self._files.close(handle, path=self.path)
        self.sealed_header = header
        return header

    def abandon(self) -> None:
        """Close the handle without sealing (the store failed or is being dropped)."""
        if self._handle >= 0:
            handle, self._handle = self._handle, -1
            self._files.close_quietly(handle)


# A ledger's usage of the current log as one int: entry count above, byte count
# in the low 64 bits (a log is smaller than 2**64 bytes, so sums never carry).
_BYTES_BITS = 64
_BYTES_MASK = (1 << _BYTES_BITS) - 1


def _pack(entry_count: int, byte_count: int) -> int:
    return entry_count << _BYTES_BITS | byte_count


def _unpack(packed: int) -> tuple[int, int]:
    return packed >> _BYTES_BITS, packed & _BYTES_MASK
