"""Where to cut: a random moment, or one of the data path's interesting ones.

Paths are as the server sees them inside the mount (``DATA_DIR`` is ``/data``).
Each moment turns a seeded ``random.Random`` into a trigger, so a seed names the
exact operation (its kind, path, occurrence and before/after) the cut lands on.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from tools.powercut import Trigger

JOURNAL = "/data/journal.dev"
ENTRY_LOGS = "/data/entrylogs/*.log"
INDEX = "/data/index"
JOURNAL_HEADER_AREA_BYTES = 8192
ENTRY_LOG_HEADER_BYTES = 4096


def _when(rng: random.Random) -> str:
    return rng.choice(["before", "after"])


@dataclass(frozen=True)
class Moment:
    name: str
    trigger: Callable[[random.Random], Trigger] | None
    """None: cut by hand once a random number of adds were acknowledged."""
    expect_unsynced: str | None = None
    """A path pattern that must have had unsynced data at this cut: proof that
    the cut really dropped something on the data path."""
    at_startup: bool = False
    """Armed before the server starts: the cut lands in recovery."""
    gc: bool = False
    """Armed once ledgers were deleted, the adds paused and their entries
    checkpointed; then a forced major GC is requested.  From then on only GC and
    compaction write entry logs (idle checkpoints only fdatasync them).  No GC
    runs before (the garbage waits for the forced run), and every log with any
    garbage is a major compaction candidate (threshold 0.99)."""

    @property
    def server_settings(self) -> dict[str, str]:
        if not self.gc:
            return {}
        return {"GC_WAIT_TIME": "600", "MINOR_COMPACTION_INTERVAL": "600",
                "MAJOR_COMPACTION_INTERVAL": "600", "MAJOR_COMPACTION_THRESHOLD": "0.99"}


MOMENTS: tuple[Moment, ...] = (
    Moment("acks", None),
    Moment("any-op", lambda r: Trigger("any", "/data/*", skip=r.randint(20, 400))),
    Moment("journal-append", lambda r: Trigger(  # a group commit written, not yet synced
        "write", JOURNAL, skip=r.randint(5, 200), when="after"), expect_unsynced=JOURNAL),
    Moment("journal-trim", lambda r: Trigger(  # the header write of a trim
        "write", JOURNAL, offset_max=JOURNAL_HEADER_AREA_BYTES, skip=r.randint(0, 3),
        when=_when(r))),
    Moment("checkpoint-entrylog-fsync", lambda r: Trigger(
        "fsync", ENTRY_LOGS, skip=r.randint(2, 8), when=_when(r))),
    Moment("checkpoint-index-batch", lambda r: Trigger(  # the batch is in RocksDB's WAL,
        "fsync", f"{INDEX}/*.log", skip=r.randint(2, 8)),  # which is not yet synced
        expect_unsynced=f"{INDEX}/*.log"),
    Moment("rotation-create", lambda r: Trigger(
        "create", ENTRY_LOGS, skip=r.randint(0, 1), when=_when(r))),
    Moment("rotation-seal", lambda r: Trigger(  # header writes: a new log's, a seal's
        "write", ENTRY_LOGS, offset_max=ENTRY_LOG_HEADER_BYTES, skip=r.randint(0, 3),
        when=_when(r))),
    Moment("rotation-dirsync", lambda r: Trigger(
        "fsyncdir", "/data/entrylogs", skip=r.randint(0, 1), when=_when(r))),
    Moment("gc-unlink", lambda r: Trigger("unlink", ENTRY_LOGS, when=_when(r)), gc=True),
    Moment("gc-compaction", lambda r: Trigger(  # copies written into the current log
        "write", ENTRY_LOGS, skip=r.randint(0, 6), when="after"), gc=True,
        expect_unsynced=ENTRY_LOGS),
    Moment("startup-rocksdb-current", lambda r: Trigger(
        "rename", f"{INDEX}/CURRENT", when=_when(r)), at_startup=True),
    Moment("startup-rocksdb-manifest", lambda r: Trigger(
        "fsync", f"{INDEX}/MANIFEST-*", when=_when(r)), at_startup=True),
    Moment("startup-recovery", lambda r: Trigger(
        "any", "/data/*", skip=r.randint(0, 60)), at_startup=True),  # of about 90
)


def moment_for(cut_index: int) -> Moment:
    """Cut points go round the table, so every moment gets its share."""
    return MOMENTS[cut_index % len(MOMENTS)]
