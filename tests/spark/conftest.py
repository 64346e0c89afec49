"""Spark tests: one local SparkSession per test session, real S3 (radosgw), real bookie.

Ledgers are written through the engine (a real :class:`ledger.Bookie` on a tmp
dir) and offloaded with :class:`offload.Offloader` into one bucket per module;
the tests then read them back with Spark and compare bytes with what was written.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ledger import Bookie
from offload import Offloader, S3ObjectStore
from offload.settings import MiB
from tests.offload.conftest import (
    Written,
    engine_settings,
    offload_settings,
    random_payloads,
    write_closed_ledger,
)
from tools.local_s3 import LocalS3Server, delete_bucket


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from offload.spark import LedgerdDataSource

    session = (SparkSession.builder.master("local[2]").appName("ledgerd-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.python.filterPushdown.enabled", "true")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(LedgerdDataSource)
    yield session
    session.stop()


@dataclass
class Offloaded:
    """A bucket holding offloaded ledgers, and what was written to them."""

    server: LocalS3Server
    client: Any
    bucket: str
    prefix: str
    ledgers: dict[int, list[bytes]]

    @property
    def options(self) -> dict[str, str]:
        return {"endpoint": self.server.endpoint_url, "bucket": self.bucket,
                "prefix": self.prefix, "region": "us-east-1",
                "access_key": self.server.access_key, "secret_key": self.server.secret_key}

    def rows(self) -> set[tuple[int, int, bytes]]:
        return {(ledger_id, entry_id, payload) for ledger_id, payloads in self.ledgers.items()
                for entry_id, payload in enumerate(payloads)}


def offload_ledgers(server: LocalS3Server, data_dir: Path, bucket: str,
                    contents: list[list[bytes]], *, segment_bytes: int = 5 * MiB,
                    bookie_id: str = "b1") -> dict[int, list[bytes]]:
    client = server.client()
    settings = offload_settings(bucket, server.endpoint_url, bookie_id=bookie_id,
                                segment_size_bytes_max=segment_bytes)
    bookie = Bookie.open(engine_settings(data_dir))
    try:
        written: list[Written] = [write_closed_ledger(bookie, payloads) for payloads in contents]
        with ThreadPoolExecutor(4) as pool:
            offloader = Offloader(bookie, S3ObjectStore(client, settings), settings,
                                  executor=pool)
            for ledger in written:
                offloader.offload(ledger.ledger_id)
    finally:
        bookie.close()
    return {w.ledger_id: w.payloads for w in written}


def make_bucket(server: LocalS3Server) -> tuple[Any, str]:
    client = server.client()
    bucket = f"spark-{uuid.uuid4().hex[:20]}"
    client.create_bucket(Bucket=bucket)
    return client, bucket


@pytest.fixture(scope="module")
def offloaded(s3_server: LocalS3Server,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[Offloaded]:
    """Four ledgers: 12 MiB in three segments, 1 MiB, empty, and 3000 tiny entries."""
    client, bucket = make_bucket(s3_server)
    contents = [random_payloads(12 * MiB, seed=1, size_max=64 * 1024),
                random_payloads(1 * MiB, seed=2, size_max=8 * 1024),
                [],
                [bytes([i % 251]) * (i % 7) for i in range(3000)]]
    ledgers = offload_ledgers(s3_server, tmp_path_factory.mktemp("bookie"), bucket, contents)
    try:
        yield Offloaded(s3_server, client, bucket, "ledgerd", ledgers)
    finally:
        delete_bucket(client, bucket)


@dataclass
class Corrupted:
    offloaded: Offloaded
    ledger_id: int
    entry_id: int
    segment_key: str


@pytest.fixture(scope="module")
def corrupted(s3_server: LocalS3Server,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[Corrupted]:
    """One ledger of ten 100-byte entries whose entry 3 has a flipped payload byte."""
    client, bucket = make_bucket(s3_server)
    ledgers = offload_ledgers(s3_server, tmp_path_factory.mktemp("bookie"), bucket,
                              [[bytes([i]) * 100 for i in range(10)]])
    (ledger_id,) = ledgers
    key = f"ledgerd/test/b1/ledgers/{ledger_id}/seg-0/segment"
    data = bytearray(client.get_object(Bucket=bucket, Key=key)["Body"].read())
    data[3 * (16 + 100) + 16 + 50] ^= 0x01  # a payload byte of entry 3
    client.put_object(Bucket=bucket, Key=key, Body=bytes(data))
    try:
        yield Corrupted(Offloaded(s3_server, client, bucket, "ledgerd", ledgers),
                        ledger_id, 3, key)
    finally:
        delete_bucket(client, bucket)
