"""Tiering end to end on the real radosgw: the offload service's tiering
thread uploads chunks of an open ledger while adds run, the real garbage
collector drops what is tiered and removes the entry logs that held it, so a
ledger several times the local disk budget keeps local usage bounded and
stays fully readable; at close the chunks are consolidated."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from common.units import KiB, MiB
from compaction import CompactionSettings, GarbageCollector
from ledger import Bookie, EngineSettings, LedgerState, OffloadState
from offload import OffloadService, RemoteLedgerReader, S3ObjectStore
from tests.conftest import small_engine_settings

from .conftest import (
    PASSWORD,
    T,
    bucket_keys,
    endpoint_of,
    offload_settings,
    pending_uploads,
)

CHUNK = 5 * MiB
ENTRY_LOG_LIMIT = 1 * MiB
LEDGER_BYTES = 64 * MiB
# Entry logs and RocksDB together (the journal is a fixed, preallocated ring):
# the untiered tail (under a chunk, plus the adds made between two looks,
# under another), the entry logs that hold it (reclaimed whole: the current
# one and one partly dropped), and up to a chunk of logs whose entries are
# dropped but which GC has not removed yet (its pass after the checkpoint that
# recorded the drop: seconds behind on a loaded machine).
LOCAL_BUDGET_BYTES = 3 * CHUNK + 2 * ENTRY_LOG_LIMIT
ENTRY = 64 * KiB - 16
BATCHES_BETWEEN_LOOKS = 4


def _engine(data_dir: Path) -> EngineSettings:
    # 1 MiB entry logs, a 2 MiB write cache flushed every 0.2 s: what the
    # ledger leaves on disk is the untiered tail plus a few logs.
    return replace(small_engine_settings(data_dir, journal_capacity=32 * MiB,
                                         write_cache=2 * MiB, entry_log_limit=ENTRY_LOG_LIMIT,
                                         flush_interval_s=0.2))


def _local_bytes(data_dir: Path) -> int:
    total = 0
    for sub in ("entrylogs", "index"):
        for path in (data_dir / sub).rglob("*"):
            with contextlib.suppress(FileNotFoundError):  # GC removes logs meanwhile
                total += path.stat().st_size if path.is_file() else 0
    return total


def _payload(entry_id: int) -> bytes:
    return entry_id.to_bytes(8, "big") * (ENTRY // 8)


def _dropped_up_to(bookie: Bookie, ledger_id: int, entry_id: int) -> bool:
    return bookie.get_ledger(ledger_id).local_first_entry_id >= entry_id


def _wait_for(condition: Callable[[], bool], timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


@pytest.mark.timeout(240)
def test_a_ledger_many_times_the_local_budget_stays_bounded_and_readable(
        tmp_path: Path, s3_bucket: tuple[Any, str]) -> None:
    client, bucket = s3_bucket
    settings = offload_settings(bucket, endpoint_of(client), tier_open_ledgers=True,
                                chunk_size_bytes=CHUNK,
                                tier_interval_s=0.05, deletion_lag_s=0.0,
                                segment_size_bytes_max=20 * MiB)
    store = S3ObjectStore(client, settings)
    reader = RemoteLedgerReader(store, settings)
    data_dir = tmp_path / "data"
    bookie = Bookie.open(_engine(data_dir), remote=reader)
    service = OffloadService(bookie, store, settings, reader=reader)
    gc = GarbageCollector(bookie, CompactionSettings(gc_wait_time_s=0.05),
                          disk_usage=lambda: 0.0, offload_deletion_lag_s=0.0)
    service.start()
    gc.start()
    peak = 0
    try:
        ledger_id = bookie.create_ledger(password=PASSWORD, metadata={}).result(T).ledger_id
        count = LEDGER_BYTES // (ENTRY + 16)
        for batch_number, first in enumerate(range(0, count, 16)):
            batch = [_payload(e) for e in range(first, min(count, first + 16))]
            bookie.append(ledger_id, [(None, batch)], password=PASSWORD)[0].result(T)
            peak = max(peak, _local_bytes(data_dir))
            if batch_number % BATCHES_BETWEEN_LOOKS == BATCHES_BETWEEN_LOOKS - 1:
                # A writer that S3 keeps up with: what it added a chunk ago is
                # tiered and gone from the local disk.
                _wait_for(partial(_dropped_up_to, bookie, ledger_id, first - CHUNK // ENTRY))
                peak = max(peak, _local_bytes(data_dir))
        info = bookie.get_ledger(ledger_id)
        assert info.local_first_entry_id > count * 3 // 4, info
        assert peak <= LOCAL_BUDGET_BYTES <= LEDGER_BYTES // 3, peak
        # Every entry reads back, most of them from the chunks.
        before = reader.statistics()["reads"]
        for entry_id in range(count):
            assert bookie.read_entry(ledger_id, entry_id).payload == _payload(entry_id), entry_id
        assert reader.statistics()["reads"] - before >= info.local_first_entry_id
        bookie.close_ledger(ledger_id, password=PASSWORD).result(T)
        _wait_for(lambda: bookie.get_ledger(ledger_id).offload.state is OffloadState.OFFLOADED)
        stats = service.statistics()
        assert stats["tier_chunks_uploaded"] >= count * ENTRY // settings.chunk_size_bytes - 2
        assert stats["requests_copy"] >= stats["tier_chunks_uploaded"] - 1
        _wait_for(lambda: bookie.get_ledger(ledger_id).offload.local_deleted)
        for entry_id in range(count):
            assert bookie.read_entry(ledger_id, entry_id).payload == _payload(entry_id), entry_id
    finally:
        gc.stop()
        service.stop()
        bookie.close()
    assert bookie.get_ledger(ledger_id).state is LedgerState.CLOSED
    names = [k.rsplit("/", 1)[1] for k in bucket_keys(client, bucket)]
    segments = -(-count // (settings.segment_size_bytes_max // (ENTRY + 16)))
    assert sorted(names) == ["index"] * segments + ["segment"] * segments
    assert pending_uploads(client, bucket) == []
