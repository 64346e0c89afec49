"""A bytes-bounded LRU cache of entries read from entry logs (and read-ahead)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass


@dataclass(frozen=True)
class ReadCacheStatistics:
    size_bytes: int
    capacity_bytes: int
    entry_count: int
    hits: int
    misses: int


class ReadCache:
    def __init__(self, capacity_bytes: int) -> None:
        self._capacity = capacity_bytes
        self._entries: OrderedDict[tuple[int, int], tuple[bytes, int]] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()
        self._hits = 0
        self._misses = 0

    def get(self, ledger_id: int, entry_id: int) -> tuple[bytes, int] | None:
        key = (ledger_id, entry_id)
        with self._lock:
            hit = self._entries.get(key)
            if hit is None:
                self._misses += 1
                return None
            self._entries.move_to_end(key)
            self._hits += 1
            return hit

    def put(self, ledger_id: int, entry_id: int, payload: bytes, crc: int) -> None:
        if len(payload) > self._capacity:
            return
        key = (ledger_id, entry_id)
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._size -= len(old[0])
            self._entries[key] = (payload, crc)
            self._size += len(payload)
            while self._size > self._capacity:
                _, (evicted, _crc) = self._entries.popitem(last=False)
                self._size -= len(evicted)

    def drop_ledger(self, ledger_id: int, *, below: int | None = None) -> None:
        """Forget the ledger's entries (only those with ids below ``below``, if given)."""
        with self._lock:
            for key in [k for k in self._entries
                        if k[0] == ledger_id and (below is None or k[1] < below)]:
                self._size -= len(self._entries.pop(key)[0])

    def statistics(self) -> ReadCacheStatistics:
        with self._lock:
            return ReadCacheStatistics(self._size, self._capacity, len(self._entries),
                                       self._hits, self._misses)
