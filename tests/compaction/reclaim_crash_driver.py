"""Child process of the reclaim crash test: deletes the given ledgers, commits
the deletions with a checkpoint, then SIGKILLs itself at STEP: ``deleted``
(right after that commit), or ``index_compacting`` / ``index_compacted``
(around the index compaction of a forced GC run).  Prints ``STEP name`` just
before the kill.  Usage: reclaim_crash_driver.py DATA_DIR STEP LEDGER_ID...
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from compaction import GarbageCollector
from ledger import Bookie
from tests.compaction.test_reclaim import COMPACTION, delete_all, reclaim_settings


def kill(step: str) -> None:
    sys.stdout.write(f"STEP {step}\n")
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def main() -> None:
    data_dir, step = Path(sys.argv[1]), sys.argv[2]
    bookie = Bookie.open(reclaim_settings(data_dir))
    delete_all(bookie, [int(a) for a in sys.argv[3:]])
    bookie.checkpoint()
    if step == "deleted":
        kill(step)

    def on_step(name: str, _log_id: int) -> None:
        if name == step:
            kill(step)

    gc = GarbageCollector(bookie, COMPACTION, disk_usage=lambda: 0.1, on_step=on_step)
    gc.run_once(forced=True)
    sys.stdout.write("DONE\n")
    bookie.close()


if __name__ == "__main__":
    main()
