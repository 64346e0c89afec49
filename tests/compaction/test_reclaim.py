"""Deleting ledgers gives the data directory back (issue 28, item 3): entry
logs by GC as before, the RocksDB index by compacting the deleted ranges.
Real engine, real RocksDB; the crash cases SIGKILL a child process."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from common.errors import NoSuchLedger
from common.units import KiB, MiB
from compaction import CompactionSettings, GarbageCollector
from ledger import Bookie, EngineSettings, ReadCacheSettings
from tests.compaction._data import T, payload
from tests.conftest import small_engine_settings

ROOT = Path(__file__).resolve().parents[2]
ENTRY = 100  # small entries: the index is as big as the entry logs
COMPACTION = CompactionSettings(rate_bytes_per_s=0)


def reclaim_settings(data_dir: Path, entry_log_limit: int = 256 * KiB) -> EngineSettings:
    return small_engine_settings(data_dir, None, read_cache=ReadCacheSettings(size_bytes=0),
                                 write_cache=2 * MiB, entry_log_limit=entry_log_limit)


def fill(b: Bookie, *, ledgers: int, entries: int) -> list[int]:
    """``ledgers`` closed ledgers of ``entries`` entries, one batch add each,
    checkpointed.  Created from a few threads: scrypt releases the GIL."""
    with ThreadPoolExecutor(4) as pool:
        ids = list(pool.map(lambda _: b.create_ledger(password="pw", metadata={}).result(T)
                            .ledger_id, range(ledgers)))
    pending = [b.append(lid, [(None, [payload(lid, e, ENTRY) for e in range(entries)])],
                        password="pw")[0] for lid in ids]
    for p in pending:
        p.result(T)
    for lid in ids:
        b.close_ledger(lid, password="pw")
    b.checkpoint()
    return ids


def delete_all(b: Bookie, ids: list[int]) -> None:
    pending = [b.delete_ledger(lid, password="pw") for lid in ids]
    for p in pending:
        p.result(T)


def index_data_bytes(b: Bookie) -> int:
    """The index's data: its SSTs and write-ahead log, not RocksDB's own info
    log and options files (a few hundred KiB that compaction's messages grow,
    bounded by keep_log_file_num: not what deletions give back)."""
    return sum(p.stat().st_size for p in b.storage.index.path.iterdir()
               if p.suffix in (".sst", ".log"))


def stored_bytes(data_dir: Path) -> int:
    """Entry logs and index; the journal (a fixed-size ring) is left out."""
    return sum(p.stat().st_size for d in ("entrylogs", "index")
               for p in (data_dir / d).iterdir() if p.is_file())


def verify_kept(b: Bookie, kept: list[int], entries: int) -> None:
    for lid in kept:
        assert b.get_ledger(lid).last_add_confirmed == entries - 1
        for e in range(entries):
            assert b.read_entry(lid, e).payload == payload(lid, e, ENTRY), (lid, e)


def verify_deleted(b: Bookie, deleted: list[int]) -> None:
    for lid in deleted:
        with pytest.raises(NoSuchLedger):
            b.get_ledger(lid)
        assert b.storage.index.location_count(lid) == 0


# 256 KiB: the entries fill many logs.  64 MiB: they all sit in the current
# log, which GC seals once it is mostly garbage (else it never looks at it).
@pytest.mark.parametrize("entry_log_limit", [256 * KiB, 64 * MiB])
def test_deleting_90_percent_gives_80_percent_of_the_data_directory_back(
        tmp_path: Path, entry_log_limit: int) -> None:
    data_dir = tmp_path / "data"
    b = Bookie.open(reclaim_settings(data_dir, entry_log_limit))
    try:
        ids = fill(b, ledgers=300, entries=100)
        full = stored_bytes(data_dir)
        index_full = index_data_bytes(b)
        assert full > 4 * MiB and index_full > 1 * MiB, (full, index_full)
        kept = ids[::10]
        delete_all(b, [i for i in ids if i not in kept])
        # What an operator's forced GC runs (POST /admin/gc, ``ledgerd gc``).
        report = GarbageCollector(b, COMPACTION, disk_usage=lambda: 0.1).run_once(
            forced=True, force_major=True)
        assert not report.errors, report.errors
        after = stored_bytes(data_dir)
        assert after <= full * 0.2, (full, after, report)
        assert index_data_bytes(b) <= index_full * 0.2, index_data_bytes(b)
        assert report.index_reclaimed_bytes > 0
        assert b.storage.index.uncompacted_spans() == {}
        verify_kept(b, kept, 100)
        verify_deleted(b, [i for i in ids if i not in kept][:20])
    finally:
        b.close()


LEDGERS, ENTRIES = 60, 40


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[int]]:
    data_dir = tmp_path_factory.mktemp("reclaim-crash") / "data"
    b = Bookie.open(reclaim_settings(data_dir))
    try:
        ids = fill(b, ledgers=LEDGERS, entries=ENTRIES)
    finally:
        b.close()
    return data_dir, ids


@pytest.mark.parametrize("step", ["deleted", "index_compacting", "index_compacted"])
def test_a_kill_around_the_index_compaction_keeps_deletions_and_live_data(
        prepared: tuple[Path, list[int]], tmp_path: Path, step: str) -> None:
    """The child deletes 90% of the ledgers (committed by a checkpoint) and is
    SIGKILLed after that commit, just before the index compaction, or just
    after it; on restart the deleted stay gone, the others read byte for
    byte, and GC gives the space back (again, if the kill came after)."""
    source, ids = prepared
    data_dir = tmp_path / "data"
    shutil.copytree(source, data_dir)
    deleted = [i for i in ids if i % 10]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests/compaction/reclaim_crash_driver.py"), str(data_dir),
         step, *map(str, deleted)],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == -9 and f"STEP {step}" in proc.stdout, (
        proc.returncode, proc.stdout[-500:], proc.stderr[-2000:])
    b = Bookie.open(reclaim_settings(data_dir))
    try:
        kept = [i for i in ids if i not in deleted]
        verify_deleted(b, deleted)
        verify_kept(b, kept, ENTRIES)
        spans = b.storage.index.uncompacted_spans()
        assert (spans == {}) == (step == "index_compacted"), spans
        before = b.storage.index.size_bytes()
        GarbageCollector(b, COMPACTION, disk_usage=lambda: 0.1).run_once(forced=True)
        assert b.storage.index.uncompacted_spans() == {}
        if step != "index_compacted":
            assert b.storage.index.size_bytes() < before
        verify_kept(b, kept, ENTRIES)
    finally:
        b.close()


def test_gc_seals_the_current_log_only_when_it_is_mostly_garbage(tmp_path: Path) -> None:
    b = Bookie.open(reclaim_settings(tmp_path / "data", 64 * MiB))
    try:
        ids = fill(b, ledgers=10, entries=20)
        store = b.storage.entry_log
        current = store.current_log_id
        gc = GarbageCollector(b, COMPACTION, disk_usage=lambda: 0.1)
        gc.run_once(forced=True)
        assert store.current_log_id == current  # all of it live: left to fill
        delete_all(b, ids[:7])  # 70% garbage: above the minor threshold's 20% live
        gc.run_once(forced=True)
        assert store.current_log_id == current
        delete_all(b, ids[7:9])  # 90% garbage
        report = gc.run_once(forced=True, force_minor=True)
        assert store.current_log_id == current + 1 and current not in store.log_ids()
        assert report.logs_compacted == 1, report
        verify_kept(b, ids[9:], 20)
    finally:
        b.close()
