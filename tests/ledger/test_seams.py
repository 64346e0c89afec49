"""The engine's seams for offload/ and compaction/: offload state, dropping the
local copy of an offloaded ledger, remote reads, and index relocations.  Real
journal, entry logs and RocksDB; the remote reader is a recording stand-in
because the S3 side is tested in tests/offload."""

from __future__ import annotations

import time
from pathlib import Path

import crc32c
import pytest

from common.errors import (
    BadRequest,
    CorruptRecord,
    NoSuchEntry,
    NoSuchLedger,
    StorageUnavailable,
)
from entrylog import Location
from ledger import (
    Bookie,
    CheckpointStep,
    LedgerState,
    OffloadInfo,
    OffloadState,
    Relocation,
    TierPosition,
)
from tests.conftest import small_engine_settings

T = 10.0


class RecordingReader:
    """Answers from a dict and records what was asked (the S3 reader's seam)."""

    def __init__(self, entries: dict[tuple[int, int], bytes]) -> None:
        self.entries = entries
        self.calls: list[tuple[int, int, str | None]] = []

    def read_entry(self, ledger_id: int, entry_id: int,
                   info: OffloadInfo) -> tuple[bytes, int]:
        self.calls.append((ledger_id, entry_id, info.key_prefix))
        payload = self.entries[(ledger_id, entry_id)]
        return payload, crc32c.crc32c(payload)


def _closed_ledger(b: Bookie, count: int) -> int:
    lid = b.create_ledger(password="pw", metadata={}).result(T).ledger_id
    for i in range(count):
        b.append(lid, [(None, (f"entry-{lid}-{i}".encode(),))], password="pw")[0].result(T)
    b.close_ledger(lid, password="pw").result(T)
    return lid


def _offloaded(prefix: str) -> OffloadInfo:
    return OffloadInfo(state=OffloadState.OFFLOADED, bucket="b", key_prefix=prefix,
                       segment_bytes=10, offloaded_at=time.time())


def test_set_offload_survives_restart(tmp_path: Path) -> None:
    settings = small_engine_settings(tmp_path / "d", None)
    with_bookie = Bookie.open(settings)
    lid = _closed_ledger(with_bookie, 3)
    info = with_bookie.set_offload(lid, _offloaded("p/1/"))
    assert info.offload.state == OffloadState.OFFLOADED
    with_bookie.close()
    reopened = Bookie.open(settings)
    try:
        assert reopened.get_ledger(lid).offload.key_prefix == "p/1/"
        assert reopened.next_ledger_id == lid + 1
    finally:
        reopened.close()


def test_drop_local_copy_sends_reads_to_the_remote_reader(tmp_path: Path) -> None:
    settings = small_engine_settings(tmp_path / "d", None)
    b = Bookie.open(settings)
    lid = _closed_ledger(b, 5)
    keep = _closed_ledger(b, 2)
    assert b.drop_local_copy(lid) is False  # not offloaded yet
    b.set_offload(lid, _offloaded("p/x/"))
    assert b.drop_local_copy(lid) is False  # no remote reader: keep the only copy
    b.close()
    reader = RecordingReader({(lid, i): f"remote-{i}".encode() for i in range(5)})
    b = Bookie.open(settings, remote=reader)
    assert b.drop_local_copy(lid) is True
    assert b.read_entry(lid, 3).payload == b"remote-3"
    assert reader.calls == [(lid, 3, "p/x/")]
    assert b.storage.index.location_count(lid) == 0
    assert b.storage.index.location_count(keep) == 2
    stored = b.relocations.locally_stored()
    assert lid not in stored and keep in stored
    b.close()
    reopened = Bookie.open(settings)
    try:
        assert reopened.get_ledger(lid).offload.local_deleted is True
        with pytest.raises(StorageUnavailable):
            reopened.read_entry(lid, 0)
        assert reopened.read_entry(keep, 1).payload == f"entry-{keep}-1".encode()
        with pytest.raises(BadRequest):
            reopened.set_offload(lid, _offloaded("p/x/"))  # local_deleted may not be undone
    finally:
        reopened.close()


def test_a_delete_made_while_the_local_copy_is_dropped_is_not_undone(tmp_path: Path) -> None:
    """GC drops an offloaded ledger's local copy while the ledger is deleted: the
    DELETE lands during the checkpoint the drop runs first (its step hook makes
    that timing certain).  The drop then finds the ledger gone and writes no
    record: a record written after the deletion was committed would bring the
    deleted ledger back for good (the soak saw one, ledger 43)."""
    settings = small_engine_settings(tmp_path / "d", None)
    b = Bookie.open(settings)
    deleted, kept = _closed_ledger(b, 3), _closed_ledger(b, 3)
    for lid in (deleted, kept):
        b.set_offload(lid, _offloaded(f"p/{lid}/"))
    b.close()
    armed: list[Bookie] = []

    def delete_once(step: CheckpointStep) -> None:
        if armed and step is CheckpointStep.FROZEN:
            armed.pop().delete_ledger(deleted, password="pw").result(T)

    b = Bookie.open(settings, remote=RecordingReader({}), checkpoint_hook=delete_once)
    try:
        armed.append(b)
        assert b.drop_local_copy(deleted) is False
        assert not armed  # the DELETE did land inside the drop
        # The index still holds the record set_offload wrote (the deletion is
        # committed by the next checkpoint), not one written by the drop.
        indexed = {r.ledger_id: r for r in b.storage.index.ledgers()}
        assert indexed[deleted].offload.local_deleted is False
        assert b.drop_local_copy(kept) is True  # the ledger beside it is dropped as usual
        assert b.drop_local_copy(deleted) is False  # and asked again, once it is gone
        b.checkpoint()
        assert deleted not in {r.ledger_id for r in b.storage.index.ledgers()}
    finally:
        b.close()
    reopened = Bookie.open(settings)
    try:
        with pytest.raises(NoSuchLedger):
            reopened.get_ledger(deleted)
        assert reopened.get_ledger(kept).offload.local_deleted is True
    finally:
        reopened.close()


def test_a_read_racing_the_delete_of_an_offloaded_ledger_answers_no_such_ledger(
        tmp_path: Path) -> None:
    """A read finds an offloaded ledger, then its DELETE becomes durable and the
    ledger's S3 objects go before the read fetches them.  The stand-in reader
    makes that happen on every read (a real S3 only does it by timing): the
    answer is NoSuchLedger, not a corrupt record; while the ledger exists a
    missing object still is one."""
    settings = small_engine_settings(tmp_path / "d", None)
    bookie: list[Bookie] = []

    class DeletedMeanwhile(RecordingReader):
        def read_entry(self, ledger_id: int, entry_id: int,
                       info: OffloadInfo) -> tuple[bytes, int]:
            if self.entries.pop((ledger_id, entry_id), None) is not None:
                bookie[0].delete_ledger(ledger_id, password="pw").result(T)
            raise CorruptRecord(f"{info.key_prefix}seg-0/segment", 0,
                                "segment object is missing")

    b = Bookie.open(settings)
    racing, lost = _closed_ledger(b, 3), _closed_ledger(b, 3)
    for lid in (racing, lost):
        b.set_offload(lid, _offloaded(f"p/{lid}/"))
    b.close()
    b = Bookie.open(settings, remote=DeletedMeanwhile({(racing, 1): b"x"}))
    bookie.append(b)
    try:
        for lid in (racing, lost):
            assert b.drop_local_copy(lid) is True
        with pytest.raises(NoSuchLedger):
            b.read_entry(racing, 1)
        with pytest.raises(CorruptRecord):
            b.read_entry(lost, 1)
    finally:
        b.close()


def test_commit_relocations_skips_deleted_ledgers(tmp_path: Path) -> None:
    b = Bookie.open(small_engine_settings(tmp_path / "d", None))
    try:
        a = _closed_ledger(b, 2)
        gone = _closed_ledger(b, 2)
        b.checkpoint()
        moved_a = Relocation(a, 0, Location(1, 4096), Location(99, 4096))
        moved_gone = Relocation(gone, 0, Location(1, 8192), Location(99, 8192))
        b.delete_ledger(gone, password="pw").result(T)
        b.checkpoint()
        assert b.relocations.commit([moved_a, moved_gone]) == 1
        assert b.relocations.location_of(a, 0) == Location(99, 4096)
        with pytest.raises(NoSuchEntry):
            b.relocations.location_of(gone, 0)
        with pytest.raises(NoSuchLedger):
            b.set_offload(gone, _offloaded("p"))
        assert b.get_ledger(a).state == LedgerState.CLOSED
    finally:
        b.close()


def test_a_read_racing_the_drop_of_the_local_copy_answers_from_s3(tmp_path: Path) -> None:
    """GC drops the local copy between the read's "is it local?" check and its
    index lookup (the read hook runs the drop exactly there, every time): the
    read answers from the remote reader, never NoSuchEntry for an acked entry."""
    settings = small_engine_settings(tmp_path / "d", None)
    b = Bookie.open(settings)
    lid = _closed_ledger(b, 4)
    b.set_offload(lid, _offloaded("p/r/"))
    b.close()
    reader = RecordingReader({(lid, i): f"entry-{lid}-{i}".encode() for i in range(4)})
    dropped: list[bool] = []
    opened: list[Bookie] = []

    def drop_once(ledger_id: int, entry_id: int) -> None:
        if ledger_id == lid and not dropped:
            dropped.append(opened[0].drop_local_copy(lid))

    b = Bookie.open(settings, remote=reader, read_hook=drop_once)
    opened.append(b)
    try:
        assert b.read_entry(lid, 2).payload == f"entry-{lid}-2".encode()
        assert dropped == [True] and reader.calls == [(lid, 2, "p/r/")]
        assert b.read_entry(lid, 3).payload == f"entry-{lid}-3".encode()  # remote at once
        assert reader.calls[-1] == (lid, 3, "p/r/")
    finally:
        b.close()


def test_a_scan_racing_the_drop_of_the_local_copy_continues_from_s3(tmp_path: Path) -> None:
    settings = small_engine_settings(tmp_path / "d", None)
    b = Bookie.open(settings)
    lid = _closed_ledger(b, 6)
    b.set_offload(lid, _offloaded("p/s/"))
    b.close()
    reader = RecordingReader({(lid, i): f"entry-{lid}-{i}".encode() for i in range(6)})
    b = Bookie.open(settings, remote=reader)
    try:
        scan = b.scan_entries(lid)
        first = next(scan)
        assert b.drop_local_copy(lid)
        rest = list(scan)
        assert [e.payload for e in [first, *rest]] == [
            f"entry-{lid}-{i}".encode() for i in range(6)]
        # Entries read ahead before the drop are served; the rest come from S3.
        assert {entry_id for _, entry_id, _ in reader.calls} <= set(range(1, 6))
    finally:
        b.close()


def test_scan_entries_reads_what_reads_read_without_the_read_cache(tmp_path: Path) -> None:
    """A bulk scan across entry logs and the write cache gives the same entries
    as reads, and neither hits nor fills the read cache."""
    b = Bookie.open(small_engine_settings(tmp_path / "d", None))
    try:
        lid = b.create_ledger(password="pw", metadata={}).result(T).ledger_id
        payloads = [bytes([i % 251]) * (i * 997 % 20_000) for i in range(120)]
        for i, payload in enumerate(payloads):
            b.append(lid, [(None, (payload,))], password="pw")[0].result(T)
            if i == 80:
                b.checkpoint()  # the rest stays in the write cache
        before = b.storage.read_cache.statistics()
        scanned = list(b.scan_entries(lid, 3, 110))
        assert [e.entry_id for e in scanned] == list(range(3, 111))
        assert [e.payload for e in scanned] == payloads[3:111]
        assert all(e.crc32c == crc32c.crc32c(e.payload) for e in scanned)
        after = b.storage.read_cache.statistics()
        assert (after.hits, after.misses, after.entry_count) == (
            before.hits, before.misses, before.entry_count) == (0, 0, 0)
        assert [e.payload for e in b.scan_entries(lid, 100)] == payloads[100:]
        assert list(b.scan_entries(lid, 200)) == []
    finally:
        b.close()


def _open_ledger(b: Bookie, count: int, size: int = 3000) -> int:
    lid = b.create_ledger(password="pw", metadata={}).result(T).ledger_id
    for i in range(count):
        b.append(lid, [(None, (_tiered_payload(lid, i, size),))], password="pw")[0].result(T)
    return lid


def _tiered_payload(lid: int, entry_id: int, size: int = 3000) -> bytes:
    return f"{lid}-{entry_id}-".encode().ljust(size, b".")


def _at(entry_id: int) -> TierPosition:
    return TierPosition(segment_first_entry_id=0, byte_position=entry_id * 100,
                        entry_id=entry_id, entry_offset=entry_id * 90)


def test_tier_positions_are_journaled_only_grow_and_survive_a_crash(tmp_path: Path) -> None:
    settings = small_engine_settings(tmp_path / "d", None)
    b = Bookie.open(settings)
    lid = _open_ledger(b, 5)
    assert b.record_tier_position(lid, _at(3)).tier == _at(3)
    assert b.record_tier_position(lid, _at(2)).tier == _at(3)  # never backwards
    b.journal.close()  # as a crash would leave it: no checkpoint after the record
    b.storage.close()
    reopened = Bookie.open(settings)  # the TIER record comes back from the journal
    try:
        assert reopened.get_ledger(lid).tier == _at(3)
        assert reopened.replay_report is not None and reopened.replay_report.records >= 7
        reopened.record_tier_position(lid, _at(4))
    finally:
        reopened.close()
    again = Bookie.open(settings)  # and from the checkpointed record
    try:
        assert again.get_ledger(lid).tier == _at(4)
        assert again.replay_report is not None and again.replay_report.records == 0
    finally:
        again.close()


def test_dropping_tiered_entries_of_an_open_ledger(tmp_path: Path) -> None:
    """Entries below the tier position leave the local disk (their locations,
    in the checkpoint's batch that records the new first local entry); reads
    of them go to S3, later ones stay local, adds go on, and a restart keeps
    it so."""
    settings = small_engine_settings(tmp_path / "d", None)
    b = Bookie.open(settings)
    lid = _open_ledger(b, 200)  # about 600 KiB: several entry logs of 256 KiB
    b.close()
    reader = RecordingReader({(lid, i): _tiered_payload(lid, i) for i in range(200)})
    b = Bookie.open(settings, remote=reader)
    try:
        assert b.drop_local_entries({lid: 150}) == []  # nothing tiered yet
        b.record_tier_position(lid, _at(150))
        assert b.drop_local_entries({lid: 170}) == [lid]  # capped at the tier position
        assert b.drop_local_entries({lid: 150}) == []  # done already
        info = b.get_ledger(lid)
        assert info.local_first_entry_id == 150 and info.state == LedgerState.OPEN
        assert b.storage.index.location_count(lid) == 50
        assert b.relocations.local_first_entry_id(lid) == 150
        counts = b.relocations.located_entry_counts(lid)
        assert sum(counts.values()) == 50 and len(counts) >= 1
        assert b.read_entry(lid, 149).payload == _tiered_payload(lid, 149)
        assert reader.calls == [(lid, 149, None)]
        assert b.read_entry(lid, 150).payload == _tiered_payload(lid, 150)
        assert len(reader.calls) == 1  # local
        b.append(lid, [(None, (b"more",))], password="pw")[0].result(T)
        assert [e.entry_id for e in b.scan_entries(lid, 148, 151)] == [148, 149, 150, 151]
        assert {c[1] for c in reader.calls} == {148, 149}
    finally:
        b.close()
    reopened = Bookie.open(settings, remote=reader)
    try:
        info = reopened.get_ledger(lid)
        assert info.local_first_entry_id == 150 and info.last_add_confirmed == 200
        assert reopened.storage.index.location_count(lid) == 51
        assert reopened.read_entry(lid, 200).payload == b"more"
    finally:
        reopened.close()


def test_a_read_racing_the_drop_of_tiered_entries_answers_from_s3(tmp_path: Path) -> None:
    """The same race for a ledger tiered while open: GC drops its entries below
    the tier position right inside the read (the read hook), which then
    answers from the remote reader."""
    settings = small_engine_settings(tmp_path / "d", None)
    b = Bookie.open(settings)
    lid = _open_ledger(b, 20)
    b.close()
    reader = RecordingReader({(lid, i): _tiered_payload(lid, i) for i in range(20)})
    opened: list[Bookie] = []
    dropped: list[list[int]] = []

    def drop_once(ledger_id: int, entry_id: int) -> None:
        if not dropped:
            dropped.append(opened[0].drop_local_entries({ledger_id: 10}))

    b = Bookie.open(settings, remote=reader, read_hook=drop_once)
    opened.append(b)
    try:
        b.record_tier_position(lid, _at(10))
        assert b.read_entry(lid, 4).payload == _tiered_payload(lid, 4)
        assert dropped == [[lid]] and reader.calls == [(lid, 4, None)]
        assert b.read_entry(lid, 12).payload == _tiered_payload(lid, 12)  # still local
        assert len(reader.calls) == 1
    finally:
        b.close()
