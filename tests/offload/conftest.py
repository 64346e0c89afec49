"""Offload tests: a real bookie on a tmp dir and the real S3 server (``s3_bucket``).

Parts are the S3 minimum (5 MiB) so ledgers of 12-20 MiB exercise multipart
uploads of several parts and several segments while staying quick.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import crc32c
import pytest

from common.units import KiB, MiB
from ledger import Bookie, EngineSettings, OffloadInfo
from offload import ObjectStore, OffloadService, OffloadSettings, S3ObjectStore
from offload._format import encode_frame_header
from tests.conftest import small_engine_settings
from tools.local_s3 import LocalS3Server

T = 30.0  # seconds a future may take before the test fails
PASSWORD = "pw"
CHUNK = 5 * MiB


def engine_settings(data_dir: Path) -> EngineSettings:
    """Room for ledgers of tens of MiB: entries up to 256 KiB, 1 MiB batches."""
    return small_engine_settings(data_dir, journal_capacity=32 * MiB, write_cache=8 * MiB,
                                 entry_log_limit=64 * MiB)


def offload_settings(bucket: str, endpoint_url: str | None, **overrides: Any) -> OffloadSettings:
    values: dict[str, Any] = {
        "bucket": bucket, "endpoint_url": endpoint_url, "cluster": "test", "bookie_id": "b1",
        "chunk_size_bytes": CHUNK, "part_size_bytes": CHUNK, "segment_size_bytes_max": 64 * MiB,
        # Record the parts after every batch, so crashes land between records.
        "upload_concurrency": 4, "parts_record_interval_s": 0.0,
        "retry_attempts_max": 3, "retry_backoff_s_initial": 0.01,
        "retry_backoff_s_max": 0.05, "read_ahead_ttl_s": 60.0, "connect_timeout_s": 2.0,
        "read_timeout_s": 10.0}
    values.update(overrides)
    settings = OffloadSettings(**values)
    settings.check()
    return settings


@dataclass
class Written:
    ledger_id: int
    payloads: list[bytes]

    @property
    def frame_bytes(self) -> int:
        return sum(16 + len(p) for p in self.payloads)


def random_payloads(total_bytes: int, *, seed: int, size_max: int = 200 * KiB) -> list[bytes]:
    """Payloads of random sizes (0..size_max) adding up to about ``total_bytes``."""
    rng = random.Random(seed)
    payloads: list[bytes] = []
    written = 0
    while written < total_bytes:
        size = rng.choice([0, 1, 17, rng.randrange(size_max), rng.randrange(size_max),
                           rng.randrange(size_max)])
        payloads.append(rng.randbytes(size))
        written += size
    return payloads


def add_payload(ledger_id: int, entry_id: int) -> bytes:
    """The 2 KiB payload of entry ``entry_id`` added while an offload runs."""
    return hashlib.sha256(f"{ledger_id}:{entry_id}".encode()).digest() * 64


def write_closed_ledger(bookie: Bookie, payloads: list[bytes], *,
                        metadata: dict[str, str] | None = None) -> Written:
    info = bookie.create_ledger(password=PASSWORD, metadata=metadata or {"app": "test"}).result(T)
    batch: list[bytes] = []
    for payload in [*payloads, None]:
        if payload is None or sum(map(len, batch)) + len(payload) > 900 * KiB:
            if batch:
                bookie.append(info.ledger_id, [(None, batch)], password=PASSWORD)[0].result(T)
            batch = []
        if payload is not None:
            batch.append(payload)
    bookie.close_ledger(info.ledger_id, password=PASSWORD).result(T)
    return Written(info.ledger_id, payloads)


def segment_bytes(written: Written) -> bytes:
    """The one segment of ``written``, framed as the offloader frames it."""
    return b"".join(encode_frame_header(entry_id, payload, crc32c.crc32c(payload)) + payload
                    for entry_id, payload in enumerate(written.payloads))


def offload_through_service(bookie: Bookie, store: ObjectStore, settings: OffloadSettings,
                            ledger_id: int) -> OffloadInfo:
    """Request the offload from a started service, wait, stop it: the state left."""
    service = OffloadService(bookie, store, settings)
    service.start()
    try:
        service.request_offload(ledger_id)
        assert service.wait_idle(T)
    finally:
        service.stop()
    return bookie.get_ledger(ledger_id).offload


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(4) as pool:
        yield pool


@pytest.fixture
def bookie(tmp_path: Path) -> Iterator[Bookie]:
    b = Bookie.open(engine_settings(tmp_path / "data"))
    yield b
    b.close()


def endpoint_of(client: Any) -> str:
    return str(client.meta.endpoint_url)


@pytest.fixture
def settings(s3_bucket: tuple[Any, str]) -> OffloadSettings:
    client, bucket = s3_bucket
    return offload_settings(bucket, endpoint_of(client))


@pytest.fixture
def store(s3_bucket: tuple[Any, str], settings: OffloadSettings) -> S3ObjectStore:
    client, _ = s3_bucket
    return S3ObjectStore(client, settings)


def bucket_keys(client: Any, bucket: str) -> list[str]:
    keys: list[str] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        keys.extend(item["Key"] for item in page.get("Contents", []))
    return sorted(keys)


def pending_uploads(client: Any, bucket: str) -> list[str]:
    return [u["Key"] for u in client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])]


@contextmanager
def s3_down(server: LocalS3Server) -> Iterator[None]:
    """The real S3 server stopped (its daemons gone, connections refused) for the
    block, and started again afterwards even when the block fails: later tests
    share the session's server.  It comes back on the same port with its data."""
    server.stop()
    try:
        yield
    finally:
        server.start()
