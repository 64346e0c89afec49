"""Crash-test child: opens a Bookie and stores replica entries from many threads
until killed (cluster mode's engine side, docs/cluster.md §12.1).

Each thread owns one replica (ledger id = its number + 1) and writes entries
under non-dense ids at its current epoch, sometimes as a batch, sometimes
re-sending earlier ids written at an older epoch (replacing them: a writer
assigns an id once per epoch); now and then it fences the replica at epoch + 1
and goes on at that epoch.  Lines, each printed strictly
after the call is durable::

    READY
    ADD <ledger> <entry> <epoch> <token>
    FENCE <ledger> <epoch>
    LAC <ledger> <lac>
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
from pathlib import Path

from ledger import Bookie, ReplicaEntry
from tests.crash.engine_writer import crash_settings, emit
from tests.crash.workload import make_payload


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("--device", type=Path)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--writers", type=int, default=8)
    args = parser.parse_args()
    bookie = Bookie.open(crash_settings(args.data_dir, args.device))
    emit("READY")
    threads = [threading.Thread(target=writer, args=(bookie, args.seed, n + 1))
               for n in range(args.writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def writer(bookie: Bookie, seed: int, ledger_id: int) -> None:
    rng = random.Random(seed * 1000 + ledger_id)
    state = bookie.replicas.state(ledger_id)
    epoch = state.fenced_epoch + 1  # a new writer after each restart
    held = [e for e, _ in bookie.replicas.entries(ledger_id, 0, 2**62, limit=1_000_000)]
    next_id = (max(held) + 1) if held else 0
    length = 0
    written_at: dict[int, int] = {}  # ids this run wrote, and at which epoch
    for seq in range(1_000_000):
        roll = rng.random()
        if roll < 0.03:
            epoch += 1
            bookie.replicas.fence(ledger_id, epoch).result(30)
            emit(f"FENCE {ledger_id} {epoch}")
            continue
        older = [e for e in rng.sample(range(next_id), min(next_id, 8))
                 if written_at.get(e, -1) < epoch]
        if roll < 0.10 and older:
            ids = sorted(older[:rng.randint(1, 3)])
        else:
            count = 1 if roll < 0.6 else rng.randint(2, 8)
            ids = []
            for _ in range(count):
                next_id += rng.randint(1, 3)  # striping: this bookie holds some ids only
                ids.append(next_id)
        tokens = [f"{seed}:{ledger_id}:{seq}:{i}" for i in range(len(ids))]
        entries = []
        for entry_id, token in zip(ids, tokens, strict=True):
            payload = make_payload(token)
            length += len(payload)
            entries.append(ReplicaEntry(entry_id, epoch, payload, length))
        lac = max(-1, next_id - 4)
        written_at.update(dict.fromkeys(ids, epoch))
        bookie.replicas.add(ledger_id, entries, epoch=epoch, lac=lac).result(30)
        for entry_id, token in zip(ids, tokens, strict=True):
            emit(f"ADD {ledger_id} {entry_id} {epoch} {token}")
        emit(f"LAC {ledger_id} {lac}")


if __name__ == "__main__":
    sys.exit(main())
