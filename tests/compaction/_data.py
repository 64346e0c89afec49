"""Deterministic ledger contents shared by the GC tests and the crash driver."""

from __future__ import annotations

import hashlib
from pathlib import Path

from ledger import Bookie

T = 10.0


def payload(ledger_id: int, entry_id: int, size: int) -> bytes:
    seed = hashlib.sha256(f"{ledger_id}:{entry_id}".encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def write_interleaved(b: Bookie, *, ledgers: int, entries: int, size: int) -> list[int]:
    """Round-robin adds, so every entry log holds a slice of every ledger (the
    "many topics" case: no log empties when some ledgers are deleted)."""
    ids = [b.create_ledger(password="pw", metadata={}).result(T).ledger_id
           for _ in range(ledgers)]
    for e in range(entries):
        futures = [b.append(lid, [(None, (payload(lid, e, size),))], password="pw")[0]
                   for lid in ids]
        for f in futures:
            f.result(T)
    for lid in ids:
        b.close_ledger(lid, password="pw").result(T)
    b.checkpoint()
    return ids


def write_sequential(b: Bookie, *, ledgers: int, entries: int, size: int) -> list[int]:
    """Ledger after ledger, so deleting some empties whole entry logs."""
    ids = []
    for _ in range(ledgers):
        lid = b.create_ledger(password="pw", metadata={}).result(T).ledger_id
        futures = [b.append(lid, [(None, (payload(lid, e, size),))], password="pw")[0]
                   for e in range(entries)]
        for f in futures:
            f.result(T)
        b.close_ledger(lid, password="pw").result(T)
        ids.append(lid)
    b.checkpoint()
    return ids


def delete(b: Bookie, ids: list[int]) -> None:
    for lid in ids:
        b.delete_ledger(lid, password="pw").result(T)
    b.checkpoint()


def verify(b: Bookie, ids: list[int], *, entries: int, size: int) -> None:
    for lid in ids:
        info = b.get_ledger(lid)
        assert info.last_add_confirmed == entries - 1, (lid, info)
        for e in range(entries):
            assert b.read_entry(lid, e).payload == payload(lid, e, size), (lid, e)


def entry_log_bytes(data_dir: Path) -> int:
    return sum(p.stat().st_size for p in (data_dir / "entrylogs").glob("*.log"))
