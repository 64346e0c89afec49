"""The offloader against the real S3 server and a real bookie: small ledgers
(one PUT), multi-part ledgers (one multipart upload straight from the entries),
several segments, read-back."""

from __future__ import annotations

import hashlib
import random
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import crc32c
import pytest

from common.errors import NoSuchLedger, NotSealed
from common.units import MiB
from ledger import Bookie, OffloadState
from offload import Offloader, OffloadSettings, RemoteLedgerReader, S3ObjectStore, Step
from offload._format import decode_index, iter_frames

from .conftest import (
    CHUNK,
    PASSWORD,
    T,
    Written,
    bucket_keys,
    endpoint_of,
    offload_settings,
    pending_uploads,
    random_payloads,
    write_closed_ledger,
)


def _offloader(bookie: Bookie, store: S3ObjectStore, settings: OffloadSettings,
               executor: ThreadPoolExecutor) -> Offloader:
    return Offloader(bookie, store, settings, executor=executor, clock=lambda: 1234.5)


def _read_all(reader: RemoteLedgerReader, bookie: Bookie, written: Written,
              order: list[int]) -> None:
    info = bookie.get_ledger(written.ledger_id).offload
    for entry_id in order:
        payload, crc = reader.read_entry(written.ledger_id, entry_id, info)
        assert payload == written.payloads[entry_id], f"entry {entry_id}"
        assert crc == crc32c.crc32c(payload)


def test_small_ledger_is_one_put_of_the_segment(bookie, store, settings, s3_bucket, executor):
    client, bucket = s3_bucket
    written = write_closed_ledger(bookie, [b"alpha", b"", b"gamma" * 1000])
    info = _offloader(bookie, store, settings, executor).offload(written.ledger_id)
    prefix = f"ledgerd/test/b1/ledgers/{written.ledger_id}/"
    assert info.state is OffloadState.OFFLOADED and info.key_prefix == prefix
    assert info.segment_bytes == written.frame_bytes and info.offloaded_at == 1234.5
    assert bucket_keys(client, bucket) == [prefix + "seg-0/index", prefix + "seg-0/segment"]
    stats = store.statistics()
    assert stats["requests_copy"] == 0 and stats["requests_multipart"] == 0
    assert stats["requests_put"] == 2  # segment and index
    assert bookie.get_ledger(written.ledger_id).offload == info  # persisted by set_offload
    segment = client.get_object(Bucket=bucket, Key=prefix + "seg-0/segment")["Body"].read()
    frames = list(iter_frames(segment, key="segment", offset=0, first_entry_id=0))
    assert [p for _, p, _ in frames] == written.payloads
    index = decode_index(client.get_object(Bucket=bucket, Key=prefix + "seg-0/index")["Body"]
                         .read(), key="index")
    assert index.ledger.metadata == {"app": "test"} and index.ledger.last_entry_id == 2


def test_multi_part_ledger_is_one_multipart_upload(bookie, store, settings, s3_bucket,
                                                   executor):
    client, bucket = s3_bucket
    written = write_closed_ledger(bookie, random_payloads(13 * MiB, seed=1))
    offloader = _offloader(bookie, store, settings, executor)
    info = offloader.offload(written.ledger_id)
    prefix = info.key_prefix
    assert bucket_keys(client, bucket) == [f"{prefix}seg-0/index", f"{prefix}seg-0/segment"]
    assert pending_uploads(client, bucket) == []
    parts = -(-written.frame_bytes // CHUNK)
    stats = store.statistics()
    assert stats["requests_part"] == parts == 3 and stats["requests_copy"] == 0
    assert stats["requests_put"] == 1  # the index
    assert stats["requests_multipart"] == 2  # create and complete
    assert stats["bytes_uploaded"] == written.frame_bytes + len(client.get_object(
        Bucket=bucket, Key=f"{prefix}seg-0/index")["Body"].read())
    segment = client.get_object(Bucket=bucket, Key=f"{prefix}seg-0/segment")["Body"].read()
    assert len(segment) == written.frame_bytes == info.segment_bytes
    # The ETag S3 derives from the parts is the one of the bytes cut at CHUNK.
    part_md5s = [hashlib.md5(segment[i:i + CHUNK]).digest()
                 for i in range(0, len(segment), CHUNK)]
    head = client.head_object(Bucket=bucket, Key=f"{prefix}seg-0/segment")
    assert head["ETag"].strip('"') == f"{hashlib.md5(b''.join(part_md5s)).hexdigest()}-3"
    # OFFLOADED keeps nothing of the upload.
    assert info.upload_id is None and info.upload_key is None and info.upload_parts == ()
    reader = RemoteLedgerReader(store, settings)
    _read_all(reader, bookie, written, list(range(len(written.payloads))))
    reader.close()


@pytest.mark.parametrize(("interval_s", "records_max"), [(0.0, 3), (3600.0, 1)])
def test_parts_are_recorded_at_most_once_per_interval(bookie, s3_bucket, executor,
                                                      interval_s, records_max):
    client, bucket = s3_bucket
    settings = offload_settings(bucket, endpoint_of(client), parts_record_interval_s=interval_s)
    written = write_closed_ledger(bookie, random_payloads(13 * MiB, seed=5))
    steps: list[Step] = []
    info = Offloader(bookie, S3ObjectStore(client, settings), settings, executor=executor,
                     step_hook=lambda step, _ledger_id: steps.append(step)).offload(
        written.ledger_id)
    assert info.state is OffloadState.OFFLOADED
    # Each record holds every part finished so far; the last one holds all three.
    assert 1 <= steps.count(Step.RECORD_PARTS) <= records_max
    assert steps.index(Step.START_MULTIPART) < steps.index(Step.RECORD_PARTS)
    assert steps[-1] is Step.MARK_OFFLOADED and steps.count(Step.UPLOAD_PART) == 3


def test_large_ledger_splits_into_segments(bookie, s3_bucket, executor):
    client, bucket = s3_bucket
    settings = offload_settings(bucket, endpoint_of(client), segment_size_bytes_max=6 * MiB)
    store = S3ObjectStore(client, settings)
    written = write_closed_ledger(bookie, random_payloads(15 * MiB, seed=2))
    info = _offloader(bookie, store, settings, executor).offload(written.ledger_id)
    keys = bucket_keys(client, bucket)
    firsts = sorted({int(k.split("/seg-")[1].split("/")[0]) for k in keys})
    assert len(firsts) == 3 and firsts[0] == 0
    assert all(k.endswith(("/segment", "/index")) for k in keys) and len(keys) == 6
    sizes = [client.head_object(Bucket=bucket, Key=f"{info.key_prefix}seg-{f}/segment")
             ["ContentLength"] for f in firsts]
    assert sum(sizes) == written.frame_bytes == info.segment_bytes
    assert all(size <= 6 * MiB for size in sizes)
    reader = RemoteLedgerReader(store, settings)
    order = list(range(len(written.payloads)))
    random.Random(3).shuffle(order)
    _read_all(reader, bookie, written, order)
    reader.close()


def test_empty_ledger_offloads_an_empty_segment(bookie, store, settings, s3_bucket, executor):
    client, bucket = s3_bucket
    info = bookie.create_ledger(password=PASSWORD, metadata={}).result(T)
    bookie.close_ledger(info.ledger_id, password=PASSWORD).result(T)
    done = _offloader(bookie, store, settings, executor).offload(info.ledger_id)
    assert done.state is OffloadState.OFFLOADED and done.segment_bytes == 0
    assert len(bucket_keys(client, bucket)) == 2


def test_only_closed_ledgers_are_offloaded(bookie, store, settings, executor):
    offloader = _offloader(bookie, store, settings, executor)
    info = bookie.create_ledger(password=PASSWORD, metadata={}).result(T)
    bookie.append(info.ledger_id, [(None, (b"x",))], password=PASSWORD)[0].result(T)
    with pytest.raises(NotSealed):
        offloader.offload(info.ledger_id)
    bookie.fence(info.ledger_id, password=PASSWORD).result(T)
    with pytest.raises(NotSealed):
        offloader.offload(info.ledger_id)
    with pytest.raises(NoSuchLedger):
        offloader.offload(10_000)
    assert bookie.get_ledger(info.ledger_id).offload.state is OffloadState.NONE


def test_offloading_again_is_a_no_op(bookie, store, settings, executor):
    written = write_closed_ledger(bookie, [b"a", b"b"])
    offloader = _offloader(bookie, store, settings, executor)
    first = offloader.offload(written.ledger_id)
    before = store.statistics()
    assert offloader.offload(written.ledger_id) == first
    assert store.statistics() == before


def test_reads_after_the_local_copy_is_dropped_go_to_s3(bookie, store, settings, executor):
    written = write_closed_ledger(bookie, random_payloads(2 * MiB, seed=4))
    _offloader(bookie, store, settings, executor).offload(written.ledger_id)
    bookie.close()
    reader = RemoteLedgerReader(store, settings)
    bookie = Bookie.open(bookie.settings, remote=reader)  # the fixture closes the first one
    assert bookie.drop_local_copy(written.ledger_id)
    entries = list(bookie.read_entries(written.ledger_id))
    assert [e.payload for e in entries] == written.payloads
    assert reader.statistics()["reads"] == len(written.payloads)
    reader.close()
    bookie.close()


def test_stats_count_every_request_kind(store: S3ObjectStore, s3_bucket: tuple[Any, str]):
    store.put_object("k", b"v")
    store.get_object("k")
    store.get_range("k", 0, 1)
    store.head_object("k")
    list(store.list_objects(""))
    store.delete_objects(["k"])
    stats = store.statistics()
    assert [stats[f"requests_{k}"] for k in ("put", "get", "head", "list", "delete")] == [
        1, 2, 1, 1, 1]
    assert stats["bytes_uploaded"] == 1 and stats["bytes_downloaded"] == 2
