"""Test doubles: in-memory file systems for tests and seeded simulation (STYLE 13).

Not production code: the service never imports a ``testing`` module
(``tests/test_layers.py``); they live beside ``OsFileSystem`` so that they are
type-checked against the same ``FileSystem`` seam (``_satisfies_the_seam``).

``MemoryFileSystem`` implements the ``FileSystem`` seam with the semantics of
the system calls (errno, short reads at end of file, names vs. open files: an
unlinked file stays readable through its open handles).

``FaultyFileSystem`` adds what a real disk and kernel do to a crashing
process, and the failures a test asks for:

* Crash (``crash()``).  Per file, what the last fdatasync covered survives.
  Each later write survives per 4 KiB file block: kept, dropped, or torn (a
  prefix of its 512-byte sectors kept); a dropped block past the end of the
  file may still leave the file longer, zero filled (delayed allocation).  A
  later truncation survives or not.  Per name, a creation or unlink not
  followed by an fsync of its directory may be undone: a created file lost, an
  unlinked one back.  Directories themselves are durable once made.
* A failed fdatasync (``fail_next("fdatasync")``) settles the writes it was
  meant to save as a crash would (kept, dropped or torn), while reads still
  see them: a later fdatasync succeeds without saving them, as Linux does
  after a writeback error ("fsyncgate").  Only a writer that stops at the
  first failed fdatasync is safe on it.
* ``fail_next(operation, errno)`` fails the next call of one operation;
  ``short_next_write(n)`` makes the next ``pwritev`` write only ``n`` bytes;
  ``capacity_bytes`` makes the file system fill up (4 KiB blocks per file,
  held until the last name and handle are gone): a write that does not fit
  writes what fits, and one that fits nothing fails with ENOSPC.

After a crash every call fails with EIO (``close`` excepted) until
``restart()``; handles from before the crash are gone.
"""

from __future__ import annotations

import errno
import os
import random
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Final

from ._device import IOV_MAX, BytesLike, FileSystem

_BLOCK_BYTES: Final = 4096
_SECTOR_BYTES: Final = 512
OPERATIONS: Final = ("create", "open", "pwritev", "pread", "fdatasync", "truncate",
                     "sync_directory", "unlink")


def _error(number: int, path: str | Path = "") -> OSError:
    # OSError picks the subclass from the errno (ENOENT: FileNotFoundError, ...).
    return OSError(number, os.strerror(number), str(path))


def _blocks_bytes(size_bytes: int) -> int:
    return -(-size_bytes // _BLOCK_BYTES) * _BLOCK_BYTES


class _Inode:
    __slots__ = ("data", "durable", "links", "open_count", "unsynced")

    def __init__(self) -> None:
        self.data = bytearray()  # what reads see (the page cache)
        self.durable = bytearray()  # what a crash keeps for certain
        # Writes (offset, bytes) and truncations (size) since the last fdatasync.
        self.unsynced: list[tuple[int, bytes] | int] = []
        self.links = 0
        self.open_count = 0


class _Open:
    __slots__ = ("inode", "path", "writable")

    def __init__(self, inode: _Inode, path: str, writable: bool) -> None:
        self.inode = inode
        self.path = path
        self.writable = writable


class MemoryFileSystem:
    """Files and directories in memory; nothing is lost, nothing fails by itself."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._directories: set[str] = {"/"}
        self._names: dict[str, _Inode] = {}
        self._handles: dict[int, _Open] = {}
        self._next_handle = 3

    # --- the seam -------------------------------------------------------------

    def make_directory(self, path: Path) -> None:
        with self._lock:
            self._check("mkdir", path)
            for directory in (path, *path.parents):
                if str(directory) in self._names:
                    raise _error(errno.ENOTDIR, directory)
                self._directories.add(str(directory))

    def list_directory(self, path: Path) -> list[str]:
        with self._lock:
            self._check("list", path)
            directory = str(path)
            if directory not in self._directories:
                raise _error(errno.ENOENT, path)
            names = [Path(n).name for n in self._names if str(Path(n).parent) == directory]
            names += [Path(d).name for d in self._directories
                      if d != directory and str(Path(d).parent) == directory]
            return sorted(names)

    def create_exclusive(self, path: Path) -> int:
        with self._lock:
            self._check("create", path)
            name = str(path)
            if str(path.parent) not in self._directories:
                raise _error(errno.ENOENT, path)
            if name in self._names or name in self._directories:
                raise _error(errno.EEXIST, path)
            inode = _Inode()
            inode.links = 1
            self._names[name] = inode
            return self._open_locked(inode, name, writable=True)

    def open_read(self, path: Path) -> int:
        with self._lock:
            self._check("open", path)
            return self._open_locked(self._inode_locked(path), str(path), writable=False)

    def open_write(self, path: Path) -> int:
        with self._lock:
            self._check("open", path)
            return self._open_locked(self._inode_locked(path), str(path), writable=True)

    def pwritev(self, handle: int, buffers: Sequence[BytesLike], offset: int) -> int:
        with self._lock:
            opened = self._handle_locked(handle, writable=True)
            self._check("pwritev", opened.path)
            if not 0 < len(buffers) <= IOV_MAX or offset < 0:
                raise _error(errno.EINVAL, opened.path)
            data = b"".join(buffers)
            size = self._admit_write_locked(opened.inode, offset, len(data), opened.path)
            data = data[:size]
            inode = opened.inode
            if offset > len(inode.data):
                inode.data.extend(bytes(offset - len(inode.data)))
            inode.data[offset:offset + size] = data
            self._changed_locked(inode, (offset, data))
            return size

    def pread(self, handle: int, length: int, offset: int) -> bytes:
        with self._lock:
            opened = self._handle_locked(handle, writable=False)
            self._check("pread", opened.path)
            if length < 0 or offset < 0:
                raise _error(errno.EINVAL, opened.path)
            return bytes(opened.inode.data[offset:offset + length])

    def fdatasync(self, handle: int) -> None:
        with self._lock:
            opened = self._handle_locked(handle, writable=False)
            self._check("fdatasync", opened.path, opened.inode)
            self._settle_locked(opened.inode, keep_all=True)

    def truncate(self, handle: int, size_bytes: int) -> None:
        with self._lock:
            opened = self._handle_locked(handle, writable=True)
            self._check("truncate", opened.path)
            if size_bytes < 0:
                raise _error(errno.EINVAL, opened.path)
            inode = opened.inode
            if size_bytes > len(inode.data):
                self._admit_write_locked(inode, len(inode.data), size_bytes - len(inode.data),
                                         opened.path, whole=True)
                inode.data.extend(bytes(size_bytes - len(inode.data)))
            else:
                del inode.data[size_bytes:]
            self._changed_locked(inode, size_bytes)

    def sync_directory(self, path: Path) -> None:
        with self._lock:
            self._check("sync_directory", path)
            if str(path) not in self._directories:
                raise _error(errno.ENOENT, path)
            self._directory_synced_locked(str(path))

    def unlink(self, path: Path) -> None:
        with self._lock:
            self._check("unlink", path)
            inode = self._inode_locked(path)
            del self._names[str(path)]
            inode.links -= 1

    def size_bytes(self, path: Path) -> int:
        with self._lock:
            self._check("stat", path)
            return len(self._inode_locked(path).data)

    def close(self, handle: int) -> None:
        with self._lock:
            opened = self._handles.pop(handle, None)
            if opened is None:
                raise _error(errno.EBADF)
            opened.inode.open_count -= 1

    # --- test helpers (no faults, no durability effects) -----------------------

    def file_bytes(self, path: Path) -> bytes:
        """What a read of the whole file returns now."""
        with self._lock:
            return bytes(self._inode_locked(path).data)

    def poke(self, path: Path, offset: int, data: bytes) -> None:
        """Corruption at rest: the bytes change on the medium, synced or not."""
        with self._lock:
            inode = self._inode_locked(path)
            for target in (inode.data, inode.durable):
                if len(target) < offset + len(data):
                    target.extend(bytes(offset + len(data) - len(target)))
                target[offset:offset + len(data)] = data

    def open_handle_count(self) -> int:
        with self._lock:
            return len(self._handles)

    # --- hooks and helpers -------------------------------------------------------

    def _check(self, operation: str, path: str | Path, inode: _Inode | None = None) -> None:
        """Raise what the next call of ``operation`` should raise (nothing here)."""

    def _changed_locked(self, inode: _Inode, change: tuple[int, bytes] | int) -> None:
        """A write (offset, bytes) or a truncation (size) reached the page cache."""

    def _admit_write_locked(self, inode: _Inode, offset: int, size: int, path: str, *,
                            whole: bool = False) -> int:
        """How many of ``size`` bytes at ``offset`` may be written (all, here)."""
        return size

    def _settle_locked(self, inode: _Inode, *, keep_all: bool) -> None:
        """An fdatasync of ``inode`` returned (nothing to do: nothing is ever lost here)."""

    def _directory_synced_locked(self, directory: str) -> None:
        pass

    def _inode_locked(self, path: Path) -> _Inode:
        inode = self._names.get(str(path))
        if inode is None:
            raise _error(errno.ENOENT, path)
        return inode

    def _open_locked(self, inode: _Inode, path: str, *, writable: bool) -> int:
        handle = self._next_handle
        self._next_handle += 1
        self._handles[handle] = _Open(inode, path, writable)
        inode.open_count += 1
        return handle

    def _handle_locked(self, handle: int, *, writable: bool) -> _Open:
        opened = self._handles.get(handle)
        if opened is None or (writable and not opened.writable):
            raise _error(errno.EBADF)
        return opened


class FaultyFileSystem(MemoryFileSystem):
    """A MemoryFileSystem that crashes precisely and fails on demand (module docstring)."""

    def __init__(self, *, rng: random.Random | None = None,
                 capacity_bytes: int | None = None) -> None:
        super().__init__()
        self._rng = rng if rng is not None else random.Random(0)
        self.capacity_bytes = capacity_bytes
        # The namespace as of the last fsync of each name's directory.
        self._durable_names: dict[str, _Inode] = {}
        self._faults: dict[str, OSError] = {}
        self._short_write_bytes: int | None = None
        self.crashed = False
        # (operation, errno, path) of every injected failure and ENOSPC, in order.
        self.failures: list[tuple[str, int, str]] = []

    # --- failures on demand ----------------------------------------------------

    def fail_next(self, operation: str, error_number: int = errno.EIO) -> None:
        """The next call of ``operation`` (one of ``OPERATIONS``) fails with that errno."""
        if operation not in OPERATIONS:
            raise ValueError(f"unknown operation {operation!r}; one of {OPERATIONS}")
        with self._lock:
            self._faults[operation] = _error(error_number, f"injected {operation} failure")

    def short_next_write(self, size_bytes: int) -> None:
        """The next ``pwritev`` writes at most ``size_bytes`` (>= 1) and says so."""
        with self._lock:
            self._short_write_bytes = max(1, size_bytes)

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()
            self._short_write_bytes = None

    def used_bytes(self) -> int:
        with self._lock:
            return self._used_locked()

    # --- crash ------------------------------------------------------------------

    def crash(self) -> None:
        """Lose power now (module docstring); every call then fails until ``restart()``."""
        with self._lock:
            inodes = {id(i): i for i in (*self._names.values(), *self._durable_names.values())}
            for inode in inodes.values():
                self._settle_locked(inode, keep_all=False)
                inode.data = bytearray(inode.durable)
                inode.open_count = 0
            names: dict[str, _Inode] = {}
            for name in sorted({*self._names, *self._durable_names}):
                now, durable = self._names.get(name), self._durable_names.get(name)
                survivor = now if now is durable or self._rng.random() < 0.5 else durable
                if survivor is not None:
                    names[name] = survivor
            for inode in inodes.values():
                inode.links = 0
            for inode in names.values():
                inode.links += 1
            self._names = names
            self._durable_names = dict(names)
            self._handles.clear()
            self.crashed = True

    def restart(self) -> None:
        """Power back on: the files hold what survived; no failure is armed."""
        with self._lock:
            self.crashed = False
            self._faults.clear()
            self._short_write_bytes = None

    def close(self, handle: int) -> None:
        if self.crashed:
            return  # Handles died with the crash; closing one is harmless.
        super().close(handle)

    # --- hooks ----------------------------------------------------------------------

    def _check(self, operation: str, path: str | Path, inode: _Inode | None = None) -> None:
        if self.crashed:
            raise _error(errno.EIO, path)
        fault = self._faults.pop(operation, None)
        if fault is None:
            return
        self.failures.append((operation, fault.errno or 0, str(path)))
        if inode is not None and operation == "fdatasync":
            # The kernel gave up on the dirty pages: settle them now, as a crash would.
            self._settle_locked(inode, keep_all=False)
        raise fault

    def _changed_locked(self, inode: _Inode, change: tuple[int, bytes] | int) -> None:
        inode.unsynced.append(change)

    def _admit_write_locked(self, inode: _Inode, offset: int, size: int, path: str, *,
                            whole: bool = False) -> int:
        if self._short_write_bytes is not None and not whole and size > 0:
            size, self._short_write_bytes = min(size, self._short_write_bytes), None
        if self.capacity_bytes is None:
            return size
        allocated = _blocks_bytes(len(inode.data))
        room = self.capacity_bytes - self._used_locked()
        end_max = allocated + max(0, room) // _BLOCK_BYTES * _BLOCK_BYTES
        fitting = max(0, min(size, end_max - offset))
        if fitting == size or (fitting > 0 and not whole):
            return fitting
        self.failures.append(("pwritev" if not whole else "truncate", errno.ENOSPC, path))
        raise _error(errno.ENOSPC, path)

    def _used_locked(self) -> int:
        inodes = {id(i): i for i in self._names.values()}
        inodes.update((id(o.inode), o.inode) for o in self._handles.values())
        return sum(_blocks_bytes(len(i.data)) for i in inodes.values())

    def _settle_locked(self, inode: _Inode, *, keep_all: bool) -> None:
        """Make the unsynced changes durable: all of them, or each as a crash leaves it."""
        durable = inode.durable
        for change in inode.unsynced:
            if isinstance(change, int):
                if keep_all or self._rng.random() < 0.5:
                    _resize(durable, change)
                continue
            offset, data = change
            for start, piece in _block_pieces(offset, data):
                keep = len(piece) if keep_all else self._surviving_bytes(len(piece))
                if keep == 0 and start >= len(durable) and self._rng.random() < 0.5:
                    _resize(durable, start + len(piece))  # size landed, data did not
                if keep:
                    if len(durable) < start:
                        _resize(durable, start)
                    durable[start:start + keep] = piece[:keep]
        inode.unsynced.clear()

    def _surviving_bytes(self, size: int) -> int:
        """Of one block's piece of a write: all, nothing, or a prefix of whole sectors."""
        fate = self._rng.randrange(3)
        if fate == 0:
            return size
        sectors = -(-size // _SECTOR_BYTES)
        if fate == 1 or sectors == 1:
            return 0
        return _SECTOR_BYTES * self._rng.randrange(1, sectors)

    def _directory_synced_locked(self, directory: str) -> None:
        for name in [n for n in self._durable_names if str(Path(n).parent) == directory]:
            del self._durable_names[name]
        for name, inode in self._names.items():
            if str(Path(name).parent) == directory:
                self._durable_names[name] = inode


def _resize(data: bytearray, size: int) -> None:
    if size < len(data):
        del data[size:]
    else:
        data.extend(bytes(size - len(data)))


def _block_pieces(offset: int, data: bytes) -> Iterable[tuple[int, bytes]]:
    """``data`` written at ``offset``, cut at 4 KiB file block boundaries."""
    position = 0
    while position < len(data):
        start = offset + position
        end = min(offset + len(data), (start // _BLOCK_BYTES + 1) * _BLOCK_BYTES)
        yield start, data[position:position + end - start]
        position += end - start


def _satisfies_the_seam(memory: MemoryFileSystem, faulty: FaultyFileSystem) -> list[FileSystem]:
    """Never called: makes mypy check that both implement ``FileSystem``."""
    return [memory, faulty]
