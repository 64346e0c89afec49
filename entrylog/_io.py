"""OS-level file access for entry logs: OSError becomes ``DeviceBroken`` here.

Also the cache of read file descriptors.  A descriptor is reference counted so
that ``remove()`` (or eviction) never closes it under a concurrent ``pread``:
closing early would let the kernel hand the same number to another file, and
the reader would then return bytes of the wrong file (a misdirected read).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path

from common.errors import CorruptRecord, DeviceBroken, invariant


def _broken(action: str, path: Path | str, exc: OSError) -> DeviceBroken:
    return DeviceBroken(f"entry log {action} failed on {path}: {exc}")


def pread_upto(fd: int, length: int, offset: int, *, path: Path | str) -> bytes:
    """Up to ``length`` bytes at ``offset``; fewer only at end of file."""
    chunks: list[bytes] = []
    remaining = length
    try:
        while remaining > 0:
            chunk = os.pread(fd, remaining, offset)
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
            offset += len(chunk)
    except OSError as exc:
        raise _broken("read", path, exc) from exc
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def write_all(fd: int, data: bytes | bytearray | memoryview, *, path: Path | str) -> None:
    view = memoryview(data)
    try:
        while view:
            written = os.write(fd, view)
            view = view[written:]
    except OSError as exc:
        raise _broken("write", path, exc) from exc


def pwrite_all(fd: int, data: bytes, offset: int, *, path: Path | str) -> None:
    view = memoryview(data)
    try:
        while view:
            written = os.pwrite(fd, view, offset)
            view = view[written:]
            offset += written
    except OSError as exc:
        raise _broken("write", path, exc) from exc


def sync_fd(fd: int, *, path: Path | str) -> None:
    try:
        os.fdatasync(fd)
    except OSError as exc:
        raise _broken("fdatasync", path, exc) from exc


def sync_directory(directory: Path) -> None:
    """Make creations and unlinks in ``directory`` durable (a lost dirent loses a log)."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise _broken("directory fsync", directory, exc) from exc


def file_size_bytes(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError as exc:
        raise _broken("stat", path, exc) from exc


def close_fd(fd: int, *, path: Path | str) -> None:
    try:
        os.close(fd)
    except OSError as exc:
        raise _broken("close", path, exc) from exc


class _Handle:
    __slots__ = ("fd", "path", "refs", "retired")

    def __init__(self, fd: int, path: Path) -> None:
        self.fd = fd
        self.path = path
        self.refs = 0
        self.retired = False


class ReadFdCache:
    """Read-only descriptors per log, at most ``open_count_max`` idle ones kept."""

    def __init__(self, *, open_count_max: int) -> None:
        invariant(open_count_max > 0, "read fd cache needs room for one descriptor")
        self._open_count_max = open_count_max
        self._lock = threading.Lock()
        self._handles: OrderedDict[int, _Handle] = OrderedDict()

    @contextlib.contextmanager
    def use(self, log_id: int, path: Path) -> Iterator[int]:
        """A read descriptor for ``log_id``, valid for the duration of the block."""
        handle = self._acquire(log_id, path)
        try:
            yield handle.fd
        finally:
            self._release(handle)

    def _acquire(self, log_id: int, path: Path) -> _Handle:
        with self._lock:
            handle = self._handles.get(log_id)
            if handle is None:
                try:
                    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                except FileNotFoundError as exc:
                    raise CorruptRecord(str(path), 0, "entry log file does not exist") from exc
                except OSError as exc:
                    raise _broken("open", path, exc) from exc
                handle = _Handle(fd, path)
                self._handles[log_id] = handle
                # Pinned before eviction runs, so eviction cannot pick it.
                handle.refs += 1
                self._evict_locked()
            else:
                self._handles.move_to_end(log_id)
                handle.refs += 1
            return handle

    def _release(self, handle: _Handle) -> None:
        with self._lock:
            handle.refs -= 1
            if handle.retired and handle.refs == 0:
                close_fd(handle.fd, path=handle.path)

    def _evict_locked(self) -> None:
        # Only idle descriptors are closed; busy ones stay until released.
        for log_id in list(self._handles):
            if len(self._handles) <= self._open_count_max:
                return
            handle = self._handles[log_id]
            if handle.refs == 0:
                del self._handles[log_id]
                close_fd(handle.fd, path=handle.path)

    def retire(self, log_id: int) -> None:
        """Forget ``log_id``'s descriptor; it is closed once no reader uses it."""
        with self._lock:
            handle = self._handles.pop(log_id, None)
            if handle is None:
                return
            handle.retired = True
            if handle.refs == 0:
                close_fd(handle.fd, path=handle.path)

    def close_all(self) -> None:
        for log_id in list(self._handles):
            self.retire(log_id)

    def open_count(self) -> int:
        with self._lock:
            return len(self._handles)
