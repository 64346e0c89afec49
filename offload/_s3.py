"""The boto3 implementation of :class:`~offload._store.ObjectStore`.

The only module of ledgerd that imports boto3 (STYLE 2).
:class:`BotoObjectStore` sends each request once through :meth:`BotoObjectStore._call`,
which counts it (each attempt is a billed request) and converts botocore's
exceptions (STYLE 9): transient ones into ``TransientStorageError``, the rest
into the error tree.  :class:`S3ObjectStore` is that store with retries
(:class:`~offload._retrying.RetryingObjectStore`): what the service uses.
botocore's own retries are switched off so attempts, backoff and counts are
ours alone.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any, TypeVar

import boto3
from botocore.config import Config

from ._errors import ObjectNotFound, RemoteStorageError, TransientStorageError, UploadNotFound
from ._retry import Verdict, classify, describe
from ._retrying import RetryingObjectStore
from ._store import REQUEST_KINDS, ObjectInfo, PartInfo, PendingUpload
from .settings import OffloadSettings

T = TypeVar("T")

_DELETE_BATCH_MAX = 1000
# What S3 answers at most per listing page; tests pass less to exercise paging.
LIST_PAGE_SIZE_MAX = 1000


def make_s3_client(settings: OffloadSettings, *, pool_size: int = 32,
                   access_key: str | None = None, secret_key: str | None = None) -> Any:
    """A thread-safe boto3 S3 client; credentials from boto3's standard chain unless
    ``access_key`` and ``secret_key`` are given (the Spark source's options)."""
    config = Config(
        region_name=settings.region,
        connect_timeout=settings.connect_timeout_s,
        read_timeout=settings.read_timeout_s,
        retries={"total_max_attempts": 1, "mode": "standard"},
        max_pool_connections=pool_size,
        s3={"addressing_style": "path" if settings.path_style else "auto"},
        # Flexible checksums (x-amz-checksum-*, aws-chunked bodies) are not
        # understood by every S3-compatible server (Ceph before Reef); send
        # them only where the API requires a checksum.
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    session = boto3.session.Session(aws_access_key_id=access_key,
                                    aws_secret_access_key=secret_key)
    return session.client("s3", endpoint_url=settings.endpoint_url, config=config)


class BotoObjectStore:
    """``bucket`` on ``client``, one attempt per request; ``list_page_size`` is the
    most items a listing page asks for (MaxKeys, MaxParts, MaxUploads)."""

    def __init__(self, client: Any, bucket: str, *,
                 list_page_size: int = LIST_PAGE_SIZE_MAX) -> None:
        self.bucket = bucket
        self._client = client
        self._page_size = list_page_size
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    # --- objects ---------------------------------------------------------------

    def put_object(self, key: str, body: bytes | bytearray, *,
                   content_md5: str | None = None) -> str:
        args: dict[str, Any] = {"Bucket": self.bucket, "Key": key, "Body": body}
        if content_md5 is not None:
            args["ContentMD5"] = content_md5
        response = self._call("put", "PutObject", key, partial(self._client.put_object, **args))
        self._count("bytes_uploaded", len(body))
        return _etag(response)

    def get_object(self, key: str) -> bytes:
        def fetch() -> bytes:
            # Reading the body is inside the attempt: a reset mid-body is retried.
            return bytes(self._client.get_object(Bucket=self.bucket, Key=key)["Body"].read())

        data = self._call("get", "GetObject", key, fetch)
        self._count("bytes_downloaded", len(data))
        return data

    def get_range(self, key: str, start: int, end: int) -> bytes:
        def fetch() -> bytes:
            response = self._client.get_object(Bucket=self.bucket, Key=key,
                                               Range=f"bytes={start}-{end - 1}")
            return bytes(response["Body"].read())

        data = self._call("get", "GetObject", key, fetch)
        self._count("bytes_downloaded", len(data))
        return data

    def head_object(self, key: str) -> ObjectInfo:
        response = self._call("head", "HeadObject", key, lambda: self._client.head_object(
            Bucket=self.bucket, Key=key))
        return ObjectInfo(key, int(response["ContentLength"]), _etag(response))

    def list_objects(self, prefix: str, *, start_after: str | None = None
                     ) -> Iterator[ObjectInfo]:
        for page in self._pages(prefix, delimiter=None, start_after=start_after):
            for item in page.get("Contents", []):
                yield ObjectInfo(item["Key"], int(item["Size"]), _etag(item))

    def list_prefixes(self, prefix: str, *, start_after: str | None = None) -> Iterator[str]:
        for page in self._pages(prefix, delimiter="/", start_after=start_after):
            for item in page.get("CommonPrefixes", []):
                yield str(item["Prefix"])

    def _pages(self, prefix: str, *, delimiter: str | None,
               start_after: str | None) -> Iterator[dict[str, Any]]:
        args: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix,
                                "MaxKeys": self._page_size}
        if delimiter is not None:
            args["Delimiter"] = delimiter
        if start_after is not None:
            args["StartAfter"] = start_after
        while True:
            page: dict[str, Any] = self._call("list", "ListObjectsV2", prefix,
                                              partial(self._client.list_objects_v2, **args))
            yield page
            if not page.get("IsTruncated"):
                return
            args["ContinuationToken"] = page["NextContinuationToken"]

    def delete_objects(self, keys: Sequence[str]) -> None:
        for start in range(0, len(keys), _DELETE_BATCH_MAX):
            batch = [{"Key": k} for k in keys[start:start + _DELETE_BATCH_MAX]]
            response = self._call("delete", "DeleteObjects", batch[0]["Key"],
                                  partial(self._client.delete_objects, Bucket=self.bucket,
                                          Delete={"Objects": batch, "Quiet": True}))
            errors = response.get("Errors", [])
            if errors:
                first = errors[0]
                raise RemoteStorageError("DeleteObjects", str(first.get("Key")), 1,
                                         f"{first.get('Code')}: {first.get('Message')} "
                                         f"({len(errors)} keys not deleted)")

    # --- multipart ---------------------------------------------------------------

    def create_multipart_upload(self, key: str) -> str:
        response = self._call("multipart", "CreateMultipartUpload", key,
                              lambda: self._client.create_multipart_upload(
                                  Bucket=self.bucket, Key=key))
        return str(response["UploadId"])

    def upload_part(self, key: str, upload_id: str, part_number: int, body: bytes | bytearray,
                    *, content_md5: str | None = None) -> str:
        args: dict[str, Any] = {"Bucket": self.bucket, "Key": key, "UploadId": upload_id,
                                "PartNumber": part_number, "Body": body}
        if content_md5 is not None:
            args["ContentMD5"] = content_md5
        response = self._call("part", "UploadPart", key, partial(self._client.upload_part,
                                                                 **args))
        self._count("bytes_uploaded", len(body))
        return _etag(response)

    def upload_part_copy(self, key: str, upload_id: str, part_number: int,
                         source_key: str) -> str:
        response = self._call("copy", "UploadPartCopy", key,
                              lambda: self._client.upload_part_copy(
                                  Bucket=self.bucket, Key=key, UploadId=upload_id,
                                  PartNumber=part_number,
                                  CopySource={"Bucket": self.bucket, "Key": source_key}))
        return _etag(response["CopyPartResult"])

    def list_parts(self, key: str, upload_id: str, *, start_after: int = 0
                   ) -> Iterator[PartInfo]:
        marker = start_after
        while True:
            try:
                page = self._call("list", "ListParts", key, partial(
                    self._client.list_parts, Bucket=self.bucket, Key=key, UploadId=upload_id,
                    MaxParts=self._page_size, PartNumberMarker=marker))
            except ObjectNotFound as exc:
                # radosgw answers NoSuchKey, not NoSuchUpload, once the upload is completed.
                raise UploadNotFound("ListParts", key) from exc
            for item in page.get("Parts", []):
                yield PartInfo(int(item["PartNumber"]), int(item["Size"]), _etag(item))
            if not page.get("IsTruncated"):
                return
            marker = int(page["NextPartNumberMarker"])

    def complete_multipart_upload(self, key: str, upload_id: str,
                                  parts: Sequence[tuple[int, str]]) -> None:
        body = {"Parts": [{"PartNumber": n, "ETag": f'"{etag}"'} for n, etag in parts]}
        self._call("multipart", "CompleteMultipartUpload", key,
                   lambda: self._client.complete_multipart_upload(
                       Bucket=self.bucket, Key=key, UploadId=upload_id, MultipartUpload=body))

    def abort_multipart_upload(self, key: str, upload_id: str) -> None:
        self._call("multipart", "AbortMultipartUpload", key,
                   lambda: self._client.abort_multipart_upload(
                       Bucket=self.bucket, Key=key, UploadId=upload_id))

    def list_multipart_uploads(self, prefix: str) -> Iterator[PendingUpload]:
        args: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix,
                                "MaxUploads": self._page_size}
        while True:
            page = self._call("list", "ListMultipartUploads", prefix,
                              partial(self._client.list_multipart_uploads, **args))
            for item in page.get("Uploads", []):
                yield PendingUpload(str(item["Key"]), str(item["UploadId"]))
            if not page.get("IsTruncated"):
                return
            args.update(KeyMarker=page["NextKeyMarker"],
                        UploadIdMarker=page["NextUploadIdMarker"])

    # --- accounting and conversion -----------------------------------------------

    def statistics(self) -> dict[str, int]:
        with self._lock:
            counts = dict(self._counts)
        stats = {f"requests_{kind}": counts.get(f"requests_{kind}", 0) for kind in REQUEST_KINDS}
        for name in ("bytes_uploaded", "bytes_downloaded"):
            stats[name] = counts.get(name, 0)
        return stats

    def _count(self, name: str, amount: int = 1) -> None:
        with self._lock:
            self._counts[name] += amount

    def _call(self, kind: str, operation: str, key: str, request: Callable[[], T]) -> T:
        self._count(f"requests_{kind}")
        try:
            return request()
        except Exception as exc:
            verdict = classify(exc)
            if verdict is Verdict.NOT_FOUND:
                raise ObjectNotFound(operation, key) from exc
            if verdict is Verdict.NO_UPLOAD:
                raise UploadNotFound(operation, key) from exc
            if verdict is Verdict.RETRY:
                raise TransientStorageError(operation, key, describe(exc)) from exc
            raise RemoteStorageError(operation, key, 1, describe(exc)) from exc


class S3ObjectStore(RetryingObjectStore):
    """``settings.bucket`` on ``client`` with retries: the store the service uses.
    ``sleep`` and ``rng`` (backoff) and ``list_page_size`` are injected for tests."""

    def __init__(self, client: Any, settings: OffloadSettings, *,
                 sleep: Callable[[float], None] = time.sleep,
                 rng: random.Random | None = None,
                 list_page_size: int = LIST_PAGE_SIZE_MAX) -> None:
        super().__init__(BotoObjectStore(client, settings.bucket, list_page_size=list_page_size),
                         settings, sleep=sleep, rng=rng)


def _etag(response: dict[str, Any]) -> str:
    return str(response.get("ETag", "")).strip('"')
