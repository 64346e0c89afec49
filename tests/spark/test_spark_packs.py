"""Spark reads packed ledgers (OFFLOAD_PACK) from S3 like ledgers of their own:
same rows, every CRC checked, the ledgers of one pack read by a few tasks
with one ranged GET each, not one task per ledger."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import pytest
from pyspark.sql.datasource import EqualTo

from ledger import Bookie
from offload import Offloader, S3ObjectStore
from offload._packer import Packer
from offload.settings import MiB
from tests.offload.conftest import (
    engine_settings,
    offload_settings,
    random_payloads,
    write_closed_ledger,
)
from tools.local_s3 import LocalS3Server, delete_bucket

from .conftest import Offloaded, make_bucket
from .test_spark_read import collected, load, planned


@pytest.fixture(scope="module")
def packed(s3_server: LocalS3Server,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Offloaded, list[int]]]:
    """60 small ledgers in two packs (the first rewritten with half of its
    ledgers into a third), one empty, and one ledger of its own."""
    client, bucket = make_bucket(s3_server)
    settings = replace(offload_settings(bucket, s3_server.endpoint_url), pack=True,
                       pack_ledger_bytes_max=1 * MiB)
    bookie = Bookie.open(engine_settings(tmp_path_factory.mktemp("bookie")))
    try:
        small = [write_closed_ledger(bookie, random_payloads(20_000, seed=i, size_max=3000))
                 for i in range(60)]
        empty = write_closed_ledger(bookie, [])
        alone = write_closed_ledger(bookie, random_payloads(3 * MiB, seed=99))
        store = S3ObjectStore(client, settings)
        with ThreadPoolExecutor(4) as pool:
            packer = Packer(bookie, store, settings, executor=pool)
            first = packer.pack([w.ledger_id for w in small[:30]])
            packer.pack([w.ledger_id for w in [*small[30:], empty]])
            assert first is not None
            # A rewrite of the first pack whose old pack is not deleted yet: its
            # ledgers are in two packs, read once.
            packer.rewrite(first.data_key)
            Offloader(bookie, store, settings, executor=pool).offload(alone.ledger_id)
        ledgers = {w.ledger_id: w.payloads for w in [*small, empty, alone]}
        yield (Offloaded(s3_server, client, bucket, "ledgerd", ledgers),
               [w.ledger_id for w in small])
    finally:
        bookie.close()
        delete_bucket(client, bucket)


def test_packed_ledgers_read_back_byte_for_byte(spark: Any,
                                               packed: tuple[Offloaded, list[int]]) -> None:
    offloaded, _ = packed
    assert collected(load(spark, offloaded.options)) == offloaded.rows()


def test_packs_are_found_when_the_scan_is_narrowed_to_a_bookie(
        packed: tuple[Offloaded, list[int]]) -> None:
    # Narrowed to the bookie, ``ledgers/`` is listed, and packs under their own prefix.
    offloaded, _ = packed
    narrowed = {**offloaded.options, "cluster": "test", "bookie_id": "b1"}
    partitions, _ = planned(narrowed, [])
    assert {r.ledger_id for p in partitions for r in p.group} == {
        lid for lid, payloads in offloaded.ledgers.items() if payloads}


def test_a_pack_is_read_by_few_partitions(packed: tuple[Offloaded, list[int]]) -> None:
    offloaded, small = packed
    partitions, _ = planned(offloaded.options, [])
    packed_parts = [p for p in partitions if p.planned.segment_key.endswith("/data")]
    # Two live packs (the rewritten one, the second), 60 small ledgers.
    assert {r.ledger_id for p in packed_parts for r in p.group} == set(small)
    assert len(packed_parts) == 2
    only, _ = planned({**offloaded.options, "pushdown": "always"},
                      [EqualTo(("ledger_id",), small[3])])
    assert [p.planned.ledger_id for p in only] == [small[3]]
