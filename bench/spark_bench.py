"""Spark scan of offloaded ledgers vs raw parallel ranged GETs of the same objects.

Both run in the same process against the same local S3 server (Ceph radosgw on
loopback) and the same segment objects: the limit is what boto3 ranged GETs of
``read_size`` bytes fetch with as many threads as Spark has task slots, with no
decoding at all; the Spark figure includes frame decoding, CRC32C checks and
Arrow batches through the Python worker into the JVM.
"""

from __future__ import annotations

import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ledger import Bookie
from ledger.settings import KiB, MiB
from offload import Offloader, OffloadSettings, S3ObjectStore
from offload.local_s3 import LocalS3Server

from ._harness import Row
from .engine_bench import engine_settings

READ_SIZE_BYTES = 8 * MiB


def _offload(server: LocalS3Server, data_dir: Path, bucket: str, ledger_count: int,
             ledger_bytes: int) -> OffloadSettings:
    settings = OffloadSettings(bucket=bucket, endpoint_url=server.endpoint_url,
                               chunk_size_bytes=8 * MiB, segment_size_bytes_max=64 * MiB)
    payload = os.urandom(64 * KiB)
    bookie = Bookie.open(engine_settings(data_dir, data_dir / "journal.dev"))
    with ThreadPoolExecutor(4) as pool:
        offloader = Offloader(bookie, S3ObjectStore(server.client(), settings), settings,
                              executor=pool)
        for _ in range(ledger_count):
            info = bookie.create_ledger(password="", metadata={}).result(60)
            for _ in range(ledger_bytes // (16 * len(payload))):
                bookie.add_entries(info.ledger_id, [payload] * 16, password="").result(60)
            bookie.close_ledger(info.ledger_id, password="").result(60)
            offloader.offload(info.ledger_id)
    bookie.close()
    return settings


def _raw_get_mb_s(client: Any, bucket: str, threads: int) -> tuple[float, int]:
    objects = [(o["Key"], o["Size"]) for page in client.get_paginator("list_objects_v2")
               .paginate(Bucket=bucket) for o in page.get("Contents", [])
               if o["Key"].endswith("/segment")]
    ranges = [(key, start, min(start + READ_SIZE_BYTES, size))
              for key, size in objects for start in range(0, size, READ_SIZE_BYTES)]

    def get(item: tuple[str, int, int]) -> int:
        key, start, end = item
        body = client.get_object(Bucket=bucket, Key=key, Range=f"bytes={start}-{end - 1}")
        return len(body["Body"].read())

    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        total = sum(pool.map(get, ranges))
    return total / MiB / (time.perf_counter() - started), total


def _spark_scan_mb_s(spark: Any, options: dict[str, str], total_bytes: int) -> tuple[float, int]:
    best, rows = 0.0, 0
    for _ in range(2):  # the first run also starts the Python workers
        started = time.perf_counter()
        df = spark.read.format("ledgerd").options(**options).load()
        row = df.selectExpr("count(*) as n", "sum(length(payload)) as b").first()
        best = max(best, total_bytes / MiB / (time.perf_counter() - started))
        rows = int(row["n"])
    return best, rows


def run(data_dir: Path, *, ledger_count: int = 4, ledger_bytes: int = 64 * MiB) -> list[Row]:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from offload.jobs import spark_session

    with LocalS3Server(data_dir / "s3") as server:
        client = server.client()
        client.create_bucket(Bucket="bench")
        _offload(server, data_dir / "bookie", "bench", ledger_count, ledger_bytes)
        spark = spark_session("local[*]", conf={"spark.ui.enabled": "false",
                                                "spark.ui.showConsoleProgress": "false"})
        try:
            slots = spark.sparkContext.defaultParallelism
            raw_mb_s, total = _raw_get_mb_s(client, "bench", slots)
            options = {"endpoint": server.endpoint_url, "bucket": "bench",
                       "access_key": server.access_key, "secret_key": server.secret_key,
                       "partition_size": "32MiB", "read_size": "8MiB"}
            scan_mb_s, rows = _spark_scan_mb_s(spark, options, total)
        finally:
            spark.stop()
    params = {"bytes": total, "rows": rows, "task_slots": slots}
    return [Row("raw boto3 ranged GETs (8 MiB)", params, raw_mb_s, "MB/s"),
            Row("spark scan (format ledgerd)", params, scan_mb_s, "MB/s", limit=raw_mb_s,
                limit_name="raw ranged GETs",
                extra={"rows_per_s": rows * scan_mb_s * MiB / total if total else 0.0})]
