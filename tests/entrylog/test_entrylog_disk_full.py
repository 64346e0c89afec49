"""A real full disk: an 8 MiB ext4 image on a loop device fills up under the entry log.

Needs root (losetup, mount), as CI has: without it the test fails, it is
never skipped.  Checked: appends fail with ``DiskFull`` (not ``DeviceBroken``),
nothing synced is lost, removing logs frees space and appends then succeed,
and a store opened on the full disk works and can be dug out the same way.
Between phases the file system is unmounted and mounted again, so what is read
back comes from the disk, not from the page cache.
"""

from __future__ import annotations

import contextlib
import os

import crc32c
import pytest

from common.errors import DiskFull
from common.units import KiB, MiB
from entrylog import EntryLogSettings, EntryLogStore, Location
from tests.conftest import SMALL_EXT4_SIZE_BYTES, SmallExt4

pytestmark = pytest.mark.root

PAYLOAD_SIZE_BYTES = 16 * KiB


def _payload(ledger_id: int, entry_id: int) -> bytes:
    seed = f"L{ledger_id}E{entry_id}-".encode()
    return (seed * (PAYLOAD_SIZE_BYTES // len(seed) + 1))[:PAYLOAD_SIZE_BYTES]


class Writer:
    """Appends in batches of 8 with a sync after each; remembers what was synced."""

    def __init__(self, store: EntryLogStore) -> None:
        self.store = store
        self.synced: dict[tuple[int, int], Location] = {}
        self.next_entry = 0

    def batch(self) -> None:
        pending = {}
        for _ in range(8):
            key = (1 + self.next_entry % 3, self.next_entry)
            self.next_entry += 1
            payload = _payload(*key)
            pending[key] = self.store.append(*key, payload, crc32c.crc32c(payload))
        self.store.sync()
        self.synced |= pending

    def fill(self) -> DiskFull:
        """Batches until the disk is full; the DiskFull that said so."""
        for _ in range(SMALL_EXT4_SIZE_BYTES // (8 * PAYLOAD_SIZE_BYTES) + 10):
            try:
                self.batch()
            except DiskFull as exc:
                return exc
        pytest.fail("the disk never filled up")

    def check(self, store: EntryLogStore) -> None:
        for key, location in self.synced.items():
            assert store.read(location, *key)[0] == _payload(*key), f"lost {key}"

    def remove_oldest(self, store: EntryLogStore, count: int) -> None:
        for log_id in store.flushed_log_ids()[:count]:
            store.remove(log_id)
            self.synced = {k: loc for k, loc in self.synced.items() if loc.log_id != log_id}


def test_a_full_ext4_disk_is_not_corruption(ext4: SmallExt4) -> None:
    settings = EntryLogSettings(directory=ext4.mountpoint / "entrylogs",
                                size_bytes_limit=1 * MiB, write_buffer_size_bytes=64 * KiB)
    store = EntryLogStore(settings)
    writer = Writer(store)
    full = writer.fill()
    assert "No space left on device" in str(full)
    assert ext4.free_bytes() < 8 * PAYLOAD_SIZE_BYTES
    assert len(writer.synced) >= 200  # Most of the disk holds synced entries.
    writer.check(store)
    with pytest.raises(DiskFull):  # Still full, still not broken.
        writer.batch()
    assert store.statistics().disk_full_count >= 2

    writer.remove_oldest(store, 2)  # What GC does; space comes back.
    for _ in range(4):
        writer.batch()
    writer.check(store)
    store.close()

    ext4.unmount()  # Read back from the disk, not from the page cache.
    ext4.mount()
    store = EntryLogStore(settings)
    writer.store = store
    writer.check(store)
    writer.fill()
    ext4.fill_up()
    with contextlib.suppress(DiskFull):
        store.close()  # Sealing may not fit; the next open seals it.

    ext4.unmount()
    ext4.mount()
    on_full_disk = EntryLogStore(settings)  # Opening a full disk works...
    current = f"{on_full_disk.current_log_id:016x}.log"
    assert current not in os.listdir(settings.directory)  # (no room for its header)
    writer.store = on_full_disk
    writer.check(on_full_disk)
    with pytest.raises(DiskFull):
        writer.batch()
    writer.remove_oldest(on_full_disk, 2)  # ... and it can be dug out.
    for _ in range(4):
        writer.batch()
    writer.check(on_full_disk)
    on_full_disk.close()

    ext4.unmount()
    ext4.mount()
    last = EntryLogStore(settings)
    writer.check(last)
    assert last.seal_unsealed() == []  # Every log left unsealed was sealed by now.
    last.close()
