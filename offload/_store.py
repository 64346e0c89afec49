"""The object-store seam (STYLE 2): what offload needs from S3, nothing more.

:class:`~offload._s3.S3ObjectStore` is the implementation (the only module
that imports boto3).  Every method raises
:class:`~offload._errors.RemoteStorageError` once its retries are spent, and
``ObjectNotFound`` / ``UploadNotFound`` for a missing key or upload; none
returns a "not found" sentinel.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple, Protocol


class ObjectInfo(NamedTuple):
    key: str
    size_bytes: int
    # Quotes stripped; for a single PUT on AWS and radosgw the hex MD5 of the body.
    etag: str


class PendingUpload(NamedTuple):
    key: str
    upload_id: str


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

    def list_objects(self, prefix: str) -> Iterator[ObjectInfo]:
        """Every key under ``prefix``, fetched page by page."""

    def list_prefixes(self, prefix: str) -> Iterator[str]:
        """The ``/``-delimited common prefixes directly under ``prefix``."""

    def delete_objects(self, keys: Sequence[str]) -> None:
        """Delete ``keys`` (absent keys are fine), up to 1000 per request."""

    def create_multipart_upload(self, key: str) -> str:
        """Start a multipart upload to ``key``; return its upload id."""

    def upload_part_copy(self, key: str, upload_id: str, part_number: int,
                         source_key: str) -> str:
        """Copy the whole of ``source_key`` as part ``part_number``; return the part ETag."""

    def complete_multipart_upload(self, key: str, upload_id: str,
                                  parts: Sequence[tuple[int, str]]) -> None: ...

    def abort_multipart_upload(self, key: str, upload_id: str) -> None: ...

    def list_multipart_uploads(self, prefix: str) -> Iterator[PendingUpload]: ...

    def statistics(self) -> dict[str, int]:
        """Requests per kind (``requests_put`` ...), attempts retried, bytes moved."""
