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
