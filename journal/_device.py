"""Block devices: the Protocol the journal writes through, and the real one.

``DirectDevice`` opens a block device or a regular file with O_DIRECT (or, in
``SyncMode.BUFFERED_FDATASYNC``, through the page cache).  O_DIRECT needs the
memory address, the file offset and the length all aligned; offsets and lengths
are the caller's job (every journal I/O is 4 KiB aligned), memory comes from
anonymous mmaps, which the kernel hands out page aligned.  Every OSError is
translated to DeviceBroken naming the path and offset.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import logging
import mmap
import os
import stat
import struct
import threading
from pathlib import Path
from typing import Protocol, runtime_checkable

from common.errors import DeviceBroken, invariant
from common.files import sync_directory

from ._settings import ALIGNMENT_BYTES, SyncMode

_log = logging.getLogger("ledgerd.journal")

# ioctl number of BLKGETSIZE64 (_IOR(0x12, 114, size_t)) on Linux.
_BLKGETSIZE64 = 0x80081272


@runtime_checkable
class BlockDevice(Protocol):
    """A fixed-size byte array on stable storage, accessed in 4 KiB aligned units."""

    path: str
    size_bytes: int

    def pread(self, offset: int, size: int) -> bytes: ...

    def pwrite(self, offset: int, data: bytes | memoryview) -> None: ...

    def sync(self) -> None:
        """fdatasync: every pwrite that returned before this call began is durable."""
        ...

    def close(self) -> None: ...


def aligned_buffer(size_bytes: int) -> mmap.mmap:
    """Page-aligned anonymous memory for O_DIRECT I/O (size rounded up to 4 KiB)."""
    size = max(ALIGNMENT_BYTES, -(-size_bytes // ALIGNMENT_BYTES) * ALIGNMENT_BYTES)
    return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)


def check_aligned(offset: int, size: int, device_size: int, path: str) -> None:
    invariant(offset % ALIGNMENT_BYTES == 0 and size % ALIGNMENT_BYTES == 0,
              f"unaligned I/O on {path}: offset {offset} size {size}")
    invariant(offset >= 0 and offset + size <= device_size,
              f"I/O past the end of {path}: offset {offset} size {size} device {device_size}")


def _is_page_aligned(data: bytes | memoryview) -> bool:
    if not isinstance(data, memoryview) or data.readonly or not data.c_contiguous:
        return False
    address = ctypes.addressof(ctypes.c_char.from_buffer(data))
    return address % mmap.PAGESIZE == 0


class DirectDevice:
    """A block device or a (preallocated) regular file opened with O_DIRECT.

    When the path does not exist and ``create_size_bytes`` is given, a regular file
    of that size is created and preallocated with posix_fallocate (so a full disk
    shows up now, not as ENOSPC in the middle of a group commit).  File systems that
    refuse O_DIRECT (tmpfs: EINVAL) get buffered I/O plus fdatasync, a warning, and
    ``direct_io`` False.  ``sync_mode`` says how writes become durable
    (:class:`SyncMode`); ``BUFFERED_FDATASYNC`` never opens with O_DIRECT.
    """

    def __init__(self, path: str | os.PathLike[str], *,
                 create_size_bytes: int | None = None,
                 sync_mode: SyncMode = SyncMode.DIRECT_FDATASYNC) -> None:
        self.path = os.fspath(path)
        self.sync_mode = sync_mode
        # RWF_DSYNC: each pwritev returns once its bytes are durable, so sync()
        # has nothing left to do (it keeps its contract trivially).
        self._write_flags = os.RWF_DSYNC if sync_mode is SyncMode.DIRECT_DSYNC else 0
        self._lock = threading.Lock()
        self._read_buffer: mmap.mmap | None = None
        self._write_buffer: mmap.mmap | None = None
        self._fd = -1
        try:
            if create_size_bytes is not None and not os.path.exists(self.path):
                self._create(create_size_bytes)
            try:
                if sync_mode is SyncMode.BUFFERED_FDATASYNC:
                    self._fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
                    self.direct_io = False
                else:
                    self._fd = os.open(self.path, os.O_RDWR | os.O_DIRECT | os.O_CLOEXEC)
                    self.direct_io = True
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                _log.warning("%s refuses O_DIRECT; using buffered I/O with fdatasync",
                             self.path)
                self._fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
                self.direct_io = False
            self.size_bytes = self._measure()
        except OSError as exc:
            self.close()
            raise DeviceBroken(f"cannot open journal device {self.path}: {exc}") from exc

    def _create(self, size_bytes: int) -> None:
        invariant(size_bytes > 0, "create_size_bytes must be positive")
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            os.posix_fallocate(fd, 0, size_bytes)
            os.fsync(fd)
        finally:
            os.close(fd)
        sync_directory(Path(self.path).absolute().parent)  # the new name survives a crash too

    def _measure(self) -> int:
        st = os.fstat(self._fd)
        if stat.S_ISBLK(st.st_mode):
            raw = fcntl.ioctl(self._fd, _BLKGETSIZE64, b"\0" * 8)
            return int(struct.unpack("Q", raw)[0])
        return st.st_size

    def pread(self, offset: int, size: int) -> bytes:
        check_aligned(offset, size, self.size_bytes, self.path)
        with self._lock:
            if self._read_buffer is None or len(self._read_buffer) < size:
                if self._read_buffer is not None:
                    self._read_buffer.close()
                self._read_buffer = aligned_buffer(size)
            view = memoryview(self._read_buffer)[:size]
            try:
                done = 0
                while done < size:
                    n = os.preadv(self._fd, [view[done:]], offset + done)
                    if n == 0:
                        raise OSError(errno.EIO, f"short read: {done} of {size} bytes")
                    done += n
                return bytes(view)
            except OSError as exc:
                raise DeviceBroken(
                    f"read of {size} bytes from {self.path} at offset {offset} failed: {exc}"
                ) from exc
            finally:
                view.release()

    def pwrite(self, offset: int, data: bytes | memoryview) -> None:
        check_aligned(offset, len(data), self.size_bytes, self.path)
        if self.direct_io and not _is_page_aligned(data):
            # O_DIRECT would fail with EINVAL on unaligned memory: copy it over.
            with self._lock:
                if self._write_buffer is None or len(self._write_buffer) < len(data):
                    if self._write_buffer is not None:
                        self._write_buffer.close()
                    self._write_buffer = aligned_buffer(len(data))
                view = memoryview(self._write_buffer)[: len(data)]
                try:
                    view[:] = data
                    self._pwrite_all(offset, view)
                finally:
                    view.release()
            return
        self._pwrite_all(offset, data)

    def _pwrite_all(self, offset: int, data: bytes | memoryview) -> None:
        view = memoryview(data)
        try:
            done = 0
            while done < len(view):
                if self._write_flags:
                    n = os.pwritev(self._fd, [view[done:]], offset + done, self._write_flags)
                else:
                    n = os.pwrite(self._fd, view[done:], offset + done)
                if n == 0:
                    raise OSError(errno.EIO, "pwrite wrote nothing")
                done += n
        except OSError as exc:
            raise DeviceBroken(
                f"write of {len(view)} bytes to {self.path} at offset {offset} failed: {exc}"
            ) from exc
        finally:
            view.release()

    def sync(self) -> None:
        if self._write_flags:
            return  # every pwrite that returned was durable already (RWF_DSYNC)
        try:
            os.fdatasync(self._fd)
        except OSError as exc:
            raise DeviceBroken(f"fdatasync of {self.path} failed: {exc}") from exc

    def close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)
        for buf in (self._read_buffer, self._write_buffer):
            if buf is not None:
                buf.close()
        self._read_buffer = self._write_buffer = None

    def __repr__(self) -> str:
        return (f"DirectDevice({self.path!r}, size_bytes={self.size_bytes}, "
                f"sync_mode={self.sync_mode.value})")
