"""The multipart upload of a sealed ledger against the real S3 server: resumed
from the persisted upload id (ListParts, one part per page), keeping the parts
that hold the right bytes and replacing the others; sent again when it holds
parts past the segment's end; aborted when it fails; left open by nobody
(a lost Create answer, a deleted ledger).  Faults at exact requests come from
``FailOnCue`` (FAULT INJECTION)."""

from __future__ import annotations

import hashlib
from typing import Any

from common.units import MiB
from ledger import Bookie, OffloadInfo, OffloadState
from offload import (
    BotoObjectStore,
    Offloader,
    OffloadService,
    OffloadSettings,
    RetryingObjectStore,
    S3ObjectStore,
)

from .conftest import (
    CHUNK,
    PASSWORD,
    T,
    Written,
    bucket_keys,
    offload_through_service,
    pending_uploads,
    random_payloads,
    segment_bytes,
    write_closed_ledger,
)
from .faulty_store import FailOnCue


def _start_upload_by_hand(client: Any, bucket: str, bookie: Bookie, written: Written,
                          settings: OffloadSettings, parts: dict[int, bytes],
                          recorded: tuple[int, ...]) -> str:
    """An upload of the ledger's segment 0 holding ``parts``, persisted as a
    crashed run leaves it, with the parts numbered in ``recorded`` recorded."""
    prefix = f"ledgerd/test/b1/ledgers/{written.ledger_id}/"
    key = f"{prefix}seg-0/segment"
    upload_id = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    for number, body in parts.items():
        client.upload_part(Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=number,
                           Body=body)
    bookie.set_offload(written.ledger_id, OffloadInfo(
        state=OffloadState.IN_PROGRESS, bucket=settings.bucket, key_prefix=prefix,
        upload_key=key, upload_id=upload_id,
        upload_parts=tuple((n, len(parts[n]), hashlib.md5(parts[n]).hexdigest())
                           for n in recorded)))
    return upload_id


def test_resume_keeps_right_parts_and_replaces_wrong_ones(bookie, settings, s3_bucket,
                                                          executor):
    client, bucket = s3_bucket
    written = write_closed_ledger(bookie, random_payloads(13 * MiB, seed=21))
    data = segment_bytes(written)
    # Part 1 right, part 2 torn (a body cut short, stored), part 3 never sent.
    _start_upload_by_hand(client, bucket, bookie, written, settings,
                          {1: data[:CHUNK], 2: data[CHUNK:CHUNK + MiB]}, recorded=(1,))
    store = S3ObjectStore(client, settings, list_page_size=1)
    info = Offloader(bookie, store, settings, executor=executor).offload(written.ledger_id)
    assert info.state is OffloadState.OFFLOADED
    stats = store.statistics()
    assert stats["requests_part"] == 2 and stats["requests_multipart"] == 1  # Complete only
    # Uploads at the survey and before OFFLOADED, the (empty) prefix, and
    # ListParts page by page: two parts, one per page.
    assert stats["requests_list"] == 1 + 1 + 1 + 2
    segment = client.get_object(Bucket=bucket, Key=f"{info.key_prefix}seg-0/segment")
    assert segment["Body"].read() == data
    assert pending_uploads(client, bucket) == []


def test_parts_past_the_segment_send_it_again(bookie, settings, s3_bucket, executor):
    client, bucket = s3_bucket
    written = write_closed_ledger(bookie, random_payloads(11 * MiB, seed=22))
    data = segment_bytes(written)
    parts = {n + 1: data[n * CHUNK:(n + 1) * CHUNK] for n in range(3)}
    parts[4] = b"from a run with other settings" * 1000
    first_id = _start_upload_by_hand(client, bucket, bookie, written, settings, parts,
                                     recorded=(1, 2, 3, 4))
    store = S3ObjectStore(client, settings)
    info = Offloader(bookie, store, settings, executor=executor).offload(written.ledger_id)
    assert info.state is OffloadState.OFFLOADED
    # The first pass finds parts 1-3 in place, then part 4 that no Complete
    # may leave out: that upload is aborted and a new one gets all three.
    assert store.statistics()["requests_part"] == 3
    assert client.get_object(Bucket=bucket, Key=f"{info.key_prefix}seg-0/segment")[
        "Body"].read() == data
    assert pending_uploads(client, bucket) == []
    assert first_id not in [u["UploadId"] for u in client.list_multipart_uploads(
        Bucket=bucket).get("Uploads", [])]


def test_a_refused_part_fails_loudly_and_aborts_the_upload(bookie, settings, s3_bucket):
    client, bucket = s3_bucket
    written = write_closed_ledger(bookie, random_payloads(13 * MiB, seed=23))
    refusing = FailOnCue(BotoObjectStore(client, bucket), "upload_part", mode="refused",
                         when=lambda key, upload_id, number, *rest, **kw: number == 2)
    failed = offload_through_service(bookie, RetryingObjectStore(refusing, settings), settings,
                                     written.ledger_id)
    assert failed.state is OffloadState.FAILED and failed.upload_id is None
    assert failed.error == (
        f"RemoteStorageError: S3 upload_part of '{failed.key_prefix}seg-0/segment' failed "
        "after 1 attempt(s): AccessDenied (HTTP 403): cue")
    assert pending_uploads(client, bucket) == [] and bucket_keys(client, bucket) == []
    retried = offload_through_service(bookie, S3ObjectStore(client, settings), settings,
                                      written.ledger_id)
    assert retried.state is OffloadState.OFFLOADED


def test_a_lost_create_answer_leaves_no_open_upload(bookie, settings, s3_bucket, executor):
    client, bucket = s3_bucket
    written = write_closed_ledger(bookie, random_payloads(11 * MiB, seed=24))
    lossy = FailOnCue(BotoObjectStore(client, bucket), "create_multipart_upload",
                      mode="lost_answer")
    store = RetryingObjectStore(lossy, settings, sleep=lambda _s: None)
    info = Offloader(bookie, store, settings, executor=executor).offload(written.ledger_id)
    assert info.state is OffloadState.OFFLOADED
    assert lossy.calls["create_multipart_upload"] == 2  # the first one's upload was orphaned
    assert pending_uploads(client, bucket) == []


def test_the_sweep_aborts_uploads_of_deleted_ledgers(bookie, store, settings, s3_bucket):
    client, bucket = s3_bucket
    written = write_closed_ledger(bookie, [b"x"])
    key = f"ledgerd/test/b1/ledgers/{written.ledger_id}/seg-0/segment"
    client.create_multipart_upload(Bucket=bucket, Key=key)  # a crash, then a delete
    bookie.delete_ledger(written.ledger_id, password=PASSWORD).result(T)
    service = OffloadService(bookie, store, settings)
    assert service.sweep_orphans() == [written.ledger_id]
    assert pending_uploads(client, bucket) == []
