"""An in-memory S3 bucket, for the seeded fault-injection runs of offload.

Not a mock of a call sequence: a small object store with S3's rules where
offload relies on them, at the one-attempt level of the seam (like
``offload.BotoObjectStore``, wrapped in ``offload.RetryingObjectStore``):

- objects: PUT replaces; Content-MD5 is checked (``BadDigest``, transient);
  ETags are the MD5 of a PUT body, and ``md5(part MD5s)-N`` after a multipart
  upload (what AWS and radosgw answer); ranged GETs are clipped to the object,
  a range starting past its end is refused (416);
- listings are in key order, ``list_page_size`` items per request, resumed by
  ``start_after``; common prefixes by ``/``;
- multipart: part numbers 1..10000, a part uploaded again replaces the old
  one, ListParts pages by part number, Complete needs ascending part numbers
  whose ETags match (``InvalidPart``, ``InvalidPartOrder``), every part
  but the last at least ``part_size_bytes_min`` (``EntityTooSmall``), and,
  as on radosgw (AWS discards them instead), every uploaded part named
  (``InvalidPart``); a completed or aborted upload is gone (``NoSuchUpload``);
- requests are counted per kind, as ``BotoObjectStore`` counts them.

The seeded runs use it because 100+ offloads against radosgw do not fit the
suite's time budget; tests/offload/test_memory_store.py checks each rule, and
the same rules against the real radosgw (tests/tools/test_local_s3.py and the
offload tests) keep the two honest.
"""

from __future__ import annotations

import base64
import hashlib
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from common.units import MiB
from offload import (
    ObjectInfo,
    ObjectNotFound,
    PartInfo,
    PendingUpload,
    RemoteStorageError,
    TransientStorageError,
    UploadNotFound,
)

PART_COUNT_MAX = 10_000
_DELETE_BATCH_MAX = 1000
REQUEST_KINDS = ("put", "part", "copy", "get", "head", "list", "delete", "multipart")


@dataclass
class _Upload:
    key: str
    sequence: int
    parts: dict[int, tuple[bytes, str]] = field(default_factory=dict)


def _md5(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def _refused(operation: str, key: str, code: str, status: int, message: str) -> RemoteStorageError:
    return RemoteStorageError(operation, key, 1, f"{code} (HTTP {status}): {message}")


class MemoryObjectStore:
    def __init__(self, bucket: str = "memory", *, list_page_size: int = 1000,
                 part_size_bytes_min: int = 5 * MiB) -> None:
        self.bucket = bucket
        self._page_size = list_page_size
        self._part_min = part_size_bytes_min
        self._lock = threading.Lock()
        self._objects: dict[str, tuple[bytes, str]] = {}
        self._uploads: dict[str, _Upload] = {}
        self._sequence = 0
        self._counts: Counter[str] = Counter()

    # --- for tests ---------------------------------------------------------------

    def object_keys(self) -> list[str]:
        with self._lock:
            return sorted(self._objects)

    def open_uploads(self) -> list[PendingUpload]:
        with self._lock:
            return [PendingUpload(u.key, upload_id) for upload_id, u in self._uploads.items()]

    def data(self, key: str) -> bytes:
        with self._lock:
            return self._objects[key][0]

    # --- objects -------------------------------------------------------------------

    def put_object(self, key: str, body: bytes | bytearray, *,
                   content_md5: str | None = None) -> str:
        data = bytes(body)
        with self._lock:
            self._counts["requests_put"] += 1
            _check_md5("PutObject", key, data, content_md5)
            etag = _md5(data)
            self._objects[key] = (data, etag)
            self._counts["bytes_uploaded"] += len(data)
        return etag

    def get_object(self, key: str) -> bytes:
        with self._lock:
            self._counts["requests_get"] += 1
            data = self._object("GetObject", key)[0]
            self._counts["bytes_downloaded"] += len(data)
        return data

    def get_range(self, key: str, start: int, end: int) -> bytes:
        with self._lock:
            self._counts["requests_get"] += 1
            data = self._object("GetObject", key)[0]
            if start >= len(data):
                raise _refused("GetObject", key, "InvalidRange", 416,
                               f"range starts at {start} of {len(data)} bytes")
            piece = data[start:end]
            self._counts["bytes_downloaded"] += len(piece)
        return piece

    def head_object(self, key: str) -> ObjectInfo:
        with self._lock:
            self._counts["requests_head"] += 1
            data, etag = self._object("HeadObject", key)
        return ObjectInfo(key, len(data), etag)

    def list_objects(self, prefix: str, *, start_after: str | None = None
                     ) -> Iterator[ObjectInfo]:
        after = start_after or ""
        while True:
            with self._lock:
                self._counts["requests_list"] += 1
                keys = sorted(k for k in self._objects if k.startswith(prefix) and k > after)
                page = [ObjectInfo(k, len(self._objects[k][0]), self._objects[k][1])
                        for k in keys[:self._page_size]]
            yield from page
            if len(keys) <= self._page_size:
                return
            after = page[-1].key

    def list_prefixes(self, prefix: str, *, start_after: str | None = None) -> Iterator[str]:
        after = start_after or ""
        while True:
            with self._lock:
                self._counts["requests_list"] += 1
                keys = sorted(k for k in self._objects if k.startswith(prefix) and k > after)
            page: list[str] = []
            truncated = False
            for key in keys:
                slash = key.find("/", len(prefix))
                # Like radosgw, a prefix at or before ``start_after`` is left out.
                if (slash < 0 or key[:slash + 1] <= after
                        or (page and key.startswith(page[-1]))):
                    continue
                if len(page) == self._page_size:
                    truncated = True
                    break
                page.append(key[:slash + 1])
            yield from page
            if not truncated:
                return
            # The next page starts past every key under the last prefix.
            after = page[-1] + "\U0010ffff"

    def delete_objects(self, keys: Sequence[str]) -> None:
        for start in range(0, len(keys), _DELETE_BATCH_MAX):
            with self._lock:
                self._counts["requests_delete"] += 1
                for key in keys[start:start + _DELETE_BATCH_MAX]:
                    self._objects.pop(key, None)

    # --- multipart -------------------------------------------------------------------

    def create_multipart_upload(self, key: str) -> str:
        with self._lock:
            self._counts["requests_multipart"] += 1
            self._sequence += 1
            upload_id = f"upload-{self._sequence}"
            self._uploads[upload_id] = _Upload(key, self._sequence)
        return upload_id

    def upload_part(self, key: str, upload_id: str, part_number: int, body: bytes | bytearray,
                    *, content_md5: str | None = None) -> str:
        data = bytes(body)
        with self._lock:
            self._counts["requests_part"] += 1
            upload = self._upload("UploadPart", key, upload_id)
            _check_part_number("UploadPart", key, part_number)
            _check_md5("UploadPart", key, data, content_md5)
            etag = _md5(data)
            upload.parts[part_number] = (data, etag)
            self._counts["bytes_uploaded"] += len(data)
        return etag

    def upload_part_copy(self, key: str, upload_id: str, part_number: int,
                         source_key: str) -> str:
        with self._lock:
            self._counts["requests_copy"] += 1
            upload = self._upload("UploadPartCopy", key, upload_id)
            _check_part_number("UploadPartCopy", key, part_number)
            data, _ = self._object("UploadPartCopy", source_key)
            etag = _md5(data)
            upload.parts[part_number] = (data, etag)
        return etag

    def list_parts(self, key: str, upload_id: str, *, start_after: int = 0
                   ) -> Iterator[PartInfo]:
        after = start_after
        while True:
            with self._lock:
                self._counts["requests_list"] += 1
                upload = self._upload("ListParts", key, upload_id)
                numbers = sorted(n for n in upload.parts if n > after)
                page = [PartInfo(n, len(upload.parts[n][0]), upload.parts[n][1])
                        for n in numbers[:self._page_size]]
            yield from page
            if len(numbers) <= self._page_size:
                return
            after = page[-1].part_number

    def complete_multipart_upload(self, key: str, upload_id: str,
                                  parts: Sequence[tuple[int, str]]) -> None:
        operation = "CompleteMultipartUpload"
        with self._lock:
            self._counts["requests_multipart"] += 1
            upload = self._upload(operation, key, upload_id)
            if not parts:
                raise _refused(operation, key, "MalformedXML", 400, "no parts")
            numbers = [n for n, _ in parts]
            if numbers != sorted(set(numbers)):
                raise _refused(operation, key, "InvalidPartOrder", 400, f"parts {numbers}")
            chosen: list[tuple[bytes, str]] = []
            for number, etag in parts:
                stored = upload.parts.get(number)
                if stored is None or stored[1] != etag.strip('"'):
                    raise _refused(operation, key, "InvalidPart", 400,
                                   f"part {number} with ETag {etag} was not uploaded")
                chosen.append(stored)
            # AWS would discard the parts left out; radosgw refuses, and so do we.
            left_out = sorted(upload.parts.keys() - set(numbers))
            if left_out:
                raise _refused(operation, key, "InvalidPart", 400,
                               f"uploaded parts {left_out} are not named")
            for data, _ in chosen[:-1]:
                if len(data) < self._part_min:
                    raise _refused(operation, key, "EntityTooSmall", 400,
                                   f"a non-final part of {len(data)} bytes")
            joined = b"".join(data for data, _ in chosen)
            digest = hashlib.md5(b"".join(bytes.fromhex(etag) for _, etag in chosen),
                                 usedforsecurity=False).hexdigest()
            self._objects[key] = (joined, f"{digest}-{len(chosen)}")
            del self._uploads[upload_id]

    def abort_multipart_upload(self, key: str, upload_id: str) -> None:
        with self._lock:
            self._counts["requests_multipart"] += 1
            self._upload("AbortMultipartUpload", key, upload_id)
            del self._uploads[upload_id]

    def list_multipart_uploads(self, prefix: str) -> Iterator[PendingUpload]:
        after: tuple[str, int] = ("", 0)
        while True:
            with self._lock:
                self._counts["requests_list"] += 1
                found = sorted((u.key, u.sequence, upload_id)
                               for upload_id, u in self._uploads.items()
                               if u.key.startswith(prefix) and (u.key, u.sequence) > after)
            page = found[:self._page_size]
            yield from (PendingUpload(key, upload_id) for key, _, upload_id in page)
            if len(found) <= self._page_size:
                return
            after = page[-1][:2]

    def statistics(self) -> dict[str, int]:
        with self._lock:
            stats = {f"requests_{kind}": self._counts[f"requests_{kind}"]
                     for kind in REQUEST_KINDS}
            stats["bytes_uploaded"] = self._counts["bytes_uploaded"]
            stats["bytes_downloaded"] = self._counts["bytes_downloaded"]
        return stats

    # --- lookups (lock held) ---------------------------------------------------------

    def _object(self, operation: str, key: str) -> tuple[bytes, str]:
        found = self._objects.get(key)
        if found is None:
            raise ObjectNotFound(operation, key)
        return found

    def _upload(self, operation: str, key: str, upload_id: str) -> _Upload:
        upload = self._uploads.get(upload_id)
        if upload is None or upload.key != key:
            raise UploadNotFound(operation, key)
        return upload


def _check_md5(operation: str, key: str, data: bytes, content_md5: str | None) -> None:
    if content_md5 is not None:
        sent = base64.b64encode(hashlib.md5(data, usedforsecurity=False).digest()).decode()
        if sent != content_md5:
            raise TransientStorageError(operation, key, "BadDigest (HTTP 400): the body's "
                                                        "MD5 is not the Content-MD5 sent")


def _check_part_number(operation: str, key: str, part_number: int) -> None:
    if not 1 <= part_number <= PART_COUNT_MAX:
        raise _refused(operation, key, "InvalidArgument", 400,
                       f"part number {part_number} is not in 1..{PART_COUNT_MAX}")
