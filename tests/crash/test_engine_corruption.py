"""Damaged entry logs and journal tails seen through the engine: a clear error
naming the file and offset, or a correct, reported recovery; never silent loss."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from common.errors import CorruptRecord
from ledger import Bookie
from tests.conftest import HEADER_AREA_BYTES, small_engine_settings

ROOT = Path(__file__).resolve().parents[2]
T = 10.0


def filled_bookie(data_dir: Path, count: int = 60) -> tuple[int, dict[int, tuple[int, int]]]:
    """A ledger of ``count`` 1 KiB entries flushed to an entry log; their locations."""
    b = Bookie.open(small_engine_settings(data_dir, entry_log_limit=16 * 1024 * 1024))
    lid = b.create_ledger(password="", metadata={}).result(T).ledger_id
    for i in range(count):
        b.append(lid, [(None, (bytes([i % 251]) * 1024,))], password="")[0].result(T)
    b.checkpoint()
    locations = {eid: (log_id, off) for eid, log_id, off in b.storage.index.locations_of(lid)}
    b.close()
    return lid, locations


def test_truncated_entry_log_names_file_and_offset(tmp_path: Path):
    data_dir = tmp_path / "data"
    lid, locations = filled_bookie(data_dir)
    log_id, offset = locations[40]
    path = data_dir / "entrylogs" / f"{log_id:016x}.log"
    os.truncate(path, offset + 10)  # cut entry 40 mid-header
    b = Bookie.open(small_engine_settings(data_dir))
    try:
        for eid in range(40):
            assert b.read_entry(lid, eid).payload == bytes([eid % 251]) * 1024
        with pytest.raises(CorruptRecord) as info:
            b.read_entry(lid, 40)
        assert str(path) in str(info.value) and str(offset) in str(info.value)
        with pytest.raises(CorruptRecord):
            b.read_entry(lid, 59)
    finally:
        b.close()


def test_flipped_payload_byte_is_an_error_not_data(tmp_path: Path):
    data_dir = tmp_path / "data"
    lid, locations = filled_bookie(data_dir)
    log_id, offset = locations[7]
    path = data_dir / "entrylogs" / f"{log_id:016x}.log"
    with open(path, "r+b") as f:
        f.seek(offset + 28 + 100)  # inside the payload, past the 28-byte record header
        byte = f.read(1)
        f.seek(offset + 28 + 100)
        f.write(bytes([byte[0] ^ 0x40]))
    b = Bookie.open(small_engine_settings(data_dir))
    try:
        with pytest.raises(CorruptRecord) as info:
            b.read_entry(lid, 7)
        assert str(path) in str(info.value)
        assert b.read_entry(lid, 8).payload == bytes([8]) * 1024
    finally:
        b.close()


def fill_journal(data_dir: Path, count: int) -> tuple[int, int, list[int]]:
    out = subprocess.run([sys.executable, str(ROOT / "tests/crash/journal_filler.py"),
                          str(data_dir), str(count)], check=True, capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    lid, appended, *ends = map(int, out.stdout.split())
    return lid, appended, ends


def damage_ring(data_dir: Path, logical_offset: int, data: bytes) -> None:
    capacity = small_engine_settings(data_dir).journal.capacity_bytes
    with open(data_dir / "journal.dev", "r+b") as f:
        f.seek(HEADER_AREA_BYTES + logical_offset % capacity)
        f.write(data)


def test_torn_block_after_the_last_ack_is_repaired(tmp_path: Path, caplog):
    data_dir = tmp_path / "data"
    lid, appended, _ends = fill_journal(data_dir, 30)
    # A block that was being written when the process died: a record header
    # that looks right but whose body never made it.
    next_block = (appended + 4095) // 4096 * 4096
    damage_ring(data_dir, next_block, b"\xffLEDGERD-TORN" * 100)
    with caplog.at_level(logging.WARNING):
        b = Bookie.open(small_engine_settings(data_dir))
    try:
        assert b.get_ledger(lid).last_add_confirmed == 29
        for i in range(30):
            assert b.read_entry(lid, i).payload == f"entry-{i}".encode() * 50
        assert b.append(lid, [(None, (b"after",))], password="")[0].result(T).first_entry_id == 30
    finally:
        b.close()
    b = Bookie.open(small_engine_settings(data_dir))
    try:
        assert b.read_entry(lid, 30).payload == b"after"
    finally:
        b.close()


def test_damaged_acked_record_is_reported_and_ids_stay_dense(tmp_path: Path, caplog):
    data_dir = tmp_path / "data"
    lid, _appended, ends = fill_journal(data_dir, 30)
    # Scribble over the body of entry 20's record: the journal must notice (CRC),
    # say so, and the engine must keep ids dense (20.. are dropped, loudly).
    damage_ring(data_dir, ends[20] - 100, b"\x00garbage\x00" * 5)
    with caplog.at_level(logging.WARNING):
        b = Bookie.open(small_engine_settings(data_dir))
    try:
        report = b.journal.recovery_report
        assert report.holes or report.torn_tail_offset is not None
        messages = " ".join(r.getMessage() for r in caplog.records)
        assert "journal" in messages and "replay dropped entries" in messages
        assert b.get_ledger(lid).last_add_confirmed == 19
        assert [e.payload for e in b.read_entries(lid)] == [
            f"entry-{i}".encode() * 50 for i in range(20)]
        assert b.append(lid, [(None, (b"next",))], password="")[0].result(T).first_entry_id == 20
    finally:
        b.close()
