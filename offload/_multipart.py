"""One segment's multipart upload, fed part by part from the entries (sealed ledgers).

The offloader cuts the segment's bytes into parts of exactly ``chunk_size``
(the last one shorter) and hands each to :meth:`SegmentUpload.submit`, which
uploads it on the executor with at most ``upload_concurrency`` parts in flight:
the caller waits for room, so one segment holds at most ``upload_concurrency + 1``
parts in memory however large it is.

Parts are sent without Content-MD5: botocore then signs every body with its
SHA-256 (on HTTP and HTTPS alike), which the server checks before it stores
the part, so an MD5 would be a second pass over every byte (the largest CPU
cost of an offload, measured in docs/formats-offload.md) for the same
guarantee.  The part ETags the server answers name the parts in
CompleteMultipartUpload, and the completed object's ETag must be the one S3
derives from them (the offloader checks it).

Resuming an upload after a restart, ``listed`` holds what ListParts answered
and ``recorded`` the parts the offloader had persisted.  A part is not sent
again when the upload already holds it with the same size and, as its ETag,
the MD5 of the bytes the entries give now (computed for listed parts only;
on a server whose part ETags are not MD5s: the same size and ETag that were
recorded when it was uploaded); any other listed part is replaced.

Parts finished are handed to ``record`` (which persists them) from the thread
that submits, at most once per ``record_interval_s`` and once at the end: the
upload threads never wait for a sync, and the engine sees a checkpoint a
second, not one per part.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import NamedTuple

from ._bounded import BoundedTasks
from ._chunks import Chunk, etag_matches, is_md5, md5_of
from ._errors import RemoteStorageError
from ._store import ObjectStore, PartInfo

log = logging.getLogger("ledgerd.offload")

# As persisted in ``OffloadInfo.upload_parts``: (part_number, size_bytes, etag).
RecordedPart = tuple[int, int, str]


class StrayParts(Exception):
    """The resumed upload holds parts past the segment's last one (an earlier run
    cut the segment differently: other settings).  radosgw refuses a Complete
    that leaves out uploaded parts (``InvalidPart``), and parts cannot be
    deleted, so the upload is aborted and the segment sent again."""

    def __init__(self, key: str, upload_id: str, part_numbers: list[int]) -> None:
        super().__init__(f"multipart upload {upload_id} of {key!r} holds parts "
                         f"{part_numbers} past the segment's last part")
        self.part_numbers = part_numbers


class PartDone(NamedTuple):
    part_number: int
    size_bytes: int
    # The server's ETag of the part (its MD5 on AWS and radosgw), which
    # CompleteMultipartUpload must name.
    etag: str

    @property
    def recorded(self) -> RecordedPart:
        return self.part_number, self.size_bytes, self.etag


class SegmentUpload:
    def __init__(self, store: ObjectStore, key: str, upload_id: str, *,
                 tasks: BoundedTasks[PartDone], chunk_size_bytes: int,
                 listed: Mapping[int, PartInfo], recorded: Mapping[int, RecordedPart],
                 on_part: Callable[[int, bool], None],
                 record: Callable[[list[PartDone]], None], record_interval_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``on_part(size_bytes, uploaded)`` runs on the upload thread after each
        part (``uploaded`` False when it was already there)."""
        self._store, self.key, self.upload_id = store, key, upload_id
        self._tasks = tasks
        self._chunk_size_bytes = chunk_size_bytes
        self._listed, self._recorded = listed, recorded
        self._on_part, self._record = on_part, record
        self._record_interval_s, self._clock = record_interval_s, clock
        self._recorded_at = clock()
        self._done: dict[int, PartDone] = {}
        self._unrecorded = 0

    def submit(self, chunk: Chunk) -> None:
        """Upload ``chunk`` as its part (waiting for room); record parts finished."""
        part_number = chunk.byte_position // self._chunk_size_bytes + 1
        self._tasks.submit(partial(self._send, part_number, chunk.data))
        self._collect(self._tasks.take_finished(), final=False)

    def finish(self) -> list[PartDone]:
        """Wait for every part, record them; the parts in order.  Raises
        ``StrayParts`` when the upload holds parts past the segment's last."""
        self._collect(self._tasks.results(), final=True)
        stray = sorted(self._listed.keys() - self._done.keys())
        if stray:
            raise StrayParts(self.key, self.upload_id, stray)
        return [self._done[number] for number in sorted(self._done)]

    def cancel(self) -> None:
        """Drop parts not started yet and wait for those being sent."""
        self._tasks.cancel()

    def _collect(self, finished: list[PartDone], *, final: bool) -> None:
        self._done.update((part.part_number, part) for part in finished)
        self._unrecorded += len(finished)
        now = self._clock()
        if self._unrecorded and (final or now - self._recorded_at >= self._record_interval_s):
            self._record([self._done[number] for number in sorted(self._done)])
            self._recorded_at, self._unrecorded = now, 0

    def _send(self, part_number: int, data: bytearray) -> PartDone:
        listed = self._listed.get(part_number)
        if listed is not None and self._holds(listed, data):
            self._on_part(len(data), False)
            return PartDone(part_number, len(data), listed.etag)
        if listed is not None:
            log.warning("replacing a part that does not hold the segment's bytes", extra={
                "key": self.key, "part_number": part_number, "size_bytes": listed.size_bytes,
                "expected_size_bytes": len(data), "etag": listed.etag})
        etag = self._store.upload_part(self.key, self.upload_id, part_number, data)
        self._on_part(len(data), True)
        return PartDone(part_number, len(data), etag)

    def _holds(self, listed: PartInfo, data: bytearray) -> bool:
        if listed.size_bytes != len(data):
            return False
        if is_md5(listed.etag):
            return listed.etag == md5_of(data)[0]
        # Not an MD5 (encrypted objects): only our own record of the upload,
        # of a same-size range of this segment, vouches for the part.
        recorded = self._recorded.get(listed.part_number)
        return recorded == (listed.part_number, len(data), listed.etag)


def require_etag(etag: str, md5_hex: str, operation: str, key: str) -> None:
    if not etag_matches(etag, md5_hex):
        raise RemoteStorageError(operation, key, 1,
                                 f"ETag {etag} is not the MD5 {md5_hex} of the bytes sent")
