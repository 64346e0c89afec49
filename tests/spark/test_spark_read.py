"""Reading offloaded ledgers with Spark: bytes, pruning, the replay bug, corruption."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual, In, IsNotNull, LessThan, Not
from pyspark.sql.types import StructType

from offload.spark import LedgerdDataSource, LedgerdPartition, spark_replays_pushed_plans

SMALL_PARTS = {"partition_size": "2MiB", "read_size": "1MiB"}


def load(spark: Any, options: dict[str, str]) -> Any:
    return spark.read.format("ledgerd").options(**options).load()


def collected(df: Any) -> set[tuple[int, int, bytes]]:
    return {(r.ledger_id, r.entry_id, bytes(r.payload)) for r in df.collect()}


def planned(options: dict[str, str], filters: list[Any]) -> tuple[list[LedgerdPartition], list]:
    reader = LedgerdDataSource(dict(options)).reader(StructType())
    unsupported = list(reader.pushFilters(filters))
    return [p for p in reader.partitions() if isinstance(p, LedgerdPartition)], unsupported


def test_every_entry_reads_back_byte_for_byte(spark, offloaded):
    df = load(spark, {**offloaded.options, **SMALL_PARTS})
    assert df.schema.simpleString() == (
        "struct<ledger_id:bigint,entry_id:bigint,payload:binary,crc32c:bigint>")
    assert collected(df) == offloaded.rows()
