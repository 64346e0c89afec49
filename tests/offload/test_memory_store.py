"""The in-memory bucket of the seeded fault runs follows S3's rules: each rule is
checked against it and, in the same test, against the real radosgw through
``BotoObjectStore`` (both at the one-attempt level, two items per listing
page), so the two cannot drift apart unnoticed."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator
from typing import Any

import pytest

from common.units import MiB
from offload import (
    BotoObjectStore,
    ObjectNotFound,
    ObjectStore,
    PartInfo,
    RemoteStorageError,
    TransientStorageError,
    UploadNotFound,
)

from .memory_store import MemoryObjectStore

PART = 5 * MiB


@pytest.fixture(params=["memory", "radosgw"])
def store(request: pytest.FixtureRequest) -> Iterator[ObjectStore]:
    if request.param == "memory":
        yield MemoryObjectStore(list_page_size=2)
        return
    client, bucket = request.getfixturevalue("s3_bucket")
    yield BotoObjectStore(client, bucket, list_page_size=2)


def _md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def _b64(data: bytes) -> str:
    return base64.b64encode(hashlib.md5(data).digest()).decode()


def test_objects_etags_ranges_and_missing_keys(store: ObjectStore) -> None:
    assert store.put_object("a/x", b"hello world", content_md5=_b64(b"hello world")) == _md5(
        b"hello world")
    assert store.get_object("a/x") == b"hello world"
    assert store.get_range("a/x", 6, 100) == b"world"  # clipped to the object
    assert store.head_object("a/x").size_bytes == 11
    with pytest.raises(RemoteStorageError, match="InvalidRange"):
        store.get_range("a/x", 11, 20)
    with pytest.raises(TransientStorageError, match="BadDigest"):
        store.put_object("a/y", b"body", content_md5=_b64(b"other"))
    for read in (lambda: store.get_object("a/y"), lambda: store.head_object("a/y")):
        with pytest.raises(ObjectNotFound):
            read()
    store.delete_objects(["a/x", "a/never"])
    assert list(store.list_objects("a/")) == []


def test_listings_page_and_resume(store: ObjectStore) -> None:
    keys = ["p/1/a", "p/1/b", "p/2/a", "p/3", "p/4/x/y", "q/1"]
    for key in keys:
        store.put_object(key, key.encode())
    assert [i.key for i in store.list_objects("p/")] == keys[:5]
    assert [i.key for i in store.list_objects("p/", start_after="p/2/a")] == ["p/3", "p/4/x/y"]
    assert list(store.list_prefixes("p/")) == ["p/1/", "p/2/", "p/4/"]
    # Resumed after a prefix: radosgw leaves it out, a server could name it again
    # (its keys sort after it); RetryingObjectStore copes with both.
    assert [p for p in store.list_prefixes("p/", start_after="p/2/") if p != "p/2/"] == [
        "p/4/"]
    before = store.statistics()["requests_list"]
    list(store.list_objects("p/"))
    assert store.statistics()["requests_list"] - before == 3  # 5 keys, 2 per page


def test_multipart_rules(store: ObjectStore) -> None:
    key = "m/segment"
    bodies = {1: b"1" * PART, 2: b"2" * PART, 3: b"3" * 1000}
    upload_id = store.create_multipart_upload(key)
    etags = {n: store.upload_part(key, upload_id, n, body, content_md5=_b64(body))
             for n, body in bodies.items()}
    assert etags == {n: _md5(body) for n, body in bodies.items()}
    # Sent again with other bytes, a part replaces the old one.
    etags[2] = store.upload_part(key, upload_id, 2, b"x" * PART)
    listed = list(store.list_parts(key, upload_id))
    assert listed == [PartInfo(1, PART, etags[1]), PartInfo(2, PART, _md5(b"x" * PART)),
                      PartInfo(3, 1000, etags[3])]
    assert [p.part_number for p in store.list_parts(key, upload_id, start_after=1)] == [2, 3]
    assert [u.upload_id for u in store.list_multipart_uploads("m/")] == [upload_id]
    with pytest.raises(RemoteStorageError, match="InvalidPart"):
        store.complete_multipart_upload(key, upload_id, [(1, etags[1]), (2, _md5(bodies[2]))])
    store.complete_multipart_upload(key, upload_id, [(1, etags[1]), (2, etags[2]),
                                                     (3, etags[3])])
    data = bodies[1] + b"x" * PART + bodies[3]
    head = store.head_object(key)
    part_md5s = b"".join(hashlib.md5(data[i:i + PART]).digest() for i in range(0, len(data),
                                                                                PART))
    assert (head.size_bytes, head.etag) == (len(data), f"{hashlib.md5(part_md5s).hexdigest()}-3")
    assert store.get_object(key) == data
    with pytest.raises(UploadNotFound):
        list(store.list_parts(key, upload_id))
    assert list(store.list_multipart_uploads("m/")) == []


def test_small_parts_left_out_parts_copies_and_aborts(store: ObjectStore) -> None:
    key = "s/segment"
    upload_id = store.create_multipart_upload(key)
    small = [store.upload_part(key, upload_id, n, b"s" * 1000) for n in (1, 2)]
    with pytest.raises(RemoteStorageError, match="EntityTooSmall"):
        store.complete_multipart_upload(key, upload_id, [(1, small[0]), (2, small[1])])
    # radosgw refuses a Complete that leaves out an uploaded part (AWS would
    # discard it): a resumed upload with parts past the segment's end is redone.
    with pytest.raises(RemoteStorageError, match="InvalidPart"):
        store.complete_multipart_upload(key, upload_id, [(2, small[1])])
    store.abort_multipart_upload(key, upload_id)
    store.put_object("s/chunk-0", b"c" * PART)
    upload_id = store.create_multipart_upload(key)
    assert store.upload_part_copy(key, upload_id, 1, "s/chunk-0") == _md5(b"c" * PART)
    store.abort_multipart_upload(key, upload_id)
    # (A Complete of an aborted upload: AWS says NoSuchUpload, radosgw 16.2 a 500
    # "multipart completion is already in progress"; offload never sends one.)
    for gone in (lambda: store.abort_multipart_upload(key, upload_id),
                 lambda: store.upload_part(key, upload_id, 1, b"late")):
        with pytest.raises(UploadNotFound):
            gone()


def test_statistics_count_requests_by_kind(store: ObjectStore) -> None:
    store.put_object("k", b"v")
    store.get_object("k")
    store.get_range("k", 0, 1)
    store.head_object("k")
    list(store.list_objects(""))
    upload_id = store.create_multipart_upload("u")
    store.upload_part("u", upload_id, 1, b"p")
    store.abort_multipart_upload("u", upload_id)
    store.delete_objects(["k"])
    stats: dict[str, Any] = store.statistics()
    assert [stats[f"requests_{kind}"] for kind in ("put", "part", "get", "head", "list",
                                                   "delete", "multipart", "copy")] == [
        1, 1, 2, 1, 1, 1, 2, 0]
    assert stats["bytes_uploaded"] == 2 and stats["bytes_downloaded"] == 2
