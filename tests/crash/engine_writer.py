"""Crash-test child: opens a Bookie and appends from many threads until killed.

Prints ``READY``, then ``ACK <ledger> <entry> <token>`` strictly after each add
is acknowledged, ``CREATED <ledger>`` and ``CLOSED <ledger> <lac>``.  With
``--kill-at STEP:N`` it kills itself (SIGKILL) right after the Nth checkpoint
reaches STEP (a ``ledger.CheckpointStep`` value), printing ``KILLED STEP N``.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import threading
from pathlib import Path

from common.errors import LedgerClosed
from ledger import Bookie, CheckpointHook, CheckpointStep, LedgerState
from tests.conftest import small_engine_settings
from tests.crash.workload import make_payload

_print_lock = threading.Lock()


def emit(line: str) -> None:
    with _print_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("--device", type=Path)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--writers", type=int, default=16)
    parser.add_argument("--kill-at", help="STEP:N, e.g. entries_written:3")
    args = parser.parse_args()
    hook = None if args.kill_at is None else kill_at(*args.kill_at.split(":"))
    bookie = Bookie.open(crash_settings(args.data_dir, args.device), checkpoint_hook=hook)
    open_ids = [i.ledger_id for i in bookie.list_ledgers(state=LedgerState.OPEN,
                                                         limit=1000)[0]]
    while len(open_ids) < 4:
        open_ids.append(create(bookie))
    emit("READY")
    ledgers = list(open_ids)
    threads = [threading.Thread(target=writer, args=(bookie, ledgers, args.seed, n))
               for n in range(args.writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def crash_settings(data_dir: Path, device: Path | None):
    # Tiny caches and logs so flushes, rotations and journal laps happen often:
    # a kill then lands mid-flush and mid-checkpoint.
    return small_engine_settings(data_dir, device, journal_capacity=4 * 1024 * 1024,
                                 write_cache=256 * 1024, flush_interval_s=0.05,
                                 entry_log_limit=512 * 1024)


def create(bookie: Bookie) -> int:
    lid = bookie.create_ledger(password="", metadata={}).result(30).ledger_id
    emit(f"CREATED {lid}")
    return lid


def kill_at(step: str, occurrence: str) -> CheckpointHook:
    target, wanted = CheckpointStep(step), int(occurrence)
    seen = {"n": 0}

    def hook(reached: CheckpointStep) -> None:
        if reached is target:
            seen["n"] += 1
            if seen["n"] == wanted:
                emit(f"KILLED {reached.value} {wanted}")
                os.kill(os.getpid(), signal.SIGKILL)

    return hook


def writer(bookie: Bookie, ledgers: list[int], seed: int, n: int) -> None:
    rng = random.Random(seed * 1000 + n)
    for seq in range(1_000_000):
        lid = rng.choice(ledgers)
        token = f"{seed}:{n}:{seq}"
        try:
            (pending,) = bookie.append(lid, [(None, (make_payload(token),))], password="")
            result = pending.result(30)
        except LedgerClosed:
            continue
        emit(f"ACK {lid} {result.first_entry_id} {token}")
        if n == 0 and seq % 300 == 299:
            victim = rng.choice(ledgers)
            info = bookie.close_ledger(victim, password="").result(30)
            emit(f"CLOSED {victim} {info.last_add_confirmed}")
            ledgers[ledgers.index(victim)] = create(bookie)


if __name__ == "__main__":
    main()
