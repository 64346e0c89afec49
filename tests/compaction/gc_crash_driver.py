"""Child process of the compaction crash test: adds entries to a ledger while a
forced major compaction runs, and SIGKILLs itself at the N-th time compaction
reaches STEP (``copied``, ``synced``, ``indexed``, ``removed``).

Prints ``ACK ledger entry`` for every acknowledged add and ``STEP name n``
just before the kill.  Usage: gc_crash_driver.py DATA_DIR STEP N
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path

from compaction import GarbageCollector
from ledger import Bookie
from tests.compaction._data import payload
from tests.compaction.test_gc_crash import ADD_SIZE, COMPACTION, crash_settings

_emit_lock = threading.Lock()


def emit(line: str) -> None:
    """One whole line per write: two threads print, and a line torn by the
    other's would be misread by the test."""
    with _emit_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def main() -> None:
    data_dir, step, occurrence = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    bookie = Bookie.open(crash_settings(data_dir))
    writer = bookie.create_ledger(password="pw", metadata={}).result(10)
    emit(f"LEDGER {writer.ledger_id}")
    seen = {"n": 0}
    stop = threading.Event()

    def on_step(name: str, log_id: int) -> None:
        if name == step:
            seen["n"] += 1
            if seen["n"] == occurrence:
                emit(f"STEP {name} {seen['n']} log {log_id}")
                os.kill(os.getpid(), signal.SIGKILL)

    def add_forever() -> None:
        entry = 0
        while not stop.is_set():
            data = payload(writer.ledger_id, entry, ADD_SIZE)
            bookie.append(writer.ledger_id, [(None, (data,))], password="pw")[0].result(10)
            emit(f"ACK {writer.ledger_id} {entry}")
            entry += 1

    adder = threading.Thread(target=add_forever, daemon=True)
    adder.start()
    gc = GarbageCollector(bookie, COMPACTION, disk_usage=lambda: 0.1,
                          on_step=on_step)
    gc.run_once(forced=True, force_major=True)
    stop.set()
    adder.join()
    emit("DONE")
    bookie.close()


if __name__ == "__main__":
    main()
