"""SIGKILL a compaction at each of its steps while adds go on; after restart
every live entry and every acknowledged add reads back byte for byte, and a
finishing GC run leaves no entry log below the major threshold (nothing that
is never reclaimed, including copies the killed run never indexed)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from common.units import KiB
from compaction import CompactionSettings, GarbageCollector, is_live
from entrylog import RECORD_HEADER_SIZE_BYTES
from ledger import Bookie, EngineSettings, ReadCacheSettings
from tests.compaction._data import delete, payload, verify, write_interleaved
from tests.conftest import small_engine_settings

ROOT = Path(__file__).resolve().parents[2]
LEDGERS, ENTRIES, SIZE, ADD_SIZE = 30, 40, 1 * KiB, 512
CASES = [("copied", 1), ("synced", 1), ("indexed", 1), ("removed", 1), ("copied", 4),
         ("indexed", 5), ("removed", 3)]


COMPACTION = CompactionSettings(rate_bytes_per_s=0, commit_bytes=32 * KiB)


def crash_settings(data_dir: Path) -> EngineSettings:
    return small_engine_settings(data_dir, None, read_cache=ReadCacheSettings(size_bytes=0))


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[int]]:
    """Interleaved ledgers, two thirds deleted: every log is about a third live."""
    data_dir = tmp_path_factory.mktemp("gc-crash") / "data"
    b = Bookie.open(crash_settings(data_dir))
    try:
        ids = write_interleaved(b, ledgers=LEDGERS, entries=ENTRIES, size=SIZE)
        delete(b, [i for i in ids if i % 3])
    finally:
        b.close()
    return data_dir, [i for i in ids if i % 3 == 0]


def _run_child(data_dir: Path, step: str, occurrence: int) -> tuple[int, dict[int, int]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests/compaction/gc_crash_driver.py"), str(data_dir), step,
         str(occurrence)], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    acked: dict[int, int] = {}
    killed_at = False
    for line in proc.stdout.splitlines():
        parts = line.split()
        if parts[0] == "ACK":
            acked[int(parts[1])] = max(acked.get(int(parts[1]), -1), int(parts[2]))
        killed_at |= parts[0] == "STEP"
    assert killed_at and proc.returncode == -9, (proc.returncode, proc.stdout[-500:],
                                                 proc.stderr[-2000:])
    return proc.returncode, acked


@pytest.mark.parametrize(("step", "occurrence"), CASES)
def test_kill_at_each_compaction_step(prepared: tuple[Path, list[int]], tmp_path: Path,
                                      step: str, occurrence: int) -> None:
    source, kept = prepared
    data_dir = tmp_path / "data"
    shutil.copytree(source, data_dir)
    _rc, acked = _run_child(data_dir, step, occurrence)
    b = Bookie.open(crash_settings(data_dir))
    try:
        verify(b, kept, entries=ENTRIES, size=SIZE)
        for lid, last in acked.items():
            assert b.get_ledger(lid).last_add_confirmed >= last
            for e in range(last + 1):
                assert b.read_entry(lid, e).payload == payload(lid, e, ADD_SIZE), (lid, e)
        gc = GarbageCollector(b, COMPACTION, disk_usage=lambda: 0.1)
        gc.run_once(forced=True, force_major=True)
        assert b.relocations.suspect_logs() == [] and b.storage.index.relocating_from() is None
        verify(b, kept, entries=ENTRIES, size=SIZE)
        _assert_every_log_reclaimed_below_major(b)
    finally:
        b.close()


def _assert_every_log_reclaimed_below_major(b: Bookie) -> None:
    """Usage measured exactly (scan + index), not from the ledgers maps."""
    store = b.storage.entry_log
    live = b.relocations.locally_stored()
    for log_id in store.flushed_log_ids():
        size = store.log_size_bytes(log_id)
        live_bytes = sum(RECORD_HEADER_SIZE_BYTES + len(r.payload)
                         for r in store.scan(log_id) if is_live(b.relocations, r, live))
        usage = live_bytes / size
        assert usage >= COMPACTION.major_threshold, (log_id, size, usage)
