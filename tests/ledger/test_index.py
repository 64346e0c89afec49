"""The RocksDB index against a real RocksDB (rocksdict)."""

import pytest

from common.errors import NoSuchEntry
from entrylog import Location
from ledger._index import LocationIndex
from ledger._ledger_record import LedgerRecord
from ledger._model import LedgerState, OffloadInfo, OffloadState
from ledger._password import PasswordHash


def record(lid: int, last: int = -1) -> LedgerRecord:
    return LedgerRecord(ledger_id=lid, state=LedgerState.OPEN,
                        password=PasswordHash(b"s" * 16, b"h" * 32), last_entry_id=last,
                        length=0, created_at=1.0, closed_at=None, metadata={"k": "v"},
                        offload=OffloadInfo(state=OffloadState.NONE))


def test_batch_is_durable_across_reopen(tmp_path):
    index = LocationIndex(tmp_path / "idx")
    batch = index.batch()
    batch.put_location(1, 0, Location(5, 4096))
    batch.put_location(1, 1, Location(5, 5000))
    batch.put_location(2, 0, Location(6, 4096))
    batch.put_ledger(record(1, 1))
    batch.set_checkpoint(12345, 3)
    index.commit(batch)
    index.close()

    index = LocationIndex(tmp_path / "idx")
    assert index.location(1, 1) == (5, 5000)
    assert index.checkpoint() == (12345, 3)
    assert [r.ledger_id for r in index.ledgers()] == [1]
    assert list(index.locations_of(1)) == [(0, 5, 4096), (1, 5, 5000)]
    assert index.location_count(2) == 1
    index.close()


def test_delete_ledger_drops_its_range_only(tmp_path):
    index = LocationIndex(tmp_path / "idx")
    batch = index.batch()
    for lid in (1, 2, 3):
        batch.put_ledger(record(lid))
        for eid in range(3):
            batch.put_location(lid, eid, Location(1, eid))
    index.commit(batch)
    batch = index.batch()
    batch.delete_ledger(2)
    index.commit(batch)
    with pytest.raises(NoSuchEntry):
        index.location(2, 0)
    assert index.location_count(1) == 3 and index.location_count(3) == 3
    assert [r.ledger_id for r in index.ledgers()] == [1, 3]
    index.close()


def test_missing_location_raises_not_sentinel(tmp_path):
    index = LocationIndex(tmp_path / "idx")
    with pytest.raises(NoSuchEntry):
        index.location(1, 0)
    assert index.checkpoint() == (0, 1)
    index.close()


def test_ledger_record_round_trip():
    r = record(7, 41)
    assert LedgerRecord.decode(r.encode()) == r


def _fill(index: LocationIndex, ledgers: range, entries: int) -> None:
    batch = index.batch()
    for lid in ledgers:
        batch.put_ledger(record(lid, entries - 1))
        for eid in range(entries):
            batch.put_location(lid, eid, Location(lid, 4096 + 64 * eid))
    index.commit(batch)


def _delete(index: LocationIndex, ledgers: list[int]) -> None:
    batch = index.batch()
    for lid in ledgers:
        batch.delete_ledger(lid)
    index.commit(batch)


def test_deleting_a_ledger_writes_one_range_tombstone_not_one_per_entry(tmp_path):
    index = LocationIndex(tmp_path / "idx")
    _fill(index, range(1, 11), entries=100)
    counted = "rocksdb.num-entries-active-mem-table"  # puts, deletes and range deletes
    before = index._locations.property_int_value(counted)
    _delete(index, [2, 3, 4])
    assert index._locations.property_int_value(counted) - before == 3
    assert index._locations.property_int_value("rocksdb.num-deletes-active-mem-table") == 0
    assert index.uncompacted_spans() == {0: (2, 4)}
    index.close()


def test_compacting_deleted_ranges_gives_the_space_back(tmp_path):
    index = LocationIndex(tmp_path / "idx")
    _fill(index, range(1, 2001), entries=20)
    full = index.size_bytes()
    _delete(index, [lid for lid in range(1, 2001) if lid % 10])
    assert index.size_bytes() >= full  # tombstones only add
    assert index.compact_deleted() is True
    assert index.size_bytes() <= full * 0.2, (full, index.size_bytes())
    assert index.uncompacted_spans() == {}
    assert index.compact_deleted() is False  # nothing deleted since
    assert [r.ledger_id for r in index.ledgers()] == list(range(10, 2001, 10))
    assert index.location_count(10) == 20 and index.location_count(11) == 0
    index.close()
    index = LocationIndex(tmp_path / "idx")  # cleared for good
    assert index.uncompacted_spans() == {}
    index.close()


def test_spans_are_persisted_with_the_deletes_and_kept_per_half(tmp_path):
    """A crash after the deleting commit and before the compaction (the index
    closed without one) leaves the spans to compact after the restart; a
    replica's span does not widen the standalone ledgers' one."""
    index = LocationIndex(tmp_path / "idx")
    _fill(index, range(1, 50), entries=5)
    _delete(index, [7, 30])
    batch = index.batch()
    batch.delete_replica(5)
    batch.delete_locations_below(40, 3)  # a tiered range dropped
    index.commit(batch)
    index.close()

    index = LocationIndex(tmp_path / "idx")
    assert index.uncompacted_spans() == {0: (7, 40), 1: (5 | 1 << 63, 5 | 1 << 63)}
    assert index.location_count(7) == 0 and index.location_count(40) == 2
    assert index.compact_deleted() is True
    assert index.uncompacted_spans() == {}
    assert index.location_count(40) == 2 and index.location_count(41) == 5
    index.close()


def test_deletes_committed_during_a_compaction_are_kept_for_the_next(tmp_path):
    """A delete that commits while ``compact_deleted`` runs (here: from inside
    the compaction, the one interleaving a test cannot otherwise pin down) is
    not forgotten when that compaction ends."""
    index = LocationIndex(tmp_path / "idx")
    _fill(index, range(1, 101), entries=5)
    _delete(index, [10, 20])
    real = index._locations

    class DeletingDuringCompaction:
        def __getattr__(self, name):
            return getattr(real, name)

        def compact_range(self, *args):
            _delete(index, [90])
            return real.compact_range(*args)

    index._locations = DeletingDuringCompaction()
    assert index.compact_deleted() is True
    index._locations = real
    assert index.uncompacted_spans() == {0: (10, 90)}
    assert index.location_count(90) == 0
    assert index.compact_deleted() is True
    assert index.uncompacted_spans() == {}
    index.close()


def _sum_property(index: LocationIndex, name: str) -> int:
    return sum(family.property_int_value(name)
               for family in (index._db, index._locations, index._ledgers, index._replicas))


def test_the_memtables_stay_within_their_share_of_the_index_memory(tmp_path):
    # 40,000 ledgers of 3 entries: about 10 MiB of memtables, which RocksDB's
    # default 64 MiB write buffer per family would keep in memory, unflushed.
    index = LocationIndex(tmp_path / "idx", memory_bytes=8 * 1024 * 1024)
    for first in range(1, 40_001, 1000):
        _fill(index, range(first, first + 1000), entries=3)
    # The write buffer manager switched memtables at their 1 MiB share (the flushes
    # themselves run in RocksDB's threads: their SSTs may still be coming).
    assert _sum_property(index, "rocksdb.cur-size-active-mem-table") <= 3 * 1024 * 1024
    assert index.location(39_999, 2) == Location(39_999, 4096 + 128)
    index.close()


def test_one_block_cache_serves_every_family_and_the_start_up_scan_leaves_it_alone(tmp_path):
    index = LocationIndex(tmp_path / "idx", memory_bytes=8 * 1024 * 1024)
    batch = index.batch()
    for lid in range(1, 20_001):
        batch.put_ledger(record(lid))
    index.commit(batch)
    index.close()
    index = LocationIndex(tmp_path / "idx", memory_bytes=8 * 1024 * 1024)
    families = (index._db, index._locations, index._ledgers, index._replicas)
    assert {f.property_int_value("rocksdb.block-cache-capacity") for f in families} == {
        8 * 1024 * 1024}
    cached = index._ledgers.property_int_value("rocksdb.block-cache-usage")
    assert sum(1 for _ in index.raw_ledgers()) == 20_000
    # The scan read every block of about 2 MiB of records and cached none.
    assert index._ledgers.property_int_value("rocksdb.block-cache-usage") - cached < 64 * 1024
    index.close()
