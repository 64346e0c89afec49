"""An asyncio etcd v3 client over etcd's JSON gateway (docs/cluster.md §2.1).

What cluster mode needs and nothing more: get, put, delete, transactions
(compare a revision → put/get/delete), prefix ranges in pages, leases (grant,
keep-alive, revoke, time-to-live), watches (one streamed response of JSON lines)
and the id allocator.  The gateway encodes keys and values in base64 and 64-bit
integers as strings; this module is the only one that knows.  Calls go over the
nodes' own keep-alive HTTP/1.1 connections (``HttpPool``: httpx cost a cluster
create half as much node CPU again), a watch as a stream of lines on a
connection of its own.  Transport errors and refusals become
``MetadataUnavailable``; a lease etcd no longer knows becomes ``LeaseExpired``.
"""

from __future__ import annotations

import abc
import base64
import contextlib
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from common.errors import BookieUnreachable, InvalidSetting, LeaseExpired, MetadataUnavailable

from ._http import HttpPool

TIMEOUT_S = 5.0
PAGE_SIZE = 500


@dataclass(frozen=True, slots=True)
class KeyValue:
    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int


@dataclass(frozen=True, slots=True)
class Compare:
    """``target`` of ``key`` compared with ``value`` (``=``, ``!=``, ``<``, ``>``)."""

    key: bytes
    target: Literal["MOD", "CREATE", "VERSION", "VALUE", "LEASE"]
    value: int | bytes
    result: Literal["EQUAL", "NOT_EQUAL", "LESS", "GREATER"] = "EQUAL"


@dataclass(frozen=True, slots=True)
class Put:
    key: bytes
    value: bytes
    lease: int = 0


@dataclass(frozen=True, slots=True)
class Get:
    key: bytes


@dataclass(frozen=True, slots=True)
class Delete:
    key: bytes


Op = Put | Get | Delete


@dataclass(frozen=True, slots=True)
class TxnResult:
    succeeded: bool
    revision: int
    gets: tuple[KeyValue | None, ...]   # one per Get of the branch taken, in order


@dataclass(frozen=True, slots=True)
class WatchEvent:
    kind: Literal["PUT", "DELETE"]
    kv: KeyValue              # for DELETE: key and mod_revision only
    revision: int


def parse_metadata_url(url: str) -> tuple[list[str], str]:
    """``etcd://HOST:PORT[,HOST:PORT…]/SCOPE`` → (endpoint URLs, scope)."""
    scheme, sep, rest = url.partition("://")
    if scheme != "etcd" or not sep:
        raise InvalidSetting(f"METADATA_URL must be etcd://HOST:PORT[,HOST:PORT…]/SCOPE, "
                             f"got {url!r}")
    hosts, _, scope = rest.partition("/")
    endpoints = [f"http://{h.strip()}" for h in hosts.split(",") if h.strip()]
    scope = scope.strip("/")
    if not endpoints or not scope:
        raise InvalidSetting(f"METADATA_URL needs at least one HOST:PORT and a SCOPE, "
                             f"got {url!r}")
    return endpoints, scope


def prefix_end(prefix: bytes) -> bytes:
    """The smallest key greater than every key starting with ``prefix``."""
    trimmed = prefix.rstrip(b"\xff")
    if not trimmed:
        return b"\0"  # every key
    return trimmed[:-1] + bytes([trimmed[-1] + 1])


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: str | None) -> bytes:
    return base64.b64decode(text) if text else b""


def _kv(raw: Mapping[str, Any]) -> KeyValue:
    return KeyValue(key=_unb64(raw.get("key")), value=_unb64(raw.get("value")),
                    create_revision=int(raw.get("create_revision", 0)),
                    mod_revision=int(raw.get("mod_revision", 0)),
                    version=int(raw.get("version", 0)), lease=int(raw.get("lease", 0)))


def _op(op: Op) -> dict[str, Any]:
    if isinstance(op, Put):
        body: dict[str, Any] = {"key": _b64(op.key), "value": _b64(op.value)}
        if op.lease:
            body["lease"] = str(op.lease)
        return {"request_put": body}
    if isinstance(op, Get):
        return {"request_range": {"key": _b64(op.key)}}
    return {"request_delete_range": {"key": _b64(op.key)}}


def _compare(cmp: Compare) -> dict[str, Any]:
    field = {"MOD": "mod_revision", "CREATE": "create_revision", "VERSION": "version",
             "VALUE": "value", "LEASE": "lease"}[cmp.target]
    value: str = _b64(cmp.value) if isinstance(cmp.value, bytes) else str(cmp.value)
    return {"key": _b64(cmp.key), "target": cmp.target, "result": cmp.result, field: value}


class Etcd(abc.ABC):
    """What cluster mode asks of etcd.  Two implementations keep one contract
    (tests/cluster/test_etcd.py runs it against both): ``EtcdClient``, etcd's JSON
    gateway over HTTP, and ``InProcessEtcd``'s clients (one process: the seeded
    simulation, a cluster of one).  The helpers built on the primitives live
    here, once."""

    async def __aenter__(self) -> Etcd:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @abc.abstractmethod
    async def aclose(self) -> None: ...

    # --- key-value primitives ---------------------------------------------------------

    @abc.abstractmethod
    async def get(self, key: bytes) -> KeyValue | None: ...

    @abc.abstractmethod
    async def range_page(self, start: bytes, end: bytes, limit: int = PAGE_SIZE,
                         ) -> tuple[list[KeyValue], bool]:
        """Keys in [start, end) in key order, at most ``limit``; True if more follow."""

    @abc.abstractmethod
    async def get_prefix(self, prefix: bytes) -> tuple[list[KeyValue], int]:
        """Every key under ``prefix`` (one page: for small sets such as the bookies)
        and the store's revision when read: watch from ``revision + 1`` to miss
        nothing that changed after."""

    @abc.abstractmethod
    async def put(self, key: bytes, value: bytes, *, lease: int = 0) -> int:
        """Store ``value``; the revision of the write."""

    @abc.abstractmethod
    async def delete(self, key: bytes) -> int:
        """Delete ``key``; how many keys were deleted (0 or 1)."""

    @abc.abstractmethod
    async def txn(self, compare: Sequence[Compare], success: Sequence[Op],
                  failure: Sequence[Op] = ()) -> TxnResult: ...

    # --- leases -------------------------------------------------------------------

    @abc.abstractmethod
    async def lease_grant(self, ttl_s: int) -> int: ...

    @abc.abstractmethod
    async def lease_keepalive(self, lease_id: int) -> int:
        """Renew the lease once; its TTL in seconds.  ``LeaseExpired`` if it is gone."""

    @abc.abstractmethod
    async def lease_ttl(self, lease_id: int) -> int:
        """Seconds the lease has left; -1 once it is gone."""

    @abc.abstractmethod
    async def lease_revoke(self, lease_id: int) -> None:
        """Revoke the lease and delete its keys; a lease already gone is no error."""

    # --- watches --------------------------------------------------------------------

    @abc.abstractmethod
    def watch(self, key: bytes, *, prefix: bool = False, start_revision: int = 0,
              ) -> AsyncIterator[WatchEvent]:
        """Changes of ``key`` (or every key under it) from ``start_revision`` on, until
        the caller stops iterating.  A watch etcd cancels (its start revision was
        compacted away) raises ``MetadataUnavailable``: re-read, then watch again."""

    # --- helpers on the primitives ------------------------------------------------------

    async def range_prefix(self, prefix: bytes, *, start_after: bytes | None = None,
                           page_size: int = PAGE_SIZE) -> AsyncIterator[KeyValue]:
        """Every key under ``prefix`` in order, page by page (after ``start_after``)."""
        start = prefix if start_after is None else start_after + b"\0"
        async for kv in self.range_between(start, prefix_end(prefix), page_size=page_size):
            yield kv

    async def range_between(self, start: bytes, end: bytes, *,
                            page_size: int = PAGE_SIZE) -> AsyncIterator[KeyValue]:
        """Every key in ``[start, end)`` in order, page by page.  etcd (3.4) counts
        every key from a page's start to ``end`` to answer it, so paging through
        N keys to a far end costs N²: callers that can bound ``end`` should."""
        while True:
            kvs, more = await self.range_page(start, end, page_size)
            for kv in kvs:
                yield kv
            if not more or not kvs:
                return
            start = kvs[-1].key + b"\0"

    async def create(self, key: bytes, value: bytes, *, lease: int = 0) -> int | None:
        """Put ``key`` only if it does not exist: its revision, or None."""
        result = await self.txn([Compare(key, "CREATE", 0)], [Put(key, value, lease)])
        return result.revision if result.succeeded else None

    async def compare_and_swap(self, key: bytes, value: bytes, expected_mod_revision: int,
                               ) -> tuple[bool, int, KeyValue | None]:
        """Put ``value`` if ``key`` is still at ``expected_mod_revision``: (written, the
        new revision) — or (False, revision, the current value) in the same round trip."""
        result = await self.txn([Compare(key, "MOD", expected_mod_revision)],
                                [Put(key, value)], [Get(key)])
        if result.succeeded:
            return True, result.revision, None
        return False, result.revision, result.gets[0] if result.gets else None

    async def compare_and_delete(self, key: bytes, expected_mod_revision: int) -> bool:
        result = await self.txn([Compare(key, "MOD", expected_mod_revision)], [Delete(key)])
        return result.succeeded

    async def next_id(self, key: bytes) -> int:
        """A cluster-wide unique id: the key's version after one more put (BookKeeper's
        ``Etcd64bitIdGenerator``; one round trip, no retry under contention)."""
        result = await self.txn([], [Put(key, b""), Get(key)])
        kv = result.gets[0] if result.gets else None
        if kv is None:
            raise MetadataUnavailable(f"etcd: the id key {key!r} vanished inside a txn")
        return kv.version


class EtcdClient(Etcd):
    """One etcd cluster behind ``endpoints`` (``http://host:port``), tried in turn."""

    def __init__(self, endpoints: Sequence[str], *, timeout_s: float = TIMEOUT_S) -> None:
        if not endpoints:
            raise InvalidSetting("METADATA_URL names no etcd endpoint")
        self._endpoints = list(endpoints)
        self._current = 0
        self._pool = HttpPool(headers={"Content-Type": "application/json"},
                              timeout_s=timeout_s)

    async def aclose(self) -> None:
        await self._pool.aclose()

    async def __aenter__(self) -> EtcdClient:
        return self

    # --- transport ------------------------------------------------------------

    async def _call(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        last: Exception | None = None
        for attempt in range(len(self._endpoints)):
            endpoint = self._endpoints[(self._current + attempt) % len(self._endpoints)]
            try:
                response = await self._pool.request(endpoint, "POST", path,
                                                    body=json.dumps(body).encode())
            except BookieUnreachable as exc:  # no answer from this endpoint
                last = exc
                continue
            self._current = (self._current + attempt) % len(self._endpoints)
            return self._decode(path, response.status, response.body)
        raise MetadataUnavailable(f"etcd at {', '.join(self._endpoints)} did not answer "
                                  f"{path}: {last!r}") from last

    @staticmethod
    def _decode(path: str, status: int, body: bytes) -> dict[str, Any]:
        try:
            doc: dict[str, Any] = json.loads(body)
        except ValueError as exc:
            raise MetadataUnavailable(f"etcd {path}: HTTP {status}, not JSON") from exc
        if not isinstance(doc, dict):
            raise MetadataUnavailable(f"etcd {path}: HTTP {status}, not a JSON object")
        message = str(doc.get("error") or doc.get("message") or "")
        if status != 200 or message:
            if "lease not found" in message:
                raise LeaseExpired(f"etcd {path}: {message}")
            raise MetadataUnavailable(f"etcd {path}: HTTP {status}: {message}")
        return doc

    # --- key-value --------------------------------------------------------------

    async def get(self, key: bytes) -> KeyValue | None:
        doc = await self._call("/v3/kv/range", {"key": _b64(key)})
        kvs = doc.get("kvs") or []
        return _kv(kvs[0]) if kvs else None

    async def range_page(self, start: bytes, end: bytes, limit: int = PAGE_SIZE,
                         ) -> tuple[list[KeyValue], bool]:
        """Keys in [start, end) in key order, at most ``limit``; True if more follow."""
        doc = await self._call("/v3/kv/range", {
            "key": _b64(start), "range_end": _b64(end), "limit": str(limit)})
        return [_kv(kv) for kv in doc.get("kvs") or []], bool(doc.get("more", False))

    async def get_prefix(self, prefix: bytes) -> tuple[list[KeyValue], int]:
        """Every key under ``prefix`` (one page: for small sets such as the bookies)
        and the store's revision when read: watch from ``revision + 1`` to miss
        nothing that changed after."""
        doc = await self._call("/v3/kv/range", {
            "key": _b64(prefix), "range_end": _b64(prefix_end(prefix))})
        revision = int(doc.get("header", {}).get("revision", 0))
        return [_kv(kv) for kv in doc.get("kvs") or []], revision

    async def put(self, key: bytes, value: bytes, *, lease: int = 0) -> int:
        """Store ``value``; the revision of the write."""
        body: dict[str, Any] = {"key": _b64(key), "value": _b64(value)}
        if lease:
            body["lease"] = str(lease)
        doc = await self._call("/v3/kv/put", body)
        return int(doc["header"]["revision"])

    async def delete(self, key: bytes) -> int:
        """Delete ``key``; how many keys were deleted (0 or 1)."""
        doc = await self._call("/v3/kv/deleterange", {"key": _b64(key)})
        return int(doc.get("deleted", 0))

    async def txn(self, compare: Sequence[Compare], success: Sequence[Op],
                  failure: Sequence[Op] = ()) -> TxnResult:
        doc = await self._call("/v3/kv/txn", {
            "compare": [_compare(c) for c in compare],
            "success": [_op(o) for o in success],
            "failure": [_op(o) for o in failure]})
        gets: list[KeyValue | None] = []
        for response in doc.get("responses") or []:
            if "response_range" in response:
                kvs = response["response_range"].get("kvs") or []
                gets.append(_kv(kvs[0]) if kvs else None)
        return TxnResult(bool(doc.get("succeeded", False)), int(doc["header"]["revision"]),
                         tuple(gets))

    # --- leases -------------------------------------------------------------------

    async def lease_grant(self, ttl_s: int) -> int:
        doc = await self._call("/v3/lease/grant", {"TTL": str(ttl_s)})
        return int(doc["ID"])

    async def lease_keepalive(self, lease_id: int) -> int:
        """Renew the lease once; its TTL in seconds.  ``LeaseExpired`` if it is gone."""
        doc = await self._call("/v3/lease/keepalive", {"ID": str(lease_id)})
        ttl = int(doc.get("result", {}).get("TTL", 0))
        if ttl <= 0:
            raise LeaseExpired(f"etcd lease {lease_id:x} expired")
        return ttl

    async def lease_ttl(self, lease_id: int) -> int:
        """Seconds the lease has left; -1 once it is gone."""
        doc = await self._call("/v3/lease/timetolive", {"ID": str(lease_id)})
        return int(doc.get("TTL", -1))

    async def lease_revoke(self, lease_id: int) -> None:
        with contextlib.suppress(LeaseExpired):  # already gone: what revoking wanted
            await self._call("/v3/lease/revoke", {"ID": str(lease_id)})

    # --- watches --------------------------------------------------------------------

    async def watch(self, key: bytes, *, prefix: bool = False, start_revision: int = 0,
                    ) -> AsyncIterator[WatchEvent]:
        """Changes of ``key`` (or every key under it) from ``start_revision`` on, until
        the caller stops iterating.  A watch etcd cancels (its start revision was
        compacted away) raises ``MetadataUnavailable``: re-read, then watch again."""
        request: dict[str, Any] = {"key": _b64(key)}
        if prefix:
            request["range_end"] = _b64(prefix_end(key))
        if start_revision:
            request["start_revision"] = str(start_revision)
        endpoint = self._endpoints[self._current]
        lines = self._pool.stream_lines(endpoint, "POST", "/v3/watch", body=json.dumps(
            {"create_request": request}).encode())
        try:
            async for line in lines:
                if not line.strip():
                    continue
                for event in self._watch_events(json.loads(line)):
                    yield event
        except BookieUnreachable as exc:
            raise MetadataUnavailable(f"etcd watch on {endpoint} broke: {exc}") from exc
        finally:
            await lines.aclose()

    @staticmethod
    def _watch_events(doc: Mapping[str, Any]) -> list[WatchEvent]:
        if "error" in doc:
            raise MetadataUnavailable(f"etcd watch: {doc['error']}")
        result = doc.get("result", {})
        if result.get("canceled") or int(result.get("compact_revision", 0)):
            raise MetadataUnavailable(f"etcd watch canceled: {result.get('cancel_reason', '')}"
                                      f" (compacted at {result.get('compact_revision')})")
        revision = int(result.get("header", {}).get("revision", 0))
        return [WatchEvent("DELETE" if ev.get("type") == "DELETE" else "PUT", _kv(ev["kv"]),
                           revision) for ev in result.get("events") or []]
