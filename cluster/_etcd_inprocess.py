"""etcd's contract in one process: what a cluster of one and the seeded simulation
use instead of an etcd server (docs/cluster.md §2.1).

``InProcessEtcd`` holds the keys, the revision, the leases and the watchers;
``InProcessEtcd.client()`` gives an ``Etcd`` whose every call goes through a
``EtcdLink`` (by default none: the call is a function call).  The simulation's link
delays requests and answers, loses them (``MetadataUnavailable``: a lost
request changed nothing, a lost answer did) and breaks watches, as a network
between a node and etcd does.

The semantics are etcd's, as ``tests/cluster/test_etcd.py`` checks against a real
etcd with the same tests: one revision per write (a transaction's writes share
it), ``create_revision``/``mod_revision``/``version`` per key, a value compare on
a missing key fails while the others compare with zero, leases that expire on
the event loop's clock and delete their keys in one revision, watches that
replay from a past revision and are cancelled (``MetadataUnavailable``) when
that revision was compacted away.  History is kept for the last
``history_events`` changes.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from common.errors import LeaseExpired, MetadataUnavailable

from ._etcd import (
    PAGE_SIZE,
    Compare,
    Delete,
    Etcd,
    Get,
    KeyValue,
    Op,
    Put,
    TxnResult,
    WatchEvent,
    prefix_end,
)

T = TypeVar("T")

HISTORY_EVENTS = 100_000
FIRST_LEASE_ID = 0x7E57_0000_0001


class EtcdLink(Protocol):
    """The way between one client and the store."""

    async def request(self) -> None:
        """Before the store acts: ``MetadataUnavailable`` if the request is lost."""

    async def answer(self) -> None:
        """After it acted: ``MetadataUnavailable`` if the answer is lost."""


class Direct:
    """No network: every request arrives and every answer returns.  A call still
    gives the event loop a turn, as I/O would (callers that batch what arrives
    while a call is in flight rely on it)."""

    async def request(self) -> None:
        await asyncio.sleep(0)

    async def answer(self) -> None:
        return None


@dataclass(slots=True)
class _Lease:
    ttl_s: int
    expires_at: float
    keys: set[bytes]
    timer: asyncio.TimerHandle | None = None


@dataclass(slots=True)
class _Watcher:
    start: bytes
    end: bytes | None   # None: one key
    queue: asyncio.Queue[WatchEvent]

    def matches(self, key: bytes) -> bool:
        if self.end is None:
            return key == self.start
        return self.start <= key and (self.end == b"\0" or key < self.end)


class InProcessEtcd:
    """The store.  Its methods run on the event loop of the clients calling it."""

    def __init__(self, *, history_events: int = HISTORY_EVENTS) -> None:
        self.revision = 1
        self._kvs: dict[bytes, KeyValue] = {}
        self._sorted: list[bytes] = []
        self._leases: dict[int, _Lease] = {}
        self._next_lease = FIRST_LEASE_ID
        self._history: deque[WatchEvent] = deque(maxlen=history_events)
        self._watchers: list[_Watcher] = []

    def client(self, link: EtcdLink | None = None) -> InProcessEtcdClient:
        return InProcessEtcdClient(self, link or Direct())

    # --- reads ------------------------------------------------------------------

    def get(self, key: bytes) -> KeyValue | None:
        self._expire()
        return self._kvs.get(key)

    def range(self, start: bytes, end: bytes, limit: int) -> tuple[list[KeyValue], bool, int]:
        self._expire()
        first = bisect.bisect_left(self._sorted, start)
        last = len(self._sorted) if end == b"\0" else bisect.bisect_left(self._sorted, end)
        keys = self._sorted[first:last]
        more = bool(limit) and len(keys) > limit
        if limit:
            keys = keys[:limit]
        return [self._kvs[k] for k in keys], more, self.revision

    # --- writes ---------------------------------------------------------------------

    def txn(self, compare: Sequence[Compare], success: Sequence[Op],
            failure: Sequence[Op]) -> tuple[TxnResult, int]:
        """The result, and how many keys its deletes removed."""
        self._expire()
        succeeded = all(self._holds(c) for c in compare)
        ops = success if succeeded else failure
        for op in ops:
            if isinstance(op, Put) and op.lease and op.lease not in self._leases:
                raise LeaseExpired(f"etcd: requested lease {op.lease:x} not found")
        writes = any(isinstance(op, Put) or (isinstance(op, Delete) and op.key in self._kvs)
                     for op in ops)
        revision = self.revision + 1 if writes else self.revision
        gets: list[KeyValue | None] = []
        events: list[WatchEvent] = []
        deleted = 0
        for op in ops:
            if isinstance(op, Get):
                gets.append(self._kvs.get(op.key))
            elif isinstance(op, Put):
                events.append(self._put(op, revision))
            elif op.key in self._kvs:
                events.append(self._delete(op.key, revision))
                deleted += 1
        self.revision = revision
        self._publish(events)
        return TxnResult(succeeded, revision, tuple(gets)), deleted

    def _holds(self, cmp: Compare) -> bool:
        kv = self._kvs.get(cmp.key)
        if kv is None and cmp.target == "VALUE":
            return False  # etcd: a value compare on a missing key always fails
        actual: int | bytes
        if cmp.target == "VALUE":
            assert kv is not None
            actual = kv.value
        else:
            field = {"MOD": "mod_revision", "CREATE": "create_revision", "VERSION": "version",
                     "LEASE": "lease"}[cmp.target]
            actual = getattr(kv, field) if kv is not None else 0
        expected = cmp.value
        if type(actual) is not type(expected):
            return False
        if cmp.result == "EQUAL":
            return actual == expected
        if cmp.result == "NOT_EQUAL":
            return actual != expected
        if cmp.result == "LESS":
            return actual < expected  # type: ignore[operator]
        return actual > expected  # type: ignore[operator]

    def _put(self, op: Put, revision: int) -> WatchEvent:
        old = self._kvs.get(op.key)
        if old is None:
            bisect.insort(self._sorted, op.key)
            kv = KeyValue(op.key, op.value, revision, revision, 1, op.lease)
        else:
            if old.lease and old.lease != op.lease and old.lease in self._leases:
                self._leases[old.lease].keys.discard(op.key)
            kv = KeyValue(op.key, op.value, old.create_revision, revision, old.version + 1,
                          op.lease)
        if op.lease:
            self._leases[op.lease].keys.add(op.key)
        self._kvs[op.key] = kv
        return WatchEvent("PUT", kv, revision)

    def _delete(self, key: bytes, revision: int) -> WatchEvent:
        old = self._kvs.pop(key)
        del self._sorted[bisect.bisect_left(self._sorted, key)]
        if old.lease and old.lease in self._leases:
            self._leases[old.lease].keys.discard(key)
        return WatchEvent("DELETE", KeyValue(key, b"", 0, revision, 0, 0), revision)

    # --- leases -------------------------------------------------------------------

    def lease_grant(self, ttl_s: int) -> int:
        self._expire()
        lease_id, self._next_lease = self._next_lease, self._next_lease + 1
        lease = self._leases[lease_id] = _Lease(ttl_s, 0.0, set())
        self._renew(lease_id, lease)
        return lease_id

    def lease_keepalive(self, lease_id: int) -> int:
        self._expire()
        lease = self._leases.get(lease_id)
        if lease is None:
            raise LeaseExpired(f"etcd lease {lease_id:x} expired")
        self._renew(lease_id, lease)
        return lease.ttl_s

    def lease_ttl(self, lease_id: int) -> int:
        self._expire()
        lease = self._leases.get(lease_id)
        if lease is None:
            return -1
        return max(0, int(lease.expires_at - asyncio.get_running_loop().time()))

    def lease_revoke(self, lease_id: int) -> None:
        self._expire()
        lease = self._leases.pop(lease_id, None)
        if lease is not None:
            self._drop(lease)

    def _renew(self, lease_id: int, lease: _Lease) -> None:
        loop = asyncio.get_running_loop()
        lease.expires_at = loop.time() + lease.ttl_s
        if lease.timer is not None:
            lease.timer.cancel()
        # Expiry without anyone calling: watchers see the keys go, as with etcd.
        lease.timer = loop.call_at(lease.expires_at, self._expire)

    def _expire(self) -> None:
        if not self._leases:
            return
        now = asyncio.get_running_loop().time()
        for lease_id in [i for i, lease in self._leases.items() if lease.expires_at <= now]:
            self._drop(self._leases.pop(lease_id))

    def _drop(self, lease: _Lease) -> None:
        if lease.timer is not None:
            lease.timer.cancel()
        keys = sorted(k for k in lease.keys if k in self._kvs)
        if not keys:
            return
        revision = self.revision + 1
        events = [self._delete(key, revision) for key in keys]
        self.revision = revision
        self._publish(events)

    # --- watches --------------------------------------------------------------------

    def _publish(self, events: list[WatchEvent]) -> None:
        for event in events:
            self._history.append(event)
            for watcher in self._watchers:
                if watcher.matches(event.kv.key):
                    watcher.queue.put_nowait(event)

    def add_watcher(self, key: bytes, end: bytes | None, start_revision: int) -> _Watcher:
        self._expire()
        watcher = _Watcher(key, end, asyncio.Queue())
        if start_revision and start_revision <= self.revision:
            oldest = self._history[0].revision if self._history else self.revision + 1
            if len(self._history) == self._history.maxlen and start_revision < oldest:
                raise MetadataUnavailable(f"etcd watch canceled: revision {start_revision} "
                                          f"compacted (oldest kept {oldest})")
            for event in self._history:
                if event.revision >= start_revision and watcher.matches(event.kv.key):
                    watcher.queue.put_nowait(event)
        self._watchers.append(watcher)
        return watcher

    def remove_watcher(self, watcher: _Watcher) -> None:
        with contextlib.suppress(ValueError):
            self._watchers.remove(watcher)


class InProcessEtcdClient(Etcd):
    """One client of an ``InProcessEtcd``, through its ``EtcdLink``."""

    def __init__(self, store: InProcessEtcd, link: EtcdLink) -> None:
        self._store = store
        self._link = link
        self._closed = False

    async def aclose(self) -> None:
        self._closed = True

    async def _request(self) -> None:
        if self._closed:
            raise MetadataUnavailable("etcd client closed")
        await self._link.request()

    async def _call(self, op: Callable[[], T]) -> T:
        """``op()`` on the store, between the request's and the answer's way."""
        await self._request()
        result = op()
        await self._link.answer()
        return result

    async def get(self, key: bytes) -> KeyValue | None:
        return await self._call(lambda: self._store.get(key))

    async def range_page(self, start: bytes, end: bytes, limit: int = PAGE_SIZE,
                         ) -> tuple[list[KeyValue], bool]:
        kvs, more, _ = await self._call(lambda: self._store.range(start, end, limit))
        return kvs, more

    async def get_prefix(self, prefix: bytes) -> tuple[list[KeyValue], int]:
        kvs, _, revision = await self._call(
            lambda: self._store.range(prefix, prefix_end(prefix), 0))
        return kvs, revision

    async def put(self, key: bytes, value: bytes, *, lease: int = 0) -> int:
        result, _ = await self._call(lambda: self._store.txn([], [Put(key, value, lease)], []))
        return result.revision

    async def delete(self, key: bytes) -> int:
        _, deleted = await self._call(lambda: self._store.txn([], [Delete(key)], []))
        return deleted

    async def txn(self, compare: Sequence[Compare], success: Sequence[Op],
                  failure: Sequence[Op] = ()) -> TxnResult:
        result, _ = await self._call(lambda: self._store.txn(compare, success, failure))
        return result

    async def lease_grant(self, ttl_s: int) -> int:
        return await self._call(lambda: self._store.lease_grant(ttl_s))

    async def lease_keepalive(self, lease_id: int) -> int:
        return await self._call(lambda: self._store.lease_keepalive(lease_id))

    async def lease_ttl(self, lease_id: int) -> int:
        return await self._call(lambda: self._store.lease_ttl(lease_id))

    async def lease_revoke(self, lease_id: int) -> None:
        await self._call(lambda: self._store.lease_revoke(lease_id))

    async def watch(self, key: bytes, *, prefix: bool = False, start_revision: int = 0,
                    ) -> AsyncIterator[WatchEvent]:
        await self._request()
        watcher = self._store.add_watcher(key, prefix_end(key) if prefix else None,
                                          start_revision)
        try:
            while True:
                event = await watcher.queue.get()
                await self._link.answer()  # a lost answer breaks the stream
                yield event
        finally:
            self._store.remove_watcher(watcher)
