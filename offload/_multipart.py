"""One segment's multipart upload, fed part by part from the entries (sealed ledgers).

The offloader cuts the segment's bytes into parts of exactly ``chunk_size``
(the last one shorter) and hands each to :meth:`SegmentUpload.submit`, which
uploads it on the executor with at most ``upload_concurrency`` parts in flight:
the caller waits for room, so one segment holds at most ``upload_concurrency + 1``
parts in memory however large it is.  Each part is sent with Content-MD5 and
its ETag must be that MD5.

Resuming an upload after a restart, ``listed`` holds what ListParts answered
and ``recorded`` the parts the offloader had persisted.  A part is not sent
again when the upload already holds it with the same size and the MD5 of the
bytes the entries give now (or, on a server whose part ETags are not MD5s, the
same size and ETag that were recorded when it was uploaded); any other listed
part is replaced.

Parts finished are handed to ``record`` (which persists them) from the thread
that submits, in batches: the upload threads never wait for a sync.
"""

from __future__ import annotations

import logging
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
    # The server's ETag of the part, which CompleteMultipartUpload must name.
    etag: str
    # The MD5 of the part's bytes, for the ETag of the completed object.
    md5_hex: str

    @property
    def recorded(self) -> RecordedPart:
        return self.part_number, self.size_bytes, self.etag


class SegmentUpload:
    def __init__(self, store: ObjectStore, key: str, upload_id: str, *,
                 tasks: BoundedTasks[PartDone], chunk_size_bytes: int,
                 listed: Mapping[int, PartInfo], recorded: Mapping[int, RecordedPart],
                 on_part: Callable[[int, bool], None],
                 record: Callable[[list[PartDone]], None]) -> None:
        """``on_part(size_bytes, uploaded)`` runs on the upload thread after each
        part (``uploaded`` False when it was already there)."""
        self._store, self.key, self.upload_id = store, key, upload_id
        self._tasks = tasks
        self._chunk_size_bytes = chunk_size_bytes
        self._listed, self._recorded = listed, recorded
        self._on_part, self._record = on_part, record
        self._done: dict[int, PartDone] = {}

    def submit(self, chunk: Chunk) -> None:
        """Upload ``chunk`` as its part (waiting for room); record parts finished."""
        part_number = chunk.byte_position // self._chunk_size_bytes + 1
        self._tasks.submit(partial(self._send, part_number, chunk.data))
        self._collect(self._tasks.take_finished())

    def finish(self) -> list[PartDone]:
        """Wait for every part, record them; the parts in order.  Raises
        ``StrayParts`` when the upload holds parts past the segment's last."""
        self._collect(self._tasks.results())
        stray = sorted(self._listed.keys() - self._done.keys())
        if stray:
            raise StrayParts(self.key, self.upload_id, stray)
        return [self._done[number] for number in sorted(self._done)]

    def cancel(self) -> None:
        """Drop parts not started yet and wait for those being sent."""
        self._tasks.cancel()

    def _collect(self, finished: list[PartDone]) -> None:
        if finished:
            self._done.update((part.part_number, part) for part in finished)
            self._record([self._done[number] for number in sorted(self._done)])

    def _send(self, part_number: int, data: bytearray) -> PartDone:
        md5_hex, md5_b64 = md5_of(data)
        listed = self._listed.get(part_number)
        if listed is not None and self._holds(listed, len(data), md5_hex):
            self._on_part(len(data), False)
            return PartDone(part_number, len(data), listed.etag, md5_hex)
        if listed is not None:
            log.warning("replacing a part that does not hold the segment's bytes", extra={
                "key": self.key, "part_number": part_number, "size_bytes": listed.size_bytes,
                "expected_size_bytes": len(data), "etag": listed.etag, "md5": md5_hex})
        etag = self._store.upload_part(self.key, self.upload_id, part_number, data,
                                       content_md5=md5_b64)
        require_etag(etag, md5_hex, "UploadPart", self.key)
        self._on_part(len(data), True)
        return PartDone(part_number, len(data), etag, md5_hex)

    def _holds(self, listed: PartInfo, size_bytes: int, md5_hex: str) -> bool:
        if listed.size_bytes != size_bytes:
            return False
        if listed.etag == md5_hex:
            return True
        # Not an MD5 (encrypted objects): only our own record of the upload,
        # sent with Content-MD5 of a same-size range, vouches for the part.
        recorded = self._recorded.get(listed.part_number)
        return not is_md5(listed.etag) and recorded == (
            listed.part_number, size_bytes, listed.etag)


def require_etag(etag: str, md5_hex: str, operation: str, key: str) -> None:
    if not etag_matches(etag, md5_hex):
        raise RemoteStorageError(operation, key, 1,
                                 f"ETag {etag} is not the MD5 {md5_hex} of the bytes sent")
