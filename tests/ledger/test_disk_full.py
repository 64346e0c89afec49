"""A full data disk (issue 14 item 8), on a real ext4 image of a few MiB that fills up.

The journal lives elsewhere (as on a dedicated device), the data directory
(entry logs, RocksDB) on the small file system.  What must hold:

- adds turn into 507 (``DiskFull``, code EREADONLY) once a checkpoint cannot
  write the entry log; nothing acknowledged is lost or unreadable meanwhile
  (the stalled checkpoint's entries are served from memory);
- the bookie reopens on the full disk (read-only, everything readable);
- deleting ledgers and forcing GC digs it out: the deletions are committed on
  their own, the entry logs they emptied are removed, the stalled checkpoint
  completes and adds are accepted again;
- after a last restart every acknowledged entry of the kept ledgers reads back.

Needs root (losetup, mount), as CI has; without it the test fails.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.errors import DiskFull
from common.units import KiB, MiB
from compaction import CompactionSettings, GarbageCollector
from entrylog import EntryLogSettings
from journal import JournalSettings
from ledger import Bookie, EngineSettings, LedgerLimits, WriteCacheSettings
from tests.conftest import SmallExt4

pytestmark = pytest.mark.root
T = 10.0
SIZE = 64 * KiB


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[SmallExt4]:
    fs = SmallExt4(tmp_path, size_bytes=16 * MiB)
    try:
        fs.format_and_mount()
        yield fs
    finally:
        with contextlib.suppress(BaseException):
            fs.unmount()
        fs.loop.detach()


def settings(disk: SmallExt4, journal_dir: Path) -> EngineSettings:
    data = disk.mountpoint / "data"
    return EngineSettings(
        data_dir=data,
        journal=JournalSettings(device_path=journal_dir / "journal.dev",
                                capacity_bytes=64 * MiB, sliding_window_bytes_max=4 * MiB),
        entry_log=EntryLogSettings(directory=data / "entrylogs", size_bytes_limit=1 * MiB),
        write_cache=WriteCacheSettings(size_bytes=2 * MiB, flush_interval_s=3600.0,
                                       wait_s_max=1.0),
        limits=LedgerLimits(entry_size_bytes_max=SIZE, batch_size_bytes_max=1 * MiB))


def payload(ledger_id: int, entry_id: int) -> bytes:
    seed = f"L{ledger_id}E{entry_id}-".encode()
    return (seed * (SIZE // len(seed) + 1))[:SIZE]


def fill(b: Bookie, ledgers: list[int]) -> dict[int, int]:
    """Adds to one ledger after the other (a checkpoint after every few, so each
    ledger's entries fill entry logs of their own) until a 507; the last
    acknowledged entry id of each ledger."""
    acked = {lid: -1 for lid in ledgers}
    per_ledger = 16 * MiB // SIZE // len(ledgers) + 8
    for n in range(len(ledgers) * per_ledger):
        lid = ledgers[min(n // per_ledger, len(ledgers) - 1)]
        try:
            (added,) = b.append(lid, [(None, (payload(lid, acked[lid] + 1),))], password="")
            result = added.result(T)
        except DiskFull:
            return acked
        acked[lid] = result.first_entry_id
        if n % 8 == 7:
            with contextlib.suppress(DiskFull):
                b.checkpoint()
    pytest.fail("16 MiB never filled up")


def verify(b: Bookie, acked: dict[int, int]) -> None:
    for lid, last in acked.items():
        assert b.get_ledger(lid).last_add_confirmed >= last
        for entry_id in range(last + 1):
            assert b.read_entry(lid, entry_id).payload == payload(lid, entry_id), (lid, entry_id)


def test_a_full_data_disk_is_read_only_readable_and_can_be_dug_out(
        disk: SmallExt4, tmp_path: Path) -> None:
    config = settings(disk, tmp_path)
    b = Bookie.open(config)
    try:
        ledgers = [b.create_ledger(password="", metadata={}).result(T).ledger_id
                   for _ in range(4)]
        acked = fill(b, ledgers)
        assert b.disk_full and sum(last + 1 for last in acked.values()) > 100
        with pytest.raises(DiskFull):
            b.append(ledgers[0], [(None, (b"refused",))], password="")[0].result(T)
        verify(b, acked)  # the stalled checkpoint's entries come from memory
    finally:
        b.close()  # the journal keeps what could not be checkpointed

    b = Bookie.open(config)  # on the full disk
    try:
        assert b.disk_full
        verify(b, acked)
        for lid in ledgers[:2]:
            b.delete_ledger(lid, password="").result(T)  # allowed while full
        gc = GarbageCollector(b, CompactionSettings(rate_bytes_per_s=0),
                              disk_usage=lambda: 1.0)
        report = gc.run_once(forced=True, force_major=True)
        assert report.logs_removed + report.logs_compacted >= 1, report
        b.checkpoint()  # the stalled one completes now that there is room
        assert not b.disk_full
        kept = {lid: acked[lid] for lid in ledgers[2:]}
        next_payload = payload(ledgers[2], kept[ledgers[2]] + 1)
        (extra,) = b.append(ledgers[2], [(None, (next_payload,))], password="")
        kept[ledgers[2]] = extra.result(T).first_entry_id
    finally:
        b.close()

    b = Bookie.open(config)
    try:
        assert not b.disk_full
        verify(b, kept)
    finally:
        b.close()
