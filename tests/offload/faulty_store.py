"""FAULT INJECTION for offload: an ``ObjectStore`` wrapper that makes requests
fail the ways S3 does, at points chosen by a seed.

It sits at the one-attempt level of the seam, between
``offload.RetryingObjectStore`` and the store that holds the bytes (the
in-memory bucket of ``memory_store.py``, or ``offload.BotoObjectStore`` on the
real radosgw), so the offloader's retries, its resume logic and its failure
handling all run for real.  Faults a real server cannot be made to produce on
demand are the point of this module; nothing here stands in for a working part.

Each request's fate is a function of the seed and of the request itself
(operation, key, part number or range or listing position, and how many times
that same request was made before), never of the order in which threads happen
to send requests: a failing seed replays the same faults.  With several
upload threads the order of requests around a simulated crash can still
differ between replays; ``upload_concurrency=1`` replays a seed exactly.

Faults (``Fault``): 500 InternalError and 503 SlowDown answers, connections
reset or timed out before the request reached the bucket, answers lost
after it was applied (the retry repeats an applied request), a part or object
stored cut short before the connection reset, an ETag that is not the MD5 of
the body sent, a 403, a flipped byte in a GET body, and a crash: from the
crash on every request and every ``set_offload`` raises ``SimulatedCrash``
(a ``BaseException``, as a killed process runs no handler), so what is left
is exactly what a process killed at that point leaves.
"""

from __future__ import annotations

import enum
import random
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

from ledger import Entry, LedgerInfo, LedgerState, OffloadInfo
from offload import (
    LedgerSource,
    ObjectInfo,
    ObjectStore,
    PartInfo,
    PendingUpload,
    RemoteStorageError,
    TransientStorageError,
)

T = TypeVar("T")


class SimulatedCrash(BaseException):
    """The process died here (fault injection)."""


class Fault(enum.Enum):
    SERVER_ERROR = "InternalError (HTTP 500): injected"
    SLOW_DOWN = "SlowDown (HTTP 503): injected, please reduce your request rate"
    RESET = "ConnectionClosedError: injected reset before the request was applied"
    CONNECT_TIMEOUT = "ConnectTimeoutError: injected connect timeout"
    LOST_ANSWER = "ReadTimeoutError: injected read timeout after the request was applied"
    CUT_SHORT = "ConnectionClosedError: injected reset after half the body was stored"
    WRONG_ETAG = "injected: answered with an ETag that is not the MD5 of the body"
    DENIED = "AccessDenied (HTTP 403): injected"
    FLIPPED_BYTE = "injected: one byte of the body flipped"


# Requests that change the bucket: a lost answer means "applied, then failed".
_WRITES = {"PutObject", "UploadPart", "UploadPartCopy", "CreateMultipartUpload",
           "CompleteMultipartUpload", "AbortMultipartUpload", "DeleteObjects"}
_BODIES = {"PutObject", "UploadPart"}
_READS = {"GetObject"}
_ANY = (Fault.SERVER_ERROR, Fault.SLOW_DOWN, Fault.RESET, Fault.CONNECT_TIMEOUT, Fault.DENIED)


@dataclass(frozen=True)
class FaultPlan:
    seed: int
    # Chance that a request gets one of ``faults`` (those that apply to it).
    rate: float
    faults: tuple[Fault, ...]
    # Chance that a request (or a set_offload) is where the process dies.
    crash_rate: float = 0.0

    @classmethod
    def of_seed(cls, seed: int) -> FaultPlan:
        rng = random.Random(seed)
        faults = tuple(f for f in Fault if rng.random() < 0.6) or (Fault.SLOW_DOWN,)
        return cls(seed, rng.choice([0.02, 0.05, 0.1, 0.2, 0.3, 0.45]), faults,
                   rng.choice([0.0, 0.0, 0.02, 0.05, 0.1]))


class FaultyObjectStore:
    """``inner`` with the faults of ``plan``; ``injected`` lists what happened."""

    def __init__(self, inner: ObjectStore, plan: FaultPlan) -> None:
        self.bucket = inner.bucket
        self._inner, self._plan = inner, plan
        self._lock = threading.Lock()
        self._calls: Counter[tuple[str, ...]] = Counter()
        self.crashed = False
        self.injected: list[tuple[str, str, Fault | str]] = []

    # --- decisions -----------------------------------------------------------------

    def decide(self, operation: str, *identity: object) -> Fault | None:
        """The fault this request drew, if any; raises ``SimulatedCrash`` when the
        process dies here or has died."""
        rng = self._draw(operation, identity)
        if rng.random() >= self._plan.rate:
            return None
        fitting = [f for f in self._plan.faults if f in _ANY
                   or (f is Fault.LOST_ANSWER and operation in _WRITES)
                   or (f in (Fault.CUT_SHORT, Fault.WRONG_ETAG) and operation in _BODIES)
                   or (f is Fault.FLIPPED_BYTE and operation in _READS)]
        if not fitting:
            return None
        fault = rng.choice(fitting)
        with self._lock:
            self.injected.append((operation, str(identity[0]) if identity else "", fault))
        return fault

    def crash_point(self, operation: str, *identity: object) -> None:
        """Raise ``SimulatedCrash`` if the process dies here (or has died)."""
        self._draw(operation, identity)

    def _draw(self, operation: str, identity: tuple[object, ...]) -> random.Random:
        who = (operation, *map(str, identity))
        with self._lock:
            if self.crashed:
                raise SimulatedCrash(f"already crashed; {operation} never ran")
            occurrence = self._calls[who]
            self._calls[who] += 1
        rng = random.Random("/".join((str(self._plan.seed), *who, str(occurrence))))
        if rng.random() < self._plan.crash_rate:
            with self._lock:
                self.crashed = True
                self.injected.append((operation, "/".join(who[1:]), "crash"))
            raise SimulatedCrash(f"crashed at {operation} {who[1:]}")
        return rng

    def _request(self, operation: str, key: str, identity: tuple[object, ...],
                 send: Callable[[], T]) -> T:
        fault = self.decide(operation, key, *identity)
        if fault is None:
            return send()
        self._fail(fault, operation, key, send)

    def _fail(self, fault: Fault, operation: str, key: str, send: Callable[[], object]
              ) -> NoReturn:
        if fault is Fault.DENIED:
            raise RemoteStorageError(operation, key, 1, fault.value)
        if fault is Fault.LOST_ANSWER:
            send()
        raise TransientStorageError(operation, key, fault.value)

    def _body(self, operation: str, key: str, identity: tuple[object, ...],
              body: bytes | bytearray, send: Callable[[bytes | bytearray, str | None], str],
              content_md5: str | None) -> str:
        fault = self.decide(operation, key, *identity)
        if fault is None:
            return send(body, content_md5)
        if fault is Fault.CUT_SHORT:
            # Stored without its Content-MD5 (the worst a server can do with a
            # body cut short): only the offloader's own checks can notice.
            send(body[:len(body) // 2], None)
            raise TransientStorageError(operation, key, fault.value)
        if fault is Fault.WRONG_ETAG:
            send(body, content_md5)
            return "0" * 32
        self._fail(fault, operation, key, lambda: send(body, content_md5))

    def _read(self, key: str, identity: tuple[object, ...], send: Callable[[], bytes]) -> bytes:
        fault = self.decide("GetObject", key, *identity)
        if fault is None:
            return send()
        if fault is Fault.FLIPPED_BYTE:
            data = bytearray(send())
            if data:
                data[len(data) // 2] ^= 0x40
            return bytes(data)
        self._fail(fault, "GetObject", key, send)

    def _listing(self, operation: str, prefix: str, start_after: object,
                 items: Iterator[T]) -> Iterator[T]:
        for position, item in enumerate(items):
            fault = self.decide(operation, prefix, start_after, position)
            if fault is not None:
                self._fail(fault, operation, prefix, lambda: None)
            yield item

    # --- the seam ------------------------------------------------------------------

    def put_object(self, key: str, body: bytes | bytearray, *,
                   content_md5: str | None = None) -> str:
        return self._body("PutObject", key, (), body, lambda data, md5: self._inner.put_object(
            key, data, content_md5=md5), content_md5)

    def get_object(self, key: str) -> bytes:
        return self._read(key, (), lambda: self._inner.get_object(key))

    def get_range(self, key: str, start: int, end: int) -> bytes:
        return self._read(key, (start, end), lambda: self._inner.get_range(key, start, end))

    def head_object(self, key: str) -> ObjectInfo:
        return self._request("HeadObject", key, (), lambda: self._inner.head_object(key))

    def list_objects(self, prefix: str, *, start_after: str | None = None
                     ) -> Iterator[ObjectInfo]:
        return self._listing("ListObjectsV2", prefix, start_after,
                             self._inner.list_objects(prefix, start_after=start_after))

    def list_prefixes(self, prefix: str, *, start_after: str | None = None) -> Iterator[str]:
        return self._listing("ListObjectsV2/", prefix, start_after,
                             self._inner.list_prefixes(prefix, start_after=start_after))

    def delete_objects(self, keys: Sequence[str]) -> None:
        self._request("DeleteObjects", keys[0] if keys else "", (len(keys),),
                      lambda: self._inner.delete_objects(keys))

    def create_multipart_upload(self, key: str) -> str:
        return self._request("CreateMultipartUpload", key, (),
                             lambda: self._inner.create_multipart_upload(key))

    def upload_part(self, key: str, upload_id: str, part_number: int, body: bytes | bytearray,
                    *, content_md5: str | None = None) -> str:
        return self._body("UploadPart", key, (part_number,), body,
                          lambda data, md5: self._inner.upload_part(
                              key, upload_id, part_number, data, content_md5=md5), content_md5)

    def upload_part_copy(self, key: str, upload_id: str, part_number: int,
                         source_key: str) -> str:
        return self._request("UploadPartCopy", key, (part_number,),
                             lambda: self._inner.upload_part_copy(key, upload_id, part_number,
                                                                  source_key))

    def list_parts(self, key: str, upload_id: str, *, start_after: int = 0
                   ) -> Iterator[PartInfo]:
        return self._listing("ListParts", key, start_after,
                             self._inner.list_parts(key, upload_id, start_after=start_after))

    def complete_multipart_upload(self, key: str, upload_id: str,
                                  parts: Sequence[tuple[int, str]]) -> None:
        self._request("CompleteMultipartUpload", key, (),
                      lambda: self._inner.complete_multipart_upload(key, upload_id, parts))

    def abort_multipart_upload(self, key: str, upload_id: str) -> None:
        self._request("AbortMultipartUpload", key, (upload_id,),
                      lambda: self._inner.abort_multipart_upload(key, upload_id))

    def list_multipart_uploads(self, prefix: str) -> Iterator[PendingUpload]:
        return self._listing("ListMultipartUploads", prefix, None,
                             self._inner.list_multipart_uploads(prefix))

    def statistics(self) -> dict[str, int]:
        stats = dict(self._inner.statistics())
        with self._lock:
            stats["faults_injected"] = len(self.injected)
        return stats


class SourceUntilCrash:
    """FAULT INJECTION: the real engine as offload's ``LedgerSource``, except that
    ``set_offload`` may be where the process dies (before or after the write),
    and nothing is persisted once it has died."""

    def __init__(self, engine: LedgerSource, faults: FaultyObjectStore) -> None:
        self._engine, self._faults = engine, faults

    def get_ledger(self, ledger_id: int) -> LedgerInfo:
        return self._engine.get_ledger(ledger_id)

    def list_ledgers(self, *, state: LedgerState | None = None, after: int | None = None,
                     limit: int = 100) -> tuple[list[LedgerInfo], int | None]:
        return self._engine.list_ledgers(state=state, after=after, limit=limit)

    def read_entries(self, ledger_id: int, start: int = 0, end: int | None = None,
                     limit: int | None = None) -> Iterator[Entry]:
        return self._engine.read_entries(ledger_id, start, end, limit)

    def set_offload(self, ledger_id: int, info: OffloadInfo) -> LedgerInfo:
        identity = (ledger_id, info.state, info.upload_id, len(info.upload_parts))
        self._faults.crash_point("set_offload:before", *identity)
        written = self._engine.set_offload(ledger_id, info)
        self._faults.crash_point("set_offload:after", *identity)
        return written

    @property
    def next_ledger_id(self) -> int:
        return self._engine.next_ledger_id


def describe(faults: FaultyObjectStore) -> str:
    """What was injected, for a failing seed's message."""
    return "; ".join(f"{op} {key} {fault if isinstance(fault, str) else fault.name}"
                     for op, key, fault in faults.injected)


class FailOnCue:
    """FAULT INJECTION at exact requests: the first ``times`` calls of the store
    method ``operation`` whose arguments satisfy ``when`` fail; ``mode`` says
    how: ``"transient"`` (TransientStorageError before the request is applied),
    ``"lost_answer"`` (applied, then TransientStorageError), ``"refused"``
    (RemoteStorageError, another attempt would not help).  A listing fails
    after handing out ``after_items`` items.  ``listed_after`` records the
    ``start_after`` each listing was asked for; ``calls`` counts calls by name."""

    def __init__(self, inner: ObjectStore, operation: str, *, times: int = 1,
                 after_items: int = 0, mode: str = "transient",
                 when: Callable[..., bool] = lambda *args, **kwargs: True) -> None:
        self.bucket = inner.bucket
        self._inner, self._operation, self._mode, self._when = inner, operation, mode, when
        self._left, self._after_items = times, after_items
        self.listed_after: list[Any] = []
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._inner, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            if name != self._operation or not self._when(*args, **kwargs):
                return method(*args, **kwargs)
            if name.startswith("list_"):
                self.listed_after.append(kwargs.get("start_after"))
                return self._listing(method(*args, **kwargs), name)
            if self._left <= 0:
                return method(*args, **kwargs)
            self._left -= 1
            key = str(args[0]) if args else ""
            if self._mode == "refused":
                raise RemoteStorageError(name, key, 1, "AccessDenied (HTTP 403): cue")
            if self._mode == "lost_answer":
                method(*args, **kwargs)
            raise TransientStorageError(name, key, "SlowDown (HTTP 503): cue")

        return call

    def _listing(self, items: Iterator[T], name: str) -> Iterator[T]:
        for position, item in enumerate(items):
            if position == self._after_items and self._left > 0:
                self._left -= 1
                raise TransientStorageError(name, "prefix", "connection reset: cue")
            yield item
