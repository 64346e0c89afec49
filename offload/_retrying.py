"""Retries with jittered backoff around any one-attempt :class:`ObjectStore`.

A request whose attempt raised ``TransientStorageError`` is sent again, up to
``retry_attempts_max`` attempts, after a full-jitter exponential backoff
(:func:`~offload._retry.backoff_s`); the last failure becomes
``RemoteStorageError`` naming the operation, the key, the attempts and the
cause.  A listing whose page fails resumes after the last item it handed out
(``start_after``), so a long listing is not fetched again from the start and
nobody sees an item twice; every page that makes progress starts a fresh count
of attempts.

Every request is idempotent for the offloader's purposes: a part or an object
sent again replaces itself with the same bytes, deleting or aborting twice is
harmless, and a Create whose answer was lost leaves an upload that the next
listing of the ledger's uploads aborts.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

from ._errors import RemoteStorageError, TransientStorageError
from ._retry import backoff_s
from ._store import ObjectInfo, ObjectStore, PartInfo, PendingUpload
from .settings import OffloadSettings

T = TypeVar("T")
K = TypeVar("K", str, int)
log = logging.getLogger("ledgerd.offload.s3")


class RetryingObjectStore:
    """``inner`` with retries; ``sleep`` and ``rng`` are injected for tests."""

    def __init__(self, inner: ObjectStore, settings: OffloadSettings, *,
                 sleep: Callable[[float], None] = time.sleep,
                 rng: random.Random | None = None) -> None:
        self.bucket = inner.bucket
        self._inner = inner
        self._settings = settings
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def put_object(self, key: str, body: bytes | bytearray, *,
                   content_md5: str | None = None) -> str:
        return self._retry(lambda: self._inner.put_object(key, body, content_md5=content_md5))

    def get_object(self, key: str) -> bytes:
        return self._retry(lambda: self._inner.get_object(key))

    def get_range(self, key: str, start: int, end: int) -> bytes:
        return self._retry(lambda: self._inner.get_range(key, start, end))

    def head_object(self, key: str) -> ObjectInfo:
        return self._retry(lambda: self._inner.head_object(key))

    def list_objects(self, prefix: str, *, start_after: str | None = None
                     ) -> Iterator[ObjectInfo]:
        return self._listing(lambda after: self._inner.list_objects(prefix, start_after=after),
                             lambda info: info.key, start_after)

    def list_prefixes(self, prefix: str, *, start_after: str | None = None) -> Iterator[str]:
        # A listing resumed after prefix P names P again (its keys sort after it): skipped.
        return self._listing(lambda after: self._inner.list_prefixes(prefix, start_after=after),
                             lambda found: found, start_after)

    def delete_objects(self, keys: Sequence[str]) -> None:
        self._retry(lambda: self._inner.delete_objects(keys))

    def create_multipart_upload(self, key: str) -> str:
        return self._retry(lambda: self._inner.create_multipart_upload(key))

    def upload_part(self, key: str, upload_id: str, part_number: int, body: bytes | bytearray,
                    *, content_md5: str | None = None) -> str:
        return self._retry(lambda: self._inner.upload_part(key, upload_id, part_number, body,
                                                           content_md5=content_md5))

    def upload_part_copy(self, key: str, upload_id: str, part_number: int,
                         source_key: str) -> str:
        return self._retry(lambda: self._inner.upload_part_copy(key, upload_id, part_number,
                                                                source_key))

    def list_parts(self, key: str, upload_id: str, *, start_after: int = 0
                   ) -> Iterator[PartInfo]:
        return self._listing(
            lambda after: self._inner.list_parts(key, upload_id, start_after=after or 0),
            lambda part: part.part_number, start_after)

    def complete_multipart_upload(self, key: str, upload_id: str,
                                  parts: Sequence[tuple[int, str]]) -> None:
        self._retry(lambda: self._inner.complete_multipart_upload(key, upload_id, parts))

    def abort_multipart_upload(self, key: str, upload_id: str) -> None:
        self._retry(lambda: self._inner.abort_multipart_upload(key, upload_id))

    def list_multipart_uploads(self, prefix: str) -> Iterator[PendingUpload]:
        # Uploads of one key are not ordered by anything a resumed listing can
        # start after, so a failed listing starts over and skips what it handed out.
        seen: set[PendingUpload] = set()
        attempt = 1
        while True:
            try:
                for upload in self._inner.list_multipart_uploads(prefix):
                    if upload not in seen:
                        seen.add(upload)
                        attempt = 1
                        yield upload
                return
            except TransientStorageError as exc:
                self._back_off(exc, attempt)
                attempt += 1

    def statistics(self) -> dict[str, int]:
        stats = dict(self._inner.statistics())
        with self._lock:
            stats["retries"] = self._counts["retries"]
            stats["failures"] = self._counts["failures"]
        return stats

    # --- retries -----------------------------------------------------------------

    def _retry(self, request: Callable[[], T]) -> T:
        attempt = 1
        while True:
            try:
                return request()
            except TransientStorageError as exc:
                self._back_off(exc, attempt)
                attempt += 1
            except RemoteStorageError:
                self._count("failures")
                raise

    def _listing(self, pages: Callable[[K | None], Iterator[T]], position: Callable[[T], K],
                 start_after: K | None) -> Iterator[T]:
        after = start_after
        attempt = 1
        while True:
            try:
                for item in pages(after):
                    if after is not None and position(item) <= after:
                        continue
                    after, attempt = position(item), 1
                    yield item
                return
            except TransientStorageError as exc:
                self._back_off(exc, attempt)
                attempt += 1
            except RemoteStorageError:
                self._count("failures")
                raise

    def _back_off(self, exc: TransientStorageError, attempt: int) -> None:
        """Sleep before attempt ``attempt + 1``, or raise when ``attempt`` was the last."""
        if attempt >= self._settings.retry_attempts_max:
            self._count("failures")
            raise RemoteStorageError(exc.operation, exc.key, attempt, exc.reason) from exc
        delay = backoff_s(attempt, initial_s=self._settings.retry_backoff_s_initial,
                          max_s=self._settings.retry_backoff_s_max, rng=self._rng)
        log.warning("S3 request failed, retrying", extra={
            "operation": exc.operation, "key": exc.key, "attempt": attempt,
            "delay_s": round(delay, 3), "error": exc.reason})
        self._count("retries")
        self._sleep(delay)

    def _count(self, name: str) -> None:
        with self._lock:
            self._counts[name] += 1
