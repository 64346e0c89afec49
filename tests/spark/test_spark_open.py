"""Spark reads of ledgers tiered while open (``include_open``), real Spark and
radosgw: what the segments' indexes cover, as of planning, and nothing else
(not a chunk uploaded after the index, nor entries added since); off by
default; a scan planned before consolidation reads the same rows after it."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.types import StructType

from common.units import MiB
from ledger import Bookie
from offload import KeyLayout, Offloader, OffloadSettings, S3ObjectStore, Tierer
from offload.spark import LedgerdDataSource, LedgerdPartition, read_range
from offload.spark._client import store_for
from offload.spark._options import parse_options
from tests.offload.conftest import (
    PASSWORD,
    T,
    engine_settings,
    offload_settings,
    random_payloads,
    write_closed_ledger,
)
from tools.local_s3 import LocalS3Server, delete_bucket

from .conftest import make_bucket


@dataclass
class Tiered:
    server: LocalS3Server
    bucket: str
    bookie: Bookie
    settings: OffloadSettings
    store: S3ObjectStore
    open_id: int
    open_payloads: list[bytes]
    closed_id: int
    closed_payloads: list[bytes]

    @property
    def options(self) -> dict[str, str]:
        return {"endpoint": self.server.endpoint_url, "bucket": self.bucket,
                "access_key": self.server.access_key, "secret_key": self.server.secret_key,
                "partition_size": "2MiB", "read_size": "1MiB"}

    def covered(self) -> int:
        """Entries of the open ledger in S3: below its recorded tier position."""
        return self.bookie.get_ledger(self.open_id).tier.entry_id


def _add(bookie: Bookie, ledger_id: int, payloads: list[bytes]) -> None:
    for start in range(0, len(payloads), 8):
        batch = payloads[start:start + 8]
        bookie.append(ledger_id, [(None, batch)], password=PASSWORD)[0].result(T)


def _tier(tiered: Tiered) -> int:
    with ThreadPoolExecutor(4) as pool:
        tierer = Tierer(tiered.bookie, tiered.store, tiered.settings, executor=pool)
        chunks = 0
        while done := tierer.tier(tiered.open_id):
            chunks += done
        return chunks


@pytest.fixture(scope="module")
def tiered(s3_server: LocalS3Server, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[Tiered]:
    """A ledger tiered while open (13 MiB written, about 11 MiB in chunks) and a
    closed one offloaded the usual way."""
    client, bucket = make_bucket(s3_server)
    settings = offload_settings(bucket, s3_server.endpoint_url, tier_open_ledgers=True,
                                segment_size_bytes_max=11 * MiB)
    store = S3ObjectStore(client, settings)
    bookie = Bookie.open(engine_settings(Path(tmp_path_factory.mktemp("bookie")) / "data"))
    try:
        closed = write_closed_ledger(bookie, random_payloads(2 * MiB, seed=31,
                                                             size_max=64 * 1024))
        with ThreadPoolExecutor(4) as pool:
            Offloader(bookie, store, settings, executor=pool).offload(closed.ledger_id)
        open_payloads = random_payloads(13 * MiB, seed=32, size_max=64 * 1024)
        open_id = bookie.create_ledger(password=PASSWORD, metadata={}).result(T).ledger_id
        _add(bookie, open_id, open_payloads)
        result = Tiered(s3_server, bucket, bookie, settings, store, open_id, open_payloads,
                        closed.ledger_id, closed.payloads)
        assert _tier(result) >= 2 and 0 < result.covered() < len(open_payloads)
        yield result
    finally:
        bookie.close()
        delete_bucket(client, bucket)


def _rows(df: Any) -> dict[int, dict[int, bytes]]:
    found: dict[int, dict[int, bytes]] = {}
    for row in df.collect():
        found.setdefault(row.ledger_id, {})[row.entry_id] = bytes(row.payload)
    return found


def _expected(payloads: list[bytes], count: int) -> dict[int, bytes]:
    return dict(enumerate(payloads[:count]))


def test_open_ledgers_are_read_only_when_asked(spark: Any, tiered: Tiered) -> None:
    load = spark.read.format("ledgerd").options(**tiered.options)
    assert _rows(load.load()) == {tiered.closed_id: _expected(tiered.closed_payloads, 10**9)}
    expected = {tiered.closed_id: _expected(tiered.closed_payloads, 10**9),
                tiered.open_id: _expected(tiered.open_payloads, tiered.covered())}
    assert _rows(load.option("include_open", "true").load()) == expected
    # A chunk uploaded past what the index covers (a step killed before its
    # index, or under way): never read.
    at = tiered.bookie.get_ledger(tiered.open_id).tier
    layout = KeyLayout(tiered.settings)
    tiered.store.put_object(layout.chunk_key(tiered.open_id, at.segment_first_entry_id,
                                             at.byte_position), b"\xff" * 4096)
    assert _rows(load.option("include_open", "true").load()) == expected
    with pytest.raises(Exception, match="include_open"):
        spark.read.format("ledgerd").options(**tiered.options).option(
            "include_open", "yes").load()


def _planned(options: dict[str, str]) -> list[LedgerdPartition]:
    reader = LedgerdDataSource(dict(options)).reader(StructType())
    return [p for p in reader.partitions() if isinstance(p, LedgerdPartition)]


def _read(options: dict[str, str], parts: list[LedgerdPartition]) -> dict[int, bytes]:
    store = store_for(parse_options(options).connection)
    return {entry_id: payload
            for part in parts for batch in read_range(store, part.planned)
            for entry_id, payload in zip(batch.column("entry_id").to_pylist(),
                                         batch.column("payload").to_pylist(), strict=True)}


def test_a_planned_scan_is_a_snapshot_through_tiering_and_consolidation(tiered: Tiered) -> None:
    """Planned now: the entries the indexes cover now.  A chunk uploaded after
    planning (and tiering that goes on), then the consolidation that deletes
    every chunk, change nothing about what the planned partitions read."""
    options = {**tiered.options, "include_open": "true", "ledgers": str(tiered.open_id)}
    covered = tiered.covered()
    parts = _planned(options)
    assert parts and all(p.planned.chunks for p in parts)  # read from chunks
    _add(tiered.bookie, tiered.open_id, random_payloads(6 * MiB, seed=33, size_max=64 * 1024))
    tiered.open_payloads = [e.payload for e in tiered.bookie.read_entries(tiered.open_id)]
    assert _tier(tiered) >= 1 and tiered.covered() > covered
    assert _read(options, parts) == _expected(tiered.open_payloads, covered)
    tiered.bookie.close_ledger(tiered.open_id, password=PASSWORD).result(T)
    with ThreadPoolExecutor(4) as pool:
        Offloader(tiered.bookie, tiered.store, tiered.settings,
                  executor=pool).offload(tiered.open_id)
    assert not [k for k in (i.key for i in tiered.store.list_objects("")) if "/chunk-" in k]
    assert _read(options, parts) == _expected(tiered.open_payloads, covered)  # from segments
    everything = _planned(options)
    assert not any(p.planned.chunks for p in everything)
    assert _read(options, everything) == _expected(tiered.open_payloads, 10**9)
