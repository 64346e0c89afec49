"""Many idle ledgers in a bookie's stores, fast, for tests and benchmarks.

Creating a ledger through the engine pays one scrypt of its password (about
9 ms) and a journal record, so a test or benchmark that needs 100,000 idle
ledgers writes them straight into the stores a bookie opens instead: one
closed ledger record each (all sharing one password hash), optionally with
one entry each in the entry logs and its location in the index, then a
checkpoint mark past them.  ``Bookie.open`` on the directory afterwards sees
what it would after that many creates, adds, closes and a checkpoint.
"""

from __future__ import annotations

from dataclasses import replace

import crc32c

from ledger import EngineSettings, LedgerState, OffloadInfo, PasswordVerifier
from ledger._ledger_record import LedgerRecord
from ledger._stores import open_stores

# Index batch size: one synced RocksDB write per this many ledgers.
_BATCH = 10_000


def seed_idle_ledgers(settings: EngineSettings, count: int, *, payload: bytes | None = b"x" * 64,
                      password: str = "", offload: OffloadInfo | None = None) -> list[int]:
    """Write ``count`` closed ledgers (the next ids the bookie would issue) into
    a bookie's stores (closed), each with one entry ``payload`` (None: empty)
    and ``offload`` as their offload state; returns their ids."""
    index, entry_log, journal, node_key = open_stores(settings)
    try:
        mark, start = index.checkpoint()
        # Keyed with the directory's own password key, as the bookie would hash it.
        hashed = PasswordVerifier(node_key.key).hash(password)
        crc = crc32c.crc32c(payload) if payload is not None else 0
        ids = list(range(start, start + count))
        # Every record is the same but for its id.
        template = LedgerRecord(
            ledger_id=0, state=LedgerState.CLOSED, password=hashed,
            last_entry_id=0 if payload is not None else -1,
            length=len(payload) if payload is not None else 0,
            created_at=0.0, closed_at=0.0, offload=offload or OffloadInfo())
        for at in range(0, count, _BATCH):
            batch = index.batch()
            for lid in ids[at:at + _BATCH]:
                if payload is not None:
                    batch.put_location(lid, 0, entry_log.append(lid, 0, payload, crc))
                batch.put_ledger(replace(template, ledger_id=lid))
            entry_log.sync()  # the entries durable before the index points at them
            batch.set_checkpoint(mark, start + count)
            index.commit(batch)
        return ids
    finally:
        entry_log.close()
        journal.close()
        index.close()
