"""Offload tests: a real bookie on a tmp dir and the real S3 server (``s3_bucket``).

Chunks are the S3 minimum (5 MiB) so ledgers of 12-20 MiB exercise chunking,
consolidation with UploadPartCopy and several segments while staying quick.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from common.units import KiB, MiB
from ledger import Bookie, EngineSettings
from offload import OffloadSettings, S3ObjectStore
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
        "chunk_size_bytes": CHUNK, "segment_size_bytes_max": 64 * MiB,
        "upload_concurrency": 4, "retry_attempts_max": 3, "retry_backoff_s_initial": 0.01,
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


def write_closed_ledger(bookie: Bookie, payloads: list[bytes], *,
                        metadata: dict[str, str] | None = None) -> Written:
    info = bookie.create_ledger(password=PASSWORD, metadata=metadata or {"app": "test"}).result(T)
    batch: list[bytes] = []
    for payload in [*payloads, None]:
        if payload is None or sum(map(len, batch)) + len(payload) > 900 * KiB:
            if batch:
                bookie.add_entries(info.ledger_id, batch, password=PASSWORD).result(T)
            batch = []
        if payload is not None:
            batch.append(payload)
    bookie.close_ledger(info.ledger_id, password=PASSWORD).result(T)
    return Written(info.ledger_id, payloads)


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
