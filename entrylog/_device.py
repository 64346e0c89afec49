"""The device seam: every file and directory call the entry logs make (STYLE 2, 13).

``FileSystem`` is the Protocol; ``OsFileSystem`` is the real one, a thin layer
over the ``os`` module.  Methods behave like the system calls they are named
after: they raise ``OSError`` (with its errno) and may return short counts;
``_io.Files`` completes short writes and reads and translates ``OSError`` into
the error tree, so the in-memory test doubles (``entrylog.testing``) exercise the
same loops and translations as the real one.  Handles are plain ints (file
descriptors for the OS).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from common.files import make_directory

BytesLike = bytes | bytearray | memoryview


def _iov_max() -> int:
    try:
        value = os.sysconf("SC_IOV_MAX")
    except (ValueError, OSError):
        value = -1
    # POSIX guarantees at least 16; Linux reports 1024.
    return value if value > 0 else 16


# The most buffers one ``pwritev`` may be given (EINVAL beyond it).
IOV_MAX = _iov_max()


@runtime_checkable
class FileSystem(Protocol):
    """What ``EntryLogStore`` does to files and directories, and nothing else."""

    def make_directory(self, path: Path) -> None:
        """mkdir -p."""
        ...

    def list_directory(self, path: Path) -> list[str]: ...

    def create_exclusive(self, path: Path) -> int:
        """A new, empty file opened read-write; ``FileExistsError`` if the name exists."""
        ...

    def open_read(self, path: Path) -> int:
        """``FileNotFoundError`` if the name does not exist."""
        ...

    def open_write(self, path: Path) -> int: ...

    def pwritev(self, handle: int, buffers: Sequence[BytesLike], offset: int) -> int:
        """Write the buffers back to back at ``offset`` (at most ``IOV_MAX`` of them);
        return how many bytes were written, which may be fewer than given."""
        ...

    def pread(self, handle: int, length: int, offset: int) -> bytes:
        """Up to ``length`` bytes; fewer at the end of the file (or short anyway)."""
        ...

    def fdatasync(self, handle: int) -> None:
        """Every write (and size change) of this file that returned before the call
        began is durable once it returns."""
        ...

    def truncate(self, handle: int, size_bytes: int) -> None: ...

    def sync_directory(self, path: Path) -> None:
        """Make every creation and unlink of a name in ``path`` durable."""
        ...

    def unlink(self, path: Path) -> None:
        """``FileNotFoundError`` if the name does not exist."""
        ...

    def size_bytes(self, path: Path) -> int: ...

    def close(self, handle: int) -> None: ...


class OsFileSystem:
    """The real file system: each method is one ``os`` call."""

    def make_directory(self, path: Path) -> None:
        make_directory(path)  # durable in its parent, one level at a time

    def list_directory(self, path: Path) -> list[str]:
        return os.listdir(path)

    def create_exclusive(self, path: Path) -> int:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)

    def open_read(self, path: Path) -> int:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)

    def open_write(self, path: Path) -> int:
        return os.open(path, os.O_WRONLY | os.O_CLOEXEC)

    def pwritev(self, handle: int, buffers: Sequence[BytesLike], offset: int) -> int:
        return os.pwritev(handle, buffers, offset)

    def pread(self, handle: int, length: int, offset: int) -> bytes:
        return os.pread(handle, length, offset)

    def fdatasync(self, handle: int) -> None:
        os.fdatasync(handle)

    def truncate(self, handle: int, size_bytes: int) -> None:
        os.ftruncate(handle, size_bytes)

    def sync_directory(self, path: Path) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def unlink(self, path: Path) -> None:
        os.unlink(path)

    def size_bytes(self, path: Path) -> int:
        return os.stat(path).st_size

    def close(self, handle: int) -> None:
        os.close(handle)


def _satisfies_the_seam(fs: OsFileSystem) -> FileSystem:
    """Never called: makes mypy check that ``OsFileSystem`` implements ``FileSystem``."""
    return fs
