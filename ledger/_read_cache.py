"""A bytes-bounded LRU cache of entries read from entry logs (and read-ahead).

Besides the LRU order, each ledger's cached entry ids are kept in a set of
their own, so forgetting a deleted (or tiered) ledger costs what that ledger
has cached, not what the whole cache holds: deleting a ledger used to scan
every cached entry under the lock every reader takes, and a thousand
deletions with a full cache of small entries stalled reads for seconds.
"""

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
        # ledger id -> its cached entry ids (the keys of _entries, by ledger).
        self._by_ledger: dict[int, set[int]] = {}
        self._size = 0
        self._lock = threading.Lock()
        self._hits = 0
        self._misses = 0
        # Entries looked at by drop_ledger (tests count it: per ledger, not per cache).
        self.drop_visits = 0

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
            self._by_ledger.setdefault(ledger_id, set()).add(entry_id)
            self._size += len(payload)
            while self._size > self._capacity:
                (evicted_ledger, evicted_entry), (evicted, _crc) = \
                    self._entries.popitem(last=False)
                self._forget_id(evicted_ledger, evicted_entry)
                self._size -= len(evicted)

    def drop_ledger(self, ledger_id: int, *, below: int | None = None) -> None:
        """Forget the ledger's entries (only those with ids below ``below``, if given)."""
        with self._lock:
            ids = self._by_ledger.get(ledger_id)
            if ids is None:
                return
            self.drop_visits += len(ids)
            dropped = ids if below is None else {i for i in ids if i < below}
            for entry_id in dropped:
                self._size -= len(self._entries.pop((ledger_id, entry_id))[0])
            if below is None or len(dropped) == len(ids):
                del self._by_ledger[ledger_id]
            else:
                ids -= dropped

    def _forget_id(self, ledger_id: int, entry_id: int) -> None:
        ids = self._by_ledger[ledger_id]
        ids.discard(entry_id)
        if not ids:
            del self._by_ledger[ledger_id]

    def statistics(self) -> ReadCacheStatistics:
        with self._lock:
            return ReadCacheStatistics(self._size, self._capacity, len(self._entries),
                                       self._hits, self._misses)
