"""Closed, idle ledgers stay as their packed record after a restart (issue 28):
a start-up decodes none of them, reads leave them so, a change wakes exactly the
ledger it changes, and records a data directory of the previous release wrote
(JSON, version 1) still open, whole."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from common.errors import LedgerClosed, NoSuchLedger
from ledger import (
    Bookie,
    LedgerFilter,
    LedgerInfo,
    LedgerState,
    OffloadInfo,
    OffloadState,
    TierPosition,
)
from ledger._ledger_record import LedgerRecord, is_dormant
from ledger._password import PasswordHash, PasswordScheme
from ledger._table import LedgerTable
from tests.conftest import small_engine_settings
from tools.seed_ledgers import seed_idle_ledgers

T = 30.0
HELD = 2_000


def _table_of(bookie: Bookie):  # type: ignore[no-untyped-def]
    return bookie._table  # the table's own counts: what these tests are about


def test_a_restart_keeps_closed_idle_ledgers_as_records_until_they_change(
        tmp_path: Path) -> None:
    settings = small_engine_settings(tmp_path / "data")
    ids = seed_idle_ledgers(settings, HELD, payload=b"p" * 10)
    bookie = Bookie.open(settings)
    try:
        table = _table_of(bookie)
        assert len(table) == HELD and table.dormant_count() == HELD
        # Reads, listings and lookups leave them dormant ...
        assert bookie.read_entry(ids[5], 0).payload == b"p" * 10
        assert [i.ledger_id for i in bookie.list_ledgers(limit=50)[0]] == ids[:50]
        info = bookie.get_ledger(ids[7])
        assert info.state == LedgerState.CLOSED and info.last_add_confirmed == 0
        assert table.dormant_count() == HELD
        # ... a change wakes the one ledger it changes, and a deletion removes it.
        bookie.set_offload(ids[9], OffloadInfo(state=OffloadState.PENDING))
        bookie.delete_ledger(ids[11], password="").result(T)
        assert table.dormant_count() == HELD - 2 and len(table) == HELD - 1
        with pytest.raises(NoSuchLedger):
            bookie.get_ledger(ids[11])
        bookie.checkpoint()
        changed = bookie.get_ledger(ids[9])
    finally:
        bookie.close()
    bookie = Bookie.open(settings)
    try:
        assert bookie.get_ledger(ids[9]) == changed
        with pytest.raises(NoSuchLedger):
            bookie.get_ledger(ids[11])
        # The changed one is not dormant (its offload state is set); the rest are.
        assert _table_of(bookie).dormant_count() == HELD - 2
    finally:
        bookie.close()


def test_an_open_ledger_is_never_dormant_and_its_adds_survive(tmp_path: Path) -> None:
    settings = small_engine_settings(tmp_path / "data")
    bookie = Bookie.open(settings)
    try:
        lid = bookie.create_ledger(password="pw", metadata={"a": "b"}).result(T).ledger_id
        bookie.append(lid, [(None, (b"one",))], password="pw")[0].result(T)
    finally:
        bookie.close()
    bookie = Bookie.open(settings)
    try:
        assert _table_of(bookie).dormant_count() == 0
        bookie.append(lid, [(None, (b"two",))], password="pw")[0].result(T)
        bookie.close_ledger(lid, password="pw").result(T)
        assert [e.payload for e in bookie.read_entries(lid, 0, None, None)] == [b"one", b"two"]
    finally:
        bookie.close()


def _version_1(record: LedgerRecord) -> bytes:
    """A record as the release before the packed format wrote it (its encoder,
    kept here to make such records)."""
    doc = {"v": 1, "id": record.ledger_id, "state": record.state.value,
           "salt": record.password.salt.hex(), "hash": record.password.digest.hex(),
           "last": record.last_entry_id, "length": record.length,
           "created": record.created_at, "closed": record.closed_at,
           "meta": record.metadata,
           "offload": {"state": record.offload.state.value, "bucket": record.offload.bucket,
                       "key_prefix": record.offload.key_prefix,
                       "segment_bytes": record.offload.segment_bytes,
                       "offloaded_at": record.offload.offloaded_at,
                       "local_deleted": record.offload.local_deleted,
                       "error": record.offload.error, "upload_key": None, "upload_id": None,
                       "upload_parts": [], "failures": 0, "retry_at": None}}
    if record.password.scheme != PasswordScheme.SCRYPT:
        doc["pw_scheme"] = int(record.password.scheme)
    if record.tier != TierPosition():
        doc["tier"] = {"segment_first_entry_id": record.tier.segment_first_entry_id,
                       "byte_position": record.tier.byte_position,
                       "entry_id": record.tier.entry_id,
                       "entry_offset": record.tier.entry_offset,
                       "segment_start_bytes": record.tier.segment_start_bytes}
    if record.local_first_entry_id:
        doc["local_first"] = record.local_first_entry_id
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


class _Stored:
    """What ``IndexBatch.put_ledger`` reads of a record, already encoded."""

    def __init__(self, ledger_id: int, raw: bytes) -> None:
        self.ledger_id = ledger_id
        self._raw = raw

    def encode(self) -> bytes:
        return self._raw


RECORDS = [
    LedgerRecord(ledger_id=3, state=LedgerState.OPEN,
                 password=PasswordHash(b"s" * 16, b"d" * 32, PasswordScheme.KEYED_BLAKE2B),
                 last_entry_id=-1, length=0, created_at=1.5, closed_at=None),
    LedgerRecord(ledger_id=2**40, state=LedgerState.CLOSED,
                 password=PasswordHash(b"t" * 16, b"e" * 32), last_entry_id=41,
                 length=4200, created_at=2.0, closed_at=3.25,
                 metadata={"topic": "persistent://t/n/x", "ü": "é"},
                 offload=OffloadInfo(state=OffloadState.OFFLOADED, bucket="b",
                                     key_prefix="p/", segment_bytes=99, offloaded_at=4.0,
                                     local_deleted=True),
                 tier=TierPosition(segment_first_entry_id=1, byte_position=2, entry_id=3,
                                   entry_offset=4, segment_start_bytes=5),
                 local_first_entry_id=3),
    LedgerRecord(ledger_id=9, state=LedgerState.FENCED,
                 password=PasswordHash(b"u" * 16, b"f" * 32, PasswordScheme.KEYED_BLAKE2B),
                 last_entry_id=0, length=1, created_at=0.0, closed_at=None),
]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.state.value)
def test_both_formats_decode_to_the_same_record(record: LedgerRecord) -> None:
    packed = record.encode()
    assert LedgerRecord.decode(packed) == record
    assert LedgerRecord.decode(_version_1(record)) == record
    assert len(packed) < len(_version_1(record))
    assert not is_dormant(packed) and not is_dormant(_version_1(record))


def test_only_a_packed_closed_idle_record_is_dormant() -> None:
    plain = LedgerRecord(ledger_id=5, state=LedgerState.CLOSED,
                         password=PasswordHash(b"s" * 16, b"d" * 32), last_entry_id=2,
                         length=3, created_at=1.0, closed_at=2.0, metadata={"m": "1"})
    assert is_dormant(plain.encode())
    assert len(plain.encode()) < 130
    assert not is_dormant(_version_1(plain))


def test_a_data_directory_of_json_records_opens_whole(tmp_path: Path) -> None:
    """Records written by the previous release (version 1 JSON) open as they
    were; the next change of a ledger writes it packed."""
    settings = small_engine_settings(tmp_path / "data")
    bookie = Bookie.open(settings)
    try:
        closed = bookie.create_ledger(password="pw", metadata={"x": "y"}).result(T).ledger_id
        bookie.append(closed, [(None, (b"a",))], password="pw")[0].result(T)
        bookie.close_ledger(closed, password="pw").result(T)
        open_id = bookie.create_ledger(password="pw2", metadata={}).result(T).ledger_id
        bookie.append(open_id, [(None, (b"b",))], password="pw2")[0].result(T)
        bookie.checkpoint()
        index = bookie.storage.index
        before = {r.ledger_id: r for r in index.ledgers()}
        batch = index.batch()
        for record in before.values():  # rewrite them as the old release stored them
            batch.put_ledger(_Stored(record.ledger_id, _version_1(record)))  # type: ignore[arg-type]
        index.commit(batch)
        infos = {lid: bookie.get_ledger(lid) for lid in before}
    finally:
        bookie.close()
    bookie = Bookie.open(settings)
    try:
        assert {lid: bookie.get_ledger(lid) for lid in before} == infos
        assert _table_of(bookie).dormant_count() == 0  # JSON records are decoded
        assert bookie.read_entry(closed, 0).payload == b"a"
        bookie.append(open_id, [(None, (b"c",))], password="pw2")[0].result(T)
        bookie.checkpoint()
        raw = dict(bookie.storage.index.raw_ledgers())
        assert raw[open_id][:1] == b"\x02" and raw[closed][:1] == b"{"
    finally:
        bookie.close()


def _listing_records() -> list[LedgerRecord]:
    metadatas = [{}, {"topic": "rare"}, {"topic": "t1"}, {"ü": "é", "topic": "rare"},
                 # the pair's JSON inside a value: not the pair
                 {"note": '"topic":"rare"'}, {"xtopic": "rare"}, {"topic": "rarer"}]
    records = []
    for i in range(1, 300):
        state = (LedgerState.CLOSED, LedgerState.CLOSED, LedgerState.OPEN)[i % 3]
        # Offloaded, some with their local copy gone (those are dormant too).
        offload = OffloadInfo(state=OffloadState.OFFLOADED, bucket="b", key_prefix="p/",
                              offloaded_at=1.0, local_deleted=i % 2 == 0) \
            if i % 11 == 0 else OffloadInfo()
        records.append(LedgerRecord(
            ledger_id=i, state=state, password=PasswordHash(b"s" * 16, b"d" * 32),
            last_entry_id=i % 4 - 1, length=i, created_at=float(i),
            closed_at=float(i + 1) if state == LedgerState.CLOSED else None,
            metadata=metadatas[i % len(metadatas)], offload=offload))
    return records


@pytest.mark.parametrize("where", [
    LedgerFilter(), LedgerFilter(state=LedgerState.CLOSED), LedgerFilter(state=LedgerState.OPEN),
    LedgerFilter(metadata={"topic": "rare"}), LedgerFilter(metadata={"ü": "é"}),
    LedgerFilter(state=LedgerState.CLOSED, metadata={"topic": "rare"}),
    LedgerFilter(offload_state=OffloadState.NONE),
    LedgerFilter(offload_state=OffloadState.OFFLOADED),
], ids=repr)
def test_a_listing_of_dormant_records_is_the_listing_of_the_same_ledgers_live(
        where: LedgerFilter) -> None:
    records = _listing_records()
    packed = LedgerTable([(r.ledger_id, r.encode()) for r in records],
                         next_ledger_id=300, ledger_count_max=1000)
    live = LedgerTable([(r.ledger_id, _version_1(r)) for r in records],
                       next_ledger_id=300, ledger_count_max=1000)
    assert packed.dormant_count() > 100 and live.dormant_count() == 0
    gone = [r.ledger_id for r in records if r.offload.local_deleted]
    assert gone and not any(packed.is_local(i) for i in gone)
    assert all(packed.is_local(r.ledger_id) for r in records if r.ledger_id not in gone)

    def every_page(table: LedgerTable) -> list[LedgerInfo]:
        found, after = [], None
        while True:
            page, after = table.page(state=None, after=after, limit=7, where=where)
            found += page
            if after is None:
                return found

    assert every_page(packed) == every_page(live)
    assert every_page(packed)  # each filter matches some


def test_a_ledger_closed_and_checkpointed_goes_dormant_and_wakes_whole(tmp_path: Path) -> None:
    settings = small_engine_settings(tmp_path / "data")
    bookie = Bookie.open(settings)
    try:
        table = _table_of(bookie)
        closed = bookie.create_ledger(password="pw", metadata={"t": "1"}).result(T).ledger_id
        for n in range(3):
            bookie.append(closed, [(None, (b"%d" % n,))], password="pw")[0].result(T)
        before = bookie.close_ledger(closed, password="pw").result(T)
        still_open = bookie.create_ledger(password="pw", metadata={}).result(T).ledger_id
        bookie.append(still_open, [(None, (b"x",))], password="pw")[0].result(T)
        assert table.dormant_count() == 0
        bookie.checkpoint()
        assert table.dormant_count() == 1  # the closed one, not the open one
        assert bookie.get_ledger(closed) == before
        assert [e.payload for e in bookie.read_entries(closed, 0, None, None)] == \
            [b"0", b"1", b"2"]
        assert table.dormant_count() == 1
        with pytest.raises(LedgerClosed):
            bookie.append(closed, [(None, (b"late",))], password="pw")[0].result(T)
        bookie.delete_ledger(closed, password="pw").result(T)  # wakes it, then removes it
        assert table.dormant_count() == 0
        with pytest.raises(NoSuchLedger):
            bookie.get_ledger(closed)
    finally:
        bookie.close()
