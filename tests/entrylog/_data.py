"""Deterministic entries shared by the entry log tests."""

from __future__ import annotations

import crc32c

from entrylog import EntryLogStore, Location


def payload(ledger_id: int, entry_id: int, size: int = 1000) -> bytes:
    seed = f"L{ledger_id}E{entry_id}-".encode()
    return (seed * (size // len(seed) + 1))[:size]


def append(store: EntryLogStore, ledger_id: int, entry_id: int, size: int = 1000) -> Location:
    data = payload(ledger_id, entry_id, size)
    return store.append(ledger_id, entry_id, data, crc32c.crc32c(data))
