"""Ledgers offloaded in the chunk layout (chunk objects consolidated into the
segment with UploadPartCopy, as offload did before the multipart path, and as
tiering of open ledgers will) stay readable, and an offload of that layout
interrupted by a crash is finished by the current offloader, which keeps a
completed segment whose ETag proves its bytes and deletes the chunks."""

from __future__ import annotations

from typing import Any

import pytest

from common.units import MiB
from ledger import Bookie, OffloadInfo, OffloadState
from offload import KeyLayout, Offloader, OffloadSettings, RemoteLedgerReader, S3ObjectStore
from offload._format import IndexBuilder, LedgerFacts, encode_index

from .conftest import (
    CHUNK,
    Written,
    bucket_keys,
    pending_uploads,
    random_payloads,
    segment_bytes,
    write_closed_ledger,
)


def offload_in_chunk_layout(bookie: Bookie, store: S3ObjectStore, settings: OffloadSettings,
                            written: Written, *, copies: int, complete: bool,
                            index: bool) -> str:
    """Segment 0 written the old way: every chunk PUT as ``chunk-{pos}``, the
    first ``copies`` copied into a multipart upload of ``segment`` (completed
    if ``complete``), then the index if ``index``; chunks are left in place."""
    layout = KeyLayout(settings)
    data = segment_bytes(written)
    key = layout.segment_key(written.ledger_id, 0)
    chunk_keys = []
    for position in range(0, len(data), CHUNK):
        chunk_keys.append(layout.chunk_key(written.ledger_id, 0, position))
        store.put_object(chunk_keys[-1], data[position:position + CHUNK])
    upload_id = store.create_multipart_upload(key)
    etags = [store.upload_part_copy(key, upload_id, n + 1, chunk_key)
             for n, chunk_key in enumerate(chunk_keys[:copies])]
    if complete:
        store.complete_multipart_upload(key, upload_id, list(enumerate(etags, start=1)))
    if index:
        ledger = bookie.get_ledger(written.ledger_id)
        builder = IndexBuilder(0)
        for entry_id, payload in enumerate(written.payloads):
            builder.add(entry_id, 16 + len(payload))
        store.put_object(layout.index_key(written.ledger_id, 0), encode_index(builder.build(
            LedgerFacts(ledger_id=ledger.ledger_id, last_entry_id=ledger.last_add_confirmed,
                        length_bytes=ledger.length, created_at=ledger.created_at,
                        closed_at=ledger.closed_at or ledger.created_at,
                        metadata=dict(ledger.metadata)))))
    return layout.ledger_prefix(written.ledger_id)


@pytest.fixture
def written(bookie: Bookie) -> Written:
    return write_closed_ledger(bookie, random_payloads(12 * MiB, seed=31))


def test_an_offload_in_the_chunk_layout_reads_back(bookie, store, settings, s3_bucket,
                                                   written, executor):
    client, bucket = s3_bucket
    prefix = offload_in_chunk_layout(bookie, store, settings, written, copies=3,
                                     complete=True, index=True)
    store.delete_objects([k for k in bucket_keys(client, bucket) if "/chunk-" in k])
    info = OffloadInfo(state=OffloadState.OFFLOADED, bucket=bucket, key_prefix=prefix,
                       segment_bytes=written.frame_bytes, offloaded_at=1.0)
    bookie.set_offload(written.ledger_id, info)
    reader = RemoteLedgerReader(store, settings)
    try:
        for entry_id, payload in enumerate(written.payloads):
            assert reader.read_entry(written.ledger_id, entry_id, info)[0] == payload
    finally:
        reader.close()
    before = store.statistics()
    offloader = Offloader(bookie, store, settings, executor=executor)
    assert offloader.offload(written.ledger_id) == info
    assert store.statistics() == before  # OFFLOADED: nothing to do


@pytest.mark.parametrize(("copies", "complete"), [(2, False), (3, True)],
                         ids=["copies-under-way", "segment-without-index"])
def test_an_interrupted_chunk_layout_offload_is_finished(bookie, store, settings, s3_bucket,
                                                         written, executor, copies: int,
                                                         complete: bool):
    client, bucket = s3_bucket
    prefix = offload_in_chunk_layout(bookie, store, settings, written, copies=copies,
                                     complete=complete, index=False)
    # A record of that version: IN_PROGRESS, no upload of its own persisted.
    bookie.set_offload(written.ledger_id, OffloadInfo(
        state=OffloadState.IN_PROGRESS, bucket=bucket, key_prefix=prefix))
    before = store.statistics()
    info = Offloader(bookie, store, settings, executor=executor).offload(written.ledger_id)
    assert info.state is OffloadState.OFFLOADED and info.segment_bytes == written.frame_bytes
    assert bucket_keys(client, bucket) == [f"{prefix}seg-0/index", f"{prefix}seg-0/segment"]
    assert pending_uploads(client, bucket) == []
    # A completed segment whose size and ETag match is kept; otherwise sent again.
    sent: dict[str, Any] = {k: store.statistics()[k] - before[k] for k in before}
    assert sent["requests_part"] == (0 if complete else 3) and sent["requests_copy"] == 0
    reader = RemoteLedgerReader(store, settings)
    try:
        for entry_id in range(0, len(written.payloads), 5):
            assert reader.read_entry(written.ledger_id, entry_id, info)[0] == (
                written.payloads[entry_id])
    finally:
        reader.close()
