"""Space given back by deleting ledgers (issue 28, item 3): N small ledgers
(1-3 entries of 100 B), checkpointed; 90% of them deleted; one forced major
GC run, as an operator's ``ledgerd gc`` makes.  Measured: the data directory
(entry logs plus RocksDB index; the journal, a fixed-size ring, left out) and
the process's RSS before the deletes and after GC.

The same run measures GC as it was before this change (``main``: entry logs
removed or compacted, the index left as the deletes' tombstones made it, the
current entry log never looked at) next to it (``reclaim``: the current log
sealed when mostly garbage, the deleted index ranges compacted, freed heap
given back).  Each (N, GC) pair runs in its own process, so RSS is its own.

Ledger creation pays scrypt (about 9 ms each, docs/benchmarks.md "Scaling"):
100,000 creates would take a quarter of an hour of CPU, so the child lowers
the hash cost.  A hash's size does not depend on its cost, so nothing this
benchmark measures changes."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path

from common.units import MiB
from compaction import CompactionSettings, GarbageCollector, GcRunReport
from journal import JournalSettings
from ledger import Bookie, EngineSettings

from ._harness import Row

REPO_ROOT = Path(__file__).resolve().parent.parent
ENTRY = 100
DELETED = 0.9


class _MainGarbageCollector(GarbageCollector):
    """GC without this change's two steps: what main's GC does."""

    def _roll_mostly_garbage_log(self, report: GcRunReport) -> None:
        return None

    def _compact_index(self, report: GcRunReport) -> None:
        return None


def _rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.iterdir() if p.is_file())


def child(data_dir: Path, ledgers: int, gc_kind: str) -> dict[str, float]:
    from ledger import _password

    _password._SCRYPT_N = 2  # see the module docstring: sizes do not change
    settings = EngineSettings.in_directory(
        data_dir, journal=JournalSettings(device_path=data_dir / "journal.dev",
                                          capacity_bytes=256 * MiB))
    bookie = Bookie.open(settings)
    rnd = random.Random(ledgers)
    try:
        started = time.monotonic()
        ids: list[int] = []
        for first in range(0, ledgers, 1000):
            pending = [bookie.create_ledger(password="pw", metadata={})
                       for _ in range(min(1000, ledgers - first))]
            ids += [p.result().ledger_id for p in pending]
        for first in range(0, ledgers, 1000):
            adds = [bookie.append(lid, [(None, [b"e" * ENTRY] * rnd.randint(1, 3))],
                                  password="pw")[0]
                    for lid in ids[first:first + 1000]]
            for add in adds:
                add.result()
        bookie.checkpoint()
        fill_s = time.monotonic() - started
        logs_dir, index_dir = settings.entry_log.directory, settings.index_path
        before = {"logs": _bytes(logs_dir), "index": _bytes(index_dir), "rss": _rss_bytes()}
        doomed = [lid for i, lid in enumerate(ids) if i % 10]
        for first in range(0, len(doomed), 1000):
            deletes = [bookie.delete_ledger(lid, password="pw")
                       for lid in doomed[first:first + 1000]]
            for d in deletes:
                d.result()
        cls = GarbageCollector if gc_kind == "reclaim" else _MainGarbageCollector
        gc = cls(bookie, CompactionSettings(rate_bytes_per_s=0), disk_usage=lambda: 0.1)
        started = time.monotonic()
        gc.run_once(forced=True, force_major=True)
        gc_s = time.monotonic() - started
        after = {"logs": _bytes(logs_dir), "index": _bytes(index_dir), "rss": _rss_bytes()}
    finally:
        bookie.close()
    return {"fill_s": fill_s, "gc_s": gc_s,
            **{f"{k}_before": v for k, v in before.items()},
            **{f"{k}_after": v for k, v in after.items()}}


def run(work: Path, *, ledger_counts: tuple[int, ...]) -> list[Row]:
    rows = []
    for ledgers in ledger_counts:
        for gc_kind in ("main", "reclaim"):
            data_dir = work / f"{gc_kind}-{ledgers}"
            out = subprocess.run(
                [sys.executable, "-m", "bench.reclaim_bench", str(data_dir), str(ledgers),
                 gc_kind], capture_output=True, text=True, check=True, cwd=REPO_ROOT)
            m = json.loads(out.stdout.splitlines()[-1])
            before = m["logs_before"] + m["index_before"]
            after = m["logs_after"] + m["index_after"]
            rows.append(Row(
                "space_after_deleting_90pct", {"ledgers": ledgers, "gc": gc_kind},
                value=100.0 * (before - after) / before, unit="% back",
                limit=100.0 * DELETED, limit_name="share of ledgers deleted",
                extra={"back_fraction": (before - after) / before,
                       "before_mib": before / MiB, "after_mib": after / MiB,
                       "logs_before_mib": m["logs_before"] / MiB,
                       "logs_after_mib": m["logs_after"] / MiB,
                       "index_before_mib": m["index_before"] / MiB,
                       "index_after_mib": m["index_after"] / MiB,
                       "rss_before_mib": m["rss_before"] / MiB,
                       "rss_after_mib": m["rss_after"] / MiB,
                       "gc_s": m["gc_s"], "fill_s": m["fill_s"]}))
    return rows


if __name__ == "__main__":
    print(json.dumps(child(Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3])))
