"""File access through the device seam, with ``OSError`` translated into the tree.

``Files`` completes what the seam may leave short (writes, reads) and names
the failure by who has to act: ENOSPC or EDQUOT from a write, a creation or a
truncation is ``DiskFull`` (free space, then retry); every other error, and
any error of an fdatasync or a directory fsync whatever its errno, is
``DeviceBroken``.  A failed fdatasync may have dropped the dirty pages it was
meant to save, and a retried one can then report success for data that is
gone (PostgreSQL's "fsyncgate"), so it is never retried and never softened.

Also the cache of read handles.  A handle is reference counted so that
``remove()`` (or eviction) never closes it under a concurrent ``pread``:
closing early would let the kernel hand the same number to another file, and
the reader would then return bytes of the wrong file (a misdirected read).
"""

from __future__ import annotations

import contextlib
import errno
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from common.errors import CorruptRecord, DeviceBroken, DiskFull, StorageUnavailable, invariant

from ._device import IOV_MAX, BytesLike, FileSystem

_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def _broken(action: str, path: Path | str, exc: OSError) -> DeviceBroken:
    return DeviceBroken(f"entry log {action} failed on {path}: {exc}")


def _write_error(action: str, path: Path | str, exc: OSError) -> StorageUnavailable:
    if exc.errno in _NO_SPACE:
        return DiskFull(f"entry log {action} failed on {path}: {exc}")
    return _broken(action, path, exc)


class Files:
    """The seam's calls, completed and translated; stateless apart from the seam."""

    def __init__(self, fs: FileSystem) -> None:
        self.fs = fs

    def make_directory(self, path: Path) -> None:
        try:
            self.fs.make_directory(path)
        except OSError as exc:
            raise _broken("mkdir", path, exc) from exc

    def list_directory(self, path: Path) -> list[str]:
        try:
            return self.fs.list_directory(path)
        except OSError as exc:
            raise _broken("listing", path, exc) from exc

    def create_exclusive(self, path: Path) -> int:
        try:
            return self.fs.create_exclusive(path)
        except OSError as exc:
            raise _write_error("create", path, exc) from exc

    def open_write(self, path: Path) -> int:
        try:
            return self.fs.open_write(path)
        except OSError as exc:
            raise _broken("open", path, exc) from exc

    def pwritev_all(self, handle: int, buffers: Sequence[BytesLike], offset: int, *,
                    path: Path | str) -> None:
        """Write every buffer back to back from ``offset``, ``IOV_MAX`` at a time,
        resuming after short writes (a full disk usually shows up as one)."""
        index = 0
        rest: memoryview | None = None  # the unwritten part of buffers[index]
        while index < len(buffers):
            chunk = [rest if rest is not None else buffers[index]]
            chunk += buffers[index + 1 : index + IOV_MAX]
            wanted = sum(map(len, chunk))
            if wanted == 0:
                index += len(chunk)
                rest = None
                continue
            try:
                written = self.fs.pwritev(handle, chunk, offset)
            except OSError as exc:
                raise _write_error("write", path, exc) from exc
            if not 0 < written <= wanted:
                # Zero would loop forever; more than asked is a device lying.
                raise DeviceBroken(f"entry log write on {path}: pwritev of {wanted} bytes "
                                   f"returned {written}")
            offset += written
            if written == wanted:  # the usual case: no buffer to walk
                index += len(chunk)
                rest = None
                continue
            for buffer in chunk:
                if written >= len(buffer):
                    written -= len(buffer)
                    index += 1
                    rest = None
                else:
                    rest = memoryview(buffer)[written:]
                    break

    def pwrite_all(self, handle: int, data: BytesLike, offset: int, *, path: Path | str) -> None:
        self.pwritev_all(handle, [data], offset, path=path)

    def pread_upto(self, handle: int, length: int, offset: int, *, path: Path | str) -> bytes:
        """Up to ``length`` bytes at ``offset``; fewer only at end of file."""
        chunks: list[bytes] = []
        remaining = length
        try:
            while remaining > 0:
                chunk = self.fs.pread(handle, remaining, offset)
                if not chunk:
                    break
                chunks.append(chunk)
                remaining -= len(chunk)
                offset += len(chunk)
        except OSError as exc:
            raise _broken("read", path, exc) from exc
        if not chunks:
            return b""
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def sync(self, handle: int, *, path: Path | str) -> None:
        try:
            self.fs.fdatasync(handle)
        except OSError as exc:
            raise _broken("fdatasync", path, exc) from exc

    def truncate(self, handle: int, size_bytes: int, *, path: Path | str) -> None:
        # Only ever called to roll back a failed write: if that fails too the
        # file's tail is unknown, so it is DeviceBroken whatever the errno.
        try:
            self.fs.truncate(handle, size_bytes)
        except OSError as exc:
            raise _broken(f"truncate to {size_bytes} bytes", path, exc) from exc

    def sync_directory(self, directory: Path) -> None:
        """Make creations and unlinks in ``directory`` durable (a lost name loses a log)."""
        try:
            self.fs.sync_directory(directory)
        except OSError as exc:
            raise _broken("directory fsync", directory, exc) from exc

    def unlink(self, path: Path) -> None:
        """Remove the name; a missing name is fine (removal is idempotent)."""
        try:
            self.fs.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise _broken("unlink", path, exc) from exc

    def empty_file(self, path: Path) -> None:
        """Truncate the file to nothing, durably; a missing file is fine."""
        try:
            handle = self.fs.open_write(path)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise _broken("open", path, exc) from exc
        try:
            self.truncate(handle, 0, path=path)
            self.sync(handle, path=path)
        finally:
            self.close_quietly(handle)

    def size_bytes(self, path: Path) -> int:
        try:
            return self.fs.size_bytes(path)
        except OSError as exc:
            raise _broken("stat", path, exc) from exc

    def close(self, handle: int, *, path: Path | str) -> None:
        try:
            self.fs.close(handle)
        except OSError as exc:
            raise _broken("close", path, exc) from exc

    def close_quietly(self, handle: int) -> None:
        """Close a handle of a file already given up on; a close error changes nothing."""
        with contextlib.suppress(OSError):
            self.fs.close(handle)

    def open_read(self, path: Path) -> int:
        try:
            return self.fs.open_read(path)
        except FileNotFoundError as exc:
            raise CorruptRecord(str(path), 0, "entry log file does not exist") from exc
        except OSError as exc:
            raise _broken("open", path, exc) from exc


class _Handle:
    __slots__ = ("handle", "path", "refs", "retired")

    def __init__(self, handle: int, path: Path) -> None:
        self.handle = handle
        self.path = path
        self.refs = 0
        self.retired = False


class ReadFdCache:
    """Read-only handles per log, at most ``open_count_max`` idle ones kept."""

    def __init__(self, files: Files, *, open_count_max: int) -> None:
        invariant(open_count_max > 0, "read fd cache needs room for one descriptor")
        self._files = files
        self._open_count_max = open_count_max
        self._lock = threading.Lock()
        self._handles: OrderedDict[int, _Handle] = OrderedDict()

    @contextlib.contextmanager
    def use(self, log_id: int, path_of: Callable[[int], Path]) -> Iterator[int]:
        """A read handle for ``log_id``, valid for the duration of the block."""
        handle = self._acquire(log_id, path_of)
        try:
            yield handle.handle
        finally:
            self._release(handle)

    def _acquire(self, log_id: int, path_of: Callable[[int], Path]) -> _Handle:
        with self._lock:
            handle = self._handles.get(log_id)
            if handle is None:
                path = path_of(log_id)
                handle = _Handle(self._files.open_read(path), path)
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
                self._files.close(handle.handle, path=handle.path)

    def _evict_locked(self) -> None:
        # Only idle handles are closed; busy ones stay until released.
        for log_id in list(self._handles):
            if len(self._handles) <= self._open_count_max:
                return
            handle = self._handles[log_id]
            if handle.refs == 0:
                del self._handles[log_id]
                self._files.close(handle.handle, path=handle.path)

    def retire(self, log_id: int) -> None:
        """Forget ``log_id``'s handle; it is closed once no reader uses it."""
        with self._lock:
            handle = self._handles.pop(log_id, None)
            if handle is None:
                return
            handle.retired = True
            if handle.refs == 0:
                self._files.close(handle.handle, path=handle.path)

    def close_all(self) -> None:
        for log_id in list(self._handles):
            self.retire(log_id)

    def open_count(self) -> int:
        with self._lock:
            return len(self._handles)
