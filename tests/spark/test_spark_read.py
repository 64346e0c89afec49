"""Reading offloaded ledgers with Spark: bytes, pruning, the replay bug, corruption."""

from __future__ import annotations

import gc
from typing import Any

import pytest
from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual, In, IsNotNull, LessThan, Not
from pyspark.sql.types import StructType

from offload.spark import LedgerdDataSource, LedgerdPartition, spark_replays_pushed_plans
from offload.spark._source import freeze_long_lived_objects

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


def test_ledger_id_pushdown_plans_only_that_ledgers_segments(offloaded):
    big, small = list(offloaded.ledgers)[:2]
    options = {**offloaded.options, **SMALL_PARTS, "pushdown": "always"}
    everything, _ = planned(options, [])
    only_small, unsupported = planned(options, [IsNotNull(("ledger_id",)),
                                                EqualTo(("ledger_id",), small)])
    assert unsupported == []
    assert {p.planned.ledger_id for p in everything} == set(offloaded.ledgers) - {
        lid for lid, payloads in offloaded.ledgers.items() if not payloads}
    assert only_small and all(p.planned.ledger_id == small for p in only_small)
    assert all(f"/ledgers/{small}/seg-" in p.planned.segment_key for p in only_small)
    assert sum(p.planned.size_bytes for p in only_small) == sum(
        16 + len(payload) for payload in offloaded.ledgers[small])
    # The 12 MiB ledger has three segments, each cut into the nearest whole
    # number of ~2 MiB partitions.
    big_parts = [p for p in everything if p.planned.ledger_id == big]
    segment_bytes: dict[str, int] = {}
    for p in big_parts:
        segment_bytes[p.planned.segment_key] = (segment_bytes.get(p.planned.segment_key, 0)
                                                + p.planned.size_bytes)
    assert len(segment_bytes) == 3
    assert len(big_parts) == sum(max(1, round(size / (2 * 1024 * 1024)))
                                 for size in segment_bytes.values()) >= 5


def test_entry_id_pushdown_narrows_byte_ranges_through_the_index(offloaded):
    big = next(iter(offloaded.ledgers))
    options = {**offloaded.options, **SMALL_PARTS, "pushdown": "always"}
    strange = Not(EqualTo(("entry_id",), 5))
    parts, unsupported = planned(options, [EqualTo(("ledger_id",), big),
                                           GreaterThanOrEqual(("entry_id",), 100),
                                           LessThan(("entry_id",), 110), strange])
    assert unsupported == [strange]  # returned to Spark by reference
    (part,) = parts
    frame_start = sum(16 + len(p) for p in offloaded.ledgers[big][:100])
    assert part.planned.start <= frame_start < part.planned.end
    # About ten entries of up to 64 KiB plus a point stride, not the 5 MiB segment.
    assert part.planned.size_bytes < 1024 * 1024


def test_auto_pushdown_returns_every_filter_on_replaying_spark(offloaded):
    filters = [EqualTo(("ledger_id",), 1), In(("entry_id",), (1, 2))]
    parts, unsupported = planned(offloaded.options, filters)
    if spark_replays_pushed_plans():
        assert unsupported == filters
        assert {p.planned.ledger_id for p in parts} == {
            lid for lid, payloads in offloaded.ledgers.items() if payloads}
    else:
        assert unsupported == []


@pytest.mark.parametrize("pushdown", ["always", "auto"])
def test_filtered_reads_match_ground_truth(spark, offloaded, pushdown):
    big, small, _, tiny = offloaded.ledgers
    df = load(spark, {**offloaded.options, **SMALL_PARTS, "pushdown": pushdown})
    got = collected(df.where(f"ledger_id = {big} and entry_id between 40 and 60"))
    assert got == {(big, e, offloaded.ledgers[big][e]) for e in range(40, 61)}
    df = load(spark, {**offloaded.options, **SMALL_PARTS, "pushdown": pushdown})
    got = collected(df.where(f"ledger_id in ({small}, {tiny}) and entry_id > 2990"))
    assert got == {(lid, e, offloaded.ledgers[lid][e]) for lid in (small, tiny)
                   for e in range(2991, len(offloaded.ledgers[lid]))}


def test_ledgers_option_selects_ledgers(spark, offloaded):
    big, small, empty, tiny = offloaded.ledgers
    df = load(spark, {**offloaded.options, "ledgers": f"{small},{empty}-{tiny}"})
    assert collected(df) == {r for r in offloaded.rows() if r[0] != big}


def test_reused_dataframe_and_view_stay_correct_after_a_pushed_query(spark, offloaded):
    """DESIGN §7: Spark 4.2/4.3 replay a pushed plan for later queries on the same
    DataFrame or view; unfiltered and OR queries must still see every row."""
    big, small, _, tiny = offloaded.ledgers
    total = len(offloaded.rows())
    in_small = len(offloaded.ledgers[small])
    either = in_small + len(offloaded.ledgers[tiny])
    df = load(spark, {**offloaded.options, **SMALL_PARTS})
    assert df.where(f"ledger_id = {small}").count() == in_small
    assert df.count() == total
    assert df.where(f"ledger_id = {small} or ledger_id = {tiny}").count() == either
    df.createOrReplaceTempView("ledgerd_reused")
    assert spark.sql(f"select * from ledgerd_reused where ledger_id = {big}").count() == len(
        offloaded.ledgers[big])
    assert spark.sql("select count(*) from ledgerd_reused").first()[0] == total
    assert spark.sql(f"select * from ledgerd_reused where ledger_id = {small} "
                     f"or ledger_id = {tiny}").count() == either


def test_canary_spark_replays_pruned_plans_exactly_where_we_think(spark, offloaded):
    """Why ``pushdown=auto`` declines on Spark >= 4.2: with pruning forced, a reused
    DataFrame returns the pruned rows for an unfiltered query.  When this fails,
    Spark's behaviour changed: adjust ``_REPLAYING_SPARK`` in offload/spark/_source.py."""
    small = list(offloaded.ledgers)[1]
    df = load(spark, {**offloaded.options, "pushdown": "always"})
    assert df.where(f"ledger_id = {small}").count() == len(offloaded.ledgers[small])
    replayed = df.count() == len(offloaded.ledgers[small])  # the pruned plan, replayed
    assert replayed == spark_replays_pushed_plans()


def test_corrupt_payload_fails_the_task_naming_ledger_entry_and_key(spark, corrupted):
    df = load(spark, corrupted.offloaded.options)
    with pytest.raises(Exception) as failure:
        df.count()
    message = str(failure.value)
    assert f"ledger {corrupted.ledger_id} entry {corrupted.entry_id}" in message
    assert corrupted.segment_key in message
    assert "crc32c mismatch" in message


def test_planning_in_a_driver_process_never_freezes_its_gc(offloaded):
    """Workers freeze their long-lived objects (PySpark collects after every task);
    a driver's objects are not ours to freeze, even when it plans a scan itself."""
    assert planned(offloaded.options, [])[0]
    freeze_long_lived_objects()
    assert gc.get_freeze_count() == 0
