"""The log currently being appended to: buffer, file descriptor, running map.

Not thread-safe by itself.  ``EntryLogStore`` serialises every writer call
and takes its state lock around ``append`` and ``write_buffer``, the two calls
that change what readers see (``written_bytes`` and ``buffer``).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from common.errors import DeviceBroken, invariant

from . import _format as fmt
from ._io import close_fd, pwrite_all, sync_directory, sync_fd, write_all
from ._types import LedgerUsage


class CurrentLog:
    def __init__(self, log_id: int, path: Path, fd: int) -> None:
        self.log_id = log_id
        self.path = path
        self._fd = fd
        # Bytes already handed to the kernel; records at or past this offset
        # are still in ``buffer``.
        self.written_bytes = fmt.HEADER_SIZE_BYTES
        self.buffer = bytearray()
        self.record_count = 0
        self._usage: dict[int, list[int]] = {}
        self.sealed_header: fmt.FileHeader | None = None

    @classmethod
    def create(cls, directory: Path, log_id: int, path: Path) -> CurrentLog:
        """Create the file with an unsealed header and make it (and its name) durable."""
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise DeviceBroken(f"cannot create entry log {path}: {exc}") from exc
        log = cls(log_id, path, fd)
        write_all(fd, fmt.encode_file_header(fmt.FileHeader(log_id)), path=path)
        sync_fd(fd, path=path)
        # Without this a crash could forget the directory entry, and with it
        # every record the index later points at in this log.
        sync_directory(directory)
        return log

    @property
    def end_offset(self) -> int:
        """Logical size: bytes written plus bytes still buffered."""
        return self.written_bytes + len(self.buffer)

    def size_bytes_if_appended(self, record_size_bytes: int, ledger_id: int) -> int:
        """The sealed size of this log if one more record of this size were appended."""
        ledger_count = len(self._usage) + (ledger_id not in self._usage)
        return self.end_offset + record_size_bytes + fmt.ledgers_map_size_bytes(ledger_count)

    def append(self, record: bytes, ledger_id: int) -> int:
        """Buffer one encoded record; return its offset."""
        invariant(self.sealed_header is None, f"append to sealed entry log {self.path}")
        offset = self.end_offset
        self.buffer += record
        item = self._usage.setdefault(ledger_id, [0, 0])
        item[0] += 1
        item[1] += len(record)
        self.record_count += 1
        return offset

    def write_buffer(self) -> None:
        if self.buffer:
            write_all(self._fd, self.buffer, path=self.path)
            self.written_bytes += len(self.buffer)
            self.buffer.clear()

    def sync(self) -> None:
        invariant(not self.buffer, "sync of an entry log with unwritten buffered records")
        sync_fd(self._fd, path=self.path)

    def usage(self) -> dict[int, LedgerUsage]:
        return {
            ledger_id: LedgerUsage(entry_count=c, byte_count=b)
            for ledger_id, (c, b) in self._usage.items()
        }

    def seal(self) -> fmt.FileHeader:
        """Append the ledgers map, point the header at it, close the descriptor.

        The map is made durable before the header names it, so a crash leaves
        either an unsealed header (a scan finds the map, or rebuilds it) or a
        header whose map is on disk.  The buffer must already be written.
        """
        invariant(not self.buffer, "seal of an entry log with unwritten buffered records")
        usage = self.usage()
        map_bytes = fmt.encode_ledgers_map(usage)
        header = fmt.FileHeader(self.log_id, self.written_bytes, len(map_bytes), len(usage))
        write_all(self._fd, map_bytes, path=self.path)
        sync_fd(self._fd, path=self.path)
        pwrite_all(self._fd, fmt.encode_file_header(header), 0, path=self.path)
        sync_fd(self._fd, path=self.path)
        # Forget the number before closing: a second close after an error could
        # close whatever file the kernel gave that number to next.
        fd, self._fd = self._fd, -1
        close_fd(fd, path=self.path)
        self.sealed_header = header
        return header

    def abandon(self) -> None:
        """Close the descriptor without sealing (the store failed or is being dropped)."""
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            # Already broken or being dropped; a close error changes nothing.
            with contextlib.suppress(OSError):
                os.close(fd)
