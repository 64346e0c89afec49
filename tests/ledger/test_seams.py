"""The engine's seams for offload/ and compaction/: offload state, dropping the
local copy of an offloaded ledger, remote reads, and index relocations.  Real
journal, entry logs and RocksDB; the remote reader is a recording stand-in
because the S3 side is tested in tests/offload."""

from __future__ import annotations

import time
from pathlib import Path

import crc32c
import pytest

from common.errors import BadRequest, NoSuchEntry, NoSuchLedger, StorageUnavailable
from entrylog import Location
from ledger import Bookie, LedgerState, OffloadInfo, OffloadState, Relocation
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
        b.add_entry(lid, f"entry-{lid}-{i}".encode(), password="pw").result(T)
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
