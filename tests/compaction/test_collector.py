"""The collector with a real bookie: real entry-log files, real RocksDB, the
journal on a file or loop device.  The read cache is off so every read after GC
goes through the index to the entry log."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from common.errors import InvalidSetting
from common.units import KiB, MiB
from compaction import CompactionSettings, GarbageCollector, GcRunReport
from ledger import (
    Bookie,
    CheckpointStep,
    OffloadInfo,
    OffloadState,
    ReadCacheSettings,
    TierPosition,
)
from tests.compaction._data import (
    T,
    delete,
    entry_log_bytes,
    payload,
    verify,
    write_interleaved,
    write_sequential,
)
from tests.conftest import small_engine_settings

SIZE = 1 * KiB


def _settings(data_dir: Path, device: Path | None):
    return small_engine_settings(data_dir, device, read_cache=ReadCacheSettings(size_bytes=0))


def _compaction(**values: object) -> CompactionSettings:
    merged: dict[str, object] = {"gc_wait_time_s": 3600.0, "minor_interval_s": 3600.0,
                                 "major_interval_s": 3600.0, "rate_bytes_per_s": 0}
    merged.update(values)
    return CompactionSettings(**merged)  # type: ignore[arg-type]


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def bookie(data_dir: Path, journal_device: Path | None):
    b = Bookie.open(_settings(data_dir, journal_device))
    yield b
    b.close()


def _collector(b: Bookie, *, disk: float = 0.1, clock: Clock | None = None,
               compaction: CompactionSettings | None = None,
               **kw: object) -> GarbageCollector:
    return GarbageCollector(b, compaction or _compaction(), disk_usage=lambda: disk,
                            clock=clock or Clock(), **kw)  # type: ignore[arg-type]


def test_deleting_half_the_ledgers_shrinks_the_disk(bookie: Bookie, data_dir: Path) -> None:
    ids = write_sequential(bookie, ledgers=20, entries=60, size=SIZE)
    before = entry_log_bytes(data_dir)
    delete(bookie, ids[:10])  # the older half: whole entry logs hold nothing else
    report = _collector(bookie).run_once(forced=True)
    after = entry_log_bytes(data_dir)
    assert report.logs_removed >= 2 and report.reclaimed_by_deletion_bytes > 0
    assert report.logs_compacted == 0  # nothing due, none forced: deletion alone
    assert after < before * 0.7, (before, after)
    verify(bookie, ids[10:], entries=60, size=SIZE)


def test_interleaved_ledgers_are_reclaimed_only_by_compaction(
        data_dir: Path, journal_device: Path | None) -> None:
    b = Bookie.open(_settings(data_dir, journal_device))
    ids = write_interleaved(b, ledgers=50, entries=40, size=SIZE)
    dead, kept = [i for i in ids if i % 10], [i for i in ids if i % 10 == 0]
    delete(b, dead)
    before = entry_log_bytes(data_dir)
    gc = _collector(b)
    plain = gc.run_once()  # not due, not forced: nothing to compact, no log empty
    assert (plain.logs_removed, plain.logs_compacted) == (0, 0)
    report = gc.run_once(forced=True, force_minor=True)  # usage ~0.1: minor reclaims it
    assert report.minor and report.logs_compacted >= 3, report
    assert report.moved_entries > 0 and report.reclaimed_by_compaction_bytes > 0
    after = entry_log_bytes(data_dir)
    assert after < before * 0.5, (before, after)
    verify(b, kept, entries=40, size=SIZE)
    b.close()
    b = Bookie.open(_settings(data_dir, journal_device))
    try:
        verify(b, kept, entries=40, size=SIZE)
    finally:
        b.close()


def test_thresholds_pick_which_logs_are_compacted(bookie: Bookie) -> None:
    ids = write_interleaved(bookie, ledgers=10, entries=60, size=SIZE)
    delete(bookie, ids[:5])  # every log is about half live
    clock = Clock()
    gc = _collector(bookie, clock=clock)
    clock.now += 3600.0  # both kinds are due
    gc.suspend_compaction(major=True, minor=False)
    minor = gc.run_once()
    assert minor.minor and not minor.major and minor.logs_compacted == 0
    assert any("major: suspended" in s for s in minor.skipped)
    gc.resume_compaction(major=True, minor=False)
    clock.now += 3600.0
    major = gc.run_once()
    assert major.major and major.logs_compacted >= 2
    details = gc.gc_details()
    assert details["major_compaction_count"] == 1 and details["minor_compaction_count"] == 1
    assert details["last_major_compaction_time"] == clock.now
    verify(bookie, ids[5:], entries=60, size=SIZE)


@pytest.mark.parametrize(("disk", "ran"), [(0.5, "major"), (0.92, "minor"), (0.97, None)])
def test_disk_pressure_suspends_scheduled_compaction(bookie: Bookie, disk: float,
                                                     ran: str | None) -> None:
    ids = write_interleaved(bookie, ledgers=10, entries=30, size=SIZE)
    delete(bookie, ids[:9])
    clock = Clock()
    gc = _collector(bookie, disk=disk, clock=clock)
    clock.now += 3600.0
    report = gc.run_once()
    assert (report.major, report.minor) == (ran == "major", ran == "minor")
    if ran is None:
        assert any("hard threshold" in s for s in report.skipped)
        bookie.set_read_only(True)  # what the app's disk watch does at this usage
        forced = gc.run_once(forced=True, force_major=True)  # a full disk can still recover
        assert forced.major and forced.logs_compacted >= 1
    verify(bookie, ids[9:], entries=30, size=SIZE)


def test_settings_are_validated_with_the_setting_named() -> None:
    bad = [({"minor_threshold": 0.9, "major_threshold": 0.8}, "minor_compaction_threshold"),
           ({"major_threshold": 1.5}, "major_compaction_threshold"),
           ({"gc_wait_time_s": 600.0, "minor_interval_s": 60.0}, "minor_compaction_interval"),
           ({"gc_wait_time_s": 600.0, "minor_interval_s": 600.0, "major_interval_s": 300.0},
            "major_compaction_interval"),
           ({"disk_warn_threshold": 0.99, "disk_hard_threshold": 0.95},
            "disk_usage_warn_threshold")]
    for values, name in bad:
        with pytest.raises(InvalidSetting, match=name.upper()):
            _compaction(**values).check()


def test_background_thread_runs_a_forced_gc(bookie: Bookie, data_dir: Path) -> None:
    ids = write_sequential(bookie, ledgers=10, entries=60, size=SIZE)
    delete(bookie, ids[:5])
    gc = _collector(bookie)
    gc.start()
    try:
        gc.trigger_gc(force_major=True, force_minor=False)
        assert gc.is_in_force_gc()
        deadline = time.monotonic() + T
        while gc.is_in_force_gc() and time.monotonic() < deadline:
            time.sleep(0.01)  # polling an observable state, not standing in for it
        assert not gc.is_in_force_gc()
        assert gc.gc_details()["logs_removed"] >= 1
    finally:
        gc.stop()
    verify(bookie, ids[5:], entries=60, size=SIZE)


def test_adds_and_reads_keep_flowing_while_compaction_runs(
        data_dir: Path, journal_device: Path | None) -> None:
    # ~2.4 MiB moved at 2 MiB/s (read + write): the run takes over a second.
    b = Bookie.open(_settings(data_dir, journal_device))
    throttled = _compaction(rate_bytes_per_s=2 * 1024 * KiB, commit_bytes=64 * KiB)
    try:
        ids = write_interleaved(b, ledgers=10, entries=240, size=SIZE)
        delete(b, ids[:5])
        kept = ids[5:]
        gc = _collector(b, compaction=throttled)
        done = threading.Event()
        writer = b.create_ledger(password="pw", metadata={}).result(T).ledger_id
        errors: list[BaseException] = []

        def compact() -> None:
            try:
                gc.run_once(forced=True, force_major=True)
            finally:
                done.set()

        def read_kept() -> int:
            count = 0
            while not done.is_set():
                lid, e = kept[count % len(kept)], (count * 7) % 240
                assert b.read_entry(lid, e).payload == payload(lid, e, SIZE)
                count += 1
            return count

        adds_during = 0
        with ThreadPoolExecutor(3) as pool:
            run = pool.submit(compact)
            readers = [pool.submit(read_kept) for _ in range(2)]
            while not done.is_set():
                b.append(writer, [(None, (b"x" * SIZE,))], password="pw")[0].result(T)
                adds_during += 1
            run.result()
            reads = sum(r.result() for r in readers)
        assert not errors
        report = gc.gc_details()["last_run"]
        assert isinstance(report, dict) and report["logs_compacted"] >= 2
        assert report["duration_s"] > 0.5
        # Adds were not locked out: many completed while the run went on.
        assert adds_during > 5, adds_during
        assert reads > 5, reads
        verify(b, kept, entries=240, size=SIZE)
    finally:
        b.close()


class DictReader:
    def __init__(self, entries: dict[tuple[int, int], bytes]) -> None:
        self.entries = entries

    def read_entry(self, ledger_id: int, entry_id: int,
                   info: OffloadInfo) -> tuple[bytes, int]:
        import crc32c

        data = self.entries[(ledger_id, entry_id)]
        return data, crc32c.crc32c(data)


def test_offloaded_ledgers_past_the_lag_become_garbage(data_dir: Path) -> None:
    ids = list(range(1, 7))  # what write_sequential creates in a fresh data dir
    remote = {(lid, e): payload(lid, e, SIZE) for lid in ids[:3] for e in range(60)}
    bookie = Bookie.open(_settings(data_dir, None), remote=DictReader(remote))
    assert write_sequential(bookie, ledgers=6, entries=60, size=SIZE) == ids
    clock = Clock()
    for lid in ids[:3]:
        bookie.set_offload(lid, OffloadInfo(state=OffloadState.OFFLOADED, bucket="b",
                                            key_prefix=f"p/{lid}/", offloaded_at=clock.now))
    gc = _collector(bookie, clock=clock, offload_deletion_lag_s=100.0)
    early = gc.run_once(forced=True)
    assert early.local_copies_dropped == 0
    before = entry_log_bytes(data_dir)
    clock.now += 100.0
    late = gc.run_once(forced=True, force_major=True)
    assert late.local_copies_dropped == 3
    assert late.logs_removed + late.logs_compacted >= 1, late
    assert entry_log_bytes(data_dir) < before
    verify(bookie, ids, entries=60, size=SIZE)  # the first three now come from "S3"
    assert all(bookie.get_ledger(lid).offload.local_deleted for lid in ids[:3])
    bookie.close()


def test_a_log_sealed_by_a_checkpoint_not_yet_indexed_is_not_removed(data_dir: Path) -> None:
    """A checkpoint fills an entry log and seals it (it is "flushed" for GC)
    before its index batch commits.  A ledger tiered while open counts in a
    log only the entries the index points into it, none yet for that log, so
    a GC run right then (run inside the checkpoint, between the entry-log
    sync and the index commit) must not take the log for empty: its entries
    are acknowledged and, not yet tiered, exist nowhere else."""
    size = 3 * KiB
    tiered = 100
    armed: list[GarbageCollector] = []
    inside: list[GcRunReport] = []

    def gc_inside_the_checkpoint(step: CheckpointStep) -> None:
        if step is CheckpointStep.ENTRY_LOG_SYNCED and armed:
            inside.append(armed.pop().run_once())

    remote = DictReader({(1, e): payload(1, e, size) for e in range(tiered)})
    # A write cache that no 300 KiB of adds half fills: no flush starts on its
    # own, so the log current before the second checkpoint is the one it fills
    # (with the default test cache a background flush raced the test to it).
    settings = small_engine_settings(data_dir, None, write_cache=4 * MiB,
                                     read_cache=ReadCacheSettings(size_bytes=0))
    bookie = Bookie.open(settings, remote=remote,
                         checkpoint_hook=gc_inside_the_checkpoint)
    try:
        lid = bookie.create_ledger(password="pw", metadata={}).result(T).ledger_id
        assert lid == 1
        _add(bookie, lid, range(tiered), size)
        bookie.checkpoint()
        bookie.record_tier_position(lid, TierPosition(
            segment_first_entry_id=0, byte_position=tiered * (size + 16), entry_id=tiered,
            entry_offset=tiered * (size + 16)))
        gc = _collector(bookie, offload_deletion_lag_s=0.0)
        assert gc.run_once().tiered_ranges_dropped == 1
        assert bookie.relocations.local_first_entry_id(lid) == tiered
        # More than an entry log's worth (256 KiB) in the write cache: the
        # next checkpoint seals a log before it commits their locations.
        _add(bookie, lid, range(tiered, 2 * tiered), size)
        store = bookie.relocations.entry_log
        filled = store.current_log_id
        armed.append(gc)
        bookie.checkpoint()
        assert len(inside) == 1 and not armed
        for entry_id in range(2 * tiered):
            assert bookie.read_entry(lid, entry_id).payload == payload(lid, entry_id, size)
        assert inside[0].logs_removed == 0, inside[0]
        assert filled in store.flushed_log_ids()
        # Once its locations are in the index, its entries tiered and dropped,
        # the log is garbage like any other.
        remote.entries.update({(lid, e): payload(lid, e, size) for e in range(2 * tiered)})
        last = 2 * tiered - 1
        bookie.record_tier_position(lid, TierPosition(
            segment_first_entry_id=0, byte_position=last * (size + 16), entry_id=last,
            entry_offset=last * (size + 16)))
        assert gc.run_once().logs_removed >= 1
        assert filled not in store.log_ids()
        for entry_id in range(2 * tiered):
            assert bookie.read_entry(lid, entry_id).payload == payload(lid, entry_id, size)
    finally:
        bookie.close()


def _add(bookie: Bookie, ledger_id: int, entry_ids: range, size: int) -> None:
    futures = [bookie.append(ledger_id, [(None, (payload(ledger_id, e, size),))], password="pw")[0]
               for e in entry_ids]
    for future in futures:
        future.result(T)


def test_a_bulk_scan_racing_compaction_of_its_log_reads_every_entry(
        bookie: Bookie) -> None:
    """A bulk scan (offload, tiering) reads an entry, then the records after it
    in the same log as one window; compaction may move them and remove that
    log in between.  The window is a guess like read-ahead (``read_following``
    never raises; it finds nothing): the scan goes on through the index.  The
    compaction is run inside the scan by wrapping the real store's
    ``read_following`` (a timing seam; nothing is faked)."""
    ids = write_interleaved(bookie, ledgers=2, entries=300, size=SIZE)
    delete(bookie, ids[1:])  # every log half garbage: major compaction moves the rest
    kept = ids[0]
    store = bookie.storage.entry_log
    real_read_following = store.read_following
    reports: list[GcRunReport] = []

    def compact_first(*args: Any, **kwargs: Any) -> Any:
        if not reports:
            reports.append(_collector(bookie).run_once(forced=True, force_major=True))
        return real_read_following(*args, **kwargs)

    store.read_following = compact_first  # type: ignore[method-assign]
    try:
        scanned = list(bookie.scan_entries(kept))
    finally:
        del store.read_following
    assert reports and reports[0].logs_compacted >= 1, reports
    assert [e.entry_id for e in scanned] == list(range(300))
    assert [e.payload for e in scanned] == [payload(kept, e, SIZE) for e in range(300)]
