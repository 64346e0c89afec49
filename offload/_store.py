"""The object-store seam (STYLE 2): what offload needs from S3, nothing more.

Two kinds of implementation share the protocol, and stack:

- *one attempt per request*: :class:`~offload._s3.BotoObjectStore` (the only
  module that imports boto3) sends each request once and raises
  :class:`~offload._errors.TransientStorageError` when another attempt may
  succeed; test doubles and fault injection sit at this level too;
- :class:`~offload._retrying.RetryingObjectStore` wraps one of those and
  retries with jittered backoff; what it raises is final.  The offloader and
  the reader are always given one of these (``S3ObjectStore`` is boto3 +
  retries).

Every method raises :class:`~offload._errors.RemoteStorageError` for a refusal
that another attempt cannot change, and ``ObjectNotFound`` / ``UploadNotFound``
for a missing key or upload; none returns a "not found" sentinel.  Listings are
iterators that fetch page by page; ``start_after`` resumes one after the last
item seen (what the retrying layer does when a page fails).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple, Protocol

from common.errors import CorruptRecord

from ._errors import ObjectNotFound

# Kinds of request, as counted by ``statistics()`` (``requests_put`` ...):
# put = PutObject, part = UploadPart, copy = UploadPartCopy, multipart = Create,
# Complete and Abort, list = every listing page (objects, uploads, parts).
REQUEST_KINDS = ("put", "part", "copy", "get", "head", "list", "delete", "multipart")


class ObjectInfo(NamedTuple):
    key: str
    size_bytes: int
    # Quotes stripped; for a single PUT on AWS and radosgw the hex MD5 of the body,
    # for a multipart upload the MD5 of the parts' binary MD5s, "-", the part count.
    etag: str


class PendingUpload(NamedTuple):
    key: str
    upload_id: str


class PartInfo(NamedTuple):
    part_number: int
    size_bytes: int
    # Quotes stripped; the hex MD5 of the part on AWS and radosgw.
    etag: str


class ObjectStore(Protocol):
    bucket: str

    def put_object(self, key: str, body: bytes | bytearray, *,
                   content_md5: str | None = None) -> str:
        """Store ``body`` at ``key``; return its ETag.  With ``content_md5`` (base64)
        the server refuses a body damaged in transit (``BadDigest``, retried)."""

    def get_object(self, key: str) -> bytes: ...

    def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of ``key`` (``end`` exclusive, clipped to the object)."""

    def head_object(self, key: str) -> ObjectInfo: ...

    def list_objects(self, prefix: str, *, start_after: str | None = None
                     ) -> Iterator[ObjectInfo]:
        """Every key under ``prefix`` (after ``start_after``), in key order."""

    def list_prefixes(self, prefix: str, *, start_after: str | None = None) -> Iterator[str]:
        """The ``/``-delimited common prefixes directly under ``prefix``, in order."""

    def delete_objects(self, keys: Sequence[str]) -> None:
        """Delete ``keys`` (absent keys are fine), up to 1000 per request."""

    def create_multipart_upload(self, key: str) -> str:
        """Start a multipart upload to ``key``; return its upload id."""

    def upload_part(self, key: str, upload_id: str, part_number: int, body: bytes | bytearray,
                    *, content_md5: str | None = None) -> str:
        """Store ``body`` as part ``part_number`` (replacing an earlier one); its ETag."""

    def upload_part_copy(self, key: str, upload_id: str, part_number: int,
                         source_key: str) -> str:
        """Copy the whole of ``source_key`` as part ``part_number``; return the part ETag.
        (Servers such as radosgw rewrite every byte: for chunks of open ledgers only.)"""

    def list_parts(self, key: str, upload_id: str, *, start_after: int = 0
                   ) -> Iterator[PartInfo]:
        """The upload's parts numbered above ``start_after``, ascending; raises
        ``UploadNotFound`` once the upload is completed or aborted."""

    def complete_multipart_upload(self, key: str, upload_id: str,
                                  parts: Sequence[tuple[int, str]]) -> None: ...

    def abort_multipart_upload(self, key: str, upload_id: str) -> None: ...

    def list_multipart_uploads(self, prefix: str) -> Iterator[PendingUpload]:
        """Uploads to keys under ``prefix`` that were neither completed nor aborted."""

    def statistics(self) -> dict[str, int]:
        """Requests per kind (``requests_put`` ...), attempts retried, bytes moved."""


def read_indexed_range(store: ObjectStore, key: str, start: int, end: int, *, what: str,
                       short: str = "", read: Callable[[], bytes] | None = None) -> bytes:
    """Bytes ``[start, end)`` of ``key``, which an index says exist: a missing
    object or a short answer is data loss (``CorruptRecord`` naming ``what``),
    not "no data".  ``read`` replaces the plain ranged GET (a segment still in
    chunks); ``short`` says what a short answer means."""
    try:
        data = store.get_range(key, start, end) if read is None else read()
    except ObjectNotFound as exc:
        raise CorruptRecord(key, start, f"{what} object is missing") from exc
    if len(data) != end - start:
        raise CorruptRecord(key, start, f"ranged GET returned {len(data)} of {end - start} "
                                        f"bytes" + (f" ({short})" if short else ""))
    return data
