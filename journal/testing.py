"""Test doubles: in-memory block devices for tests and seeded simulation (STYLE 13).

Not production code: the service never imports a ``testing`` module
(``tests/test_layers.py``); they live beside the real device so that they are
type-checked against the same ``BlockDevice`` seam and its alignment rules.

``MemoryDevice`` is a bytearray with the alignment rules of O_DIRECT enforced.
``FaultyDevice`` adds what a real disk does to a crashing process: writes that no
sync covered yet may be kept, dropped, or torn per 4 KiB sector (a torn sector
keeps a prefix of its 512-byte hardware sectors).  It can also fail the next
pwrite or sync with an OSError, translated like a real device's.
"""

from __future__ import annotations

import errno
import random
import threading

from common.errors import DeviceBroken

from ._device import check_aligned

_SECTOR_BYTES = 4096
_HARDWARE_SECTOR_BYTES = 512


class MemoryDevice:
    def __init__(self, size_bytes: int, *, path: str = "memory:journal") -> None:
        self.path = path
        self.size_bytes = size_bytes
        self._data = bytearray(size_bytes)
        self._lock = threading.Lock()

    def pread(self, offset: int, size: int) -> bytes:
        check_aligned(offset, size, self.size_bytes, self.path)
        with self._lock:
            return bytes(self._data[offset:offset + size])

    def pwrite(self, offset: int, data: bytes | memoryview) -> None:
        check_aligned(offset, len(data), self.size_bytes, self.path)
        with self._lock:
            self._data[offset:offset + len(data)] = data

    def sync(self) -> None:
        pass

    def close(self) -> None:
        pass

    # Test helpers: raw access that ignores alignment (corruption harness).
    def peek(self, offset: int, size: int) -> bytes:
        with self._lock:
            return bytes(self._data[offset:offset + size])

    def poke(self, offset: int, data: bytes) -> None:
        with self._lock:
            self._data[offset:offset + len(data)] = data


class FaultyDevice(MemoryDevice):
    """A MemoryDevice that remembers unsynced writes and loses or tears them on crash."""

    def __init__(self, size_bytes: int, *, path: str = "memory:faulty-journal") -> None:
        super().__init__(size_bytes, path=path)
        self._durable = bytearray(size_bytes)
        self._unsynced: list[tuple[int, bytes]] = []
        self._fail_next_pwrite: OSError | None = None
        self._fail_next_sync: OSError | None = None
        self.crashed = False
        self.pwrite_count = 0
        self.sync_count = 0

    def fail_next_pwrite(self, exc: OSError | None = None) -> None:
        self._fail_next_pwrite = exc or OSError(errno.EIO, "injected write error")

    def fail_next_sync(self, exc: OSError | None = None) -> None:
        self._fail_next_sync = exc or OSError(errno.EIO, "injected fdatasync error")

    def _check_alive(self, offset: int) -> None:
        if self.crashed:
            raise DeviceBroken(f"{self.path} at offset {offset}: device has crashed")

    def pwrite(self, offset: int, data: bytes | memoryview) -> None:
        check_aligned(offset, len(data), self.size_bytes, self.path)
        with self._lock:
            self._check_alive(offset)
            if self._fail_next_pwrite is not None:
                exc, self._fail_next_pwrite = self._fail_next_pwrite, None
                raise DeviceBroken(f"write to {self.path} at offset {offset}: {exc}") from exc
            self.pwrite_count += 1
            chunk = bytes(data)
            self._data[offset:offset + len(chunk)] = chunk
            self._unsynced.append((offset, chunk))

    def sync(self) -> None:
        with self._lock:
            self._check_alive(0)
            if self._fail_next_sync is not None:
                exc, self._fail_next_sync = self._fail_next_sync, None
                raise DeviceBroken(f"fdatasync of {self.path} failed: {exc}") from exc
            self.sync_count += 1
            for offset, chunk in self._unsynced:
                self._durable[offset:offset + len(chunk)] = chunk
            self._unsynced.clear()

    @property
    def unsynced_write_count(self) -> int:
        with self._lock:
            return len(self._unsynced)

    def crash(self, rng: random.Random) -> None:
        """Lose power: each 4 KiB sector of every unsynced write is kept, dropped or
        torn (a prefix of its 512-byte sectors kept), in write order.  Afterwards
        every I/O fails until :meth:`restart`."""
        with self._lock:
            for offset, chunk in self._unsynced:
                for start in range(0, len(chunk), _SECTOR_BYTES):
                    sector = chunk[start:start + _SECTOR_BYTES]
                    fate = rng.randrange(3)
                    if fate == 0:
                        keep = len(sector)
                    elif fate == 1:
                        keep = 0
                    else:
                        keep = _HARDWARE_SECTOR_BYTES * rng.randrange(
                            1, len(sector) // _HARDWARE_SECTOR_BYTES)
                    at = offset + start
                    self._durable[at:at + keep] = sector[:keep]
            self._unsynced.clear()
            self._data[:] = self._durable
            self.crashed = True

    def restart(self) -> None:
        """Power back on: the device holds what survived the crash."""
        with self._lock:
            self.crashed = False
            self._fail_next_pwrite = self._fail_next_sync = None

    def poke(self, offset: int, data: bytes) -> None:
        # Corruption at rest: it is on the platter, synced or not.
        with self._lock:
            self._data[offset:offset + len(data)] = data
            self._durable[offset:offset + len(data)] = data
