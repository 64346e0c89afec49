"""Giving freed heap memory back to the operating system: :func:`release_free_heap`."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    trim = getattr(ctypes.CDLL(name), "malloc_trim", None)  # glibc only
    if trim is None:
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim  # type: ignore[no-any-return]


def release_free_heap() -> bool:
    """Ask glibc's malloc to return the free pages of every arena to the kernel.

    Memory freed in bulk — RocksDB's memtables after a flush, the records of
    tens of thousands of deleted ledgers — otherwise stays in the process's
    arenas (free for malloc to reuse, still counted in its RSS).  It costs a
    walk of the arenas (milliseconds with some hundreds of MiB), so it belongs
    after such a release, not on a hot path.  False where the C library has
    no ``malloc_trim`` (musl, macOS): nothing was done."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
