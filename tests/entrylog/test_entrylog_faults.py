"""EntryLogStore through the device seam: zero-copy writes, full disks, failed syncs.

Each failure here is one a real disk produces but cannot be made to produce on
demand (an ENOSPC at the map write of a rotation, an EIO from fdatasync), so it
is injected through ``FaultyFileSystem``; the real full disk is in
``test_entrylog_disk_full.py``.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Sequence
from pathlib import Path

import crc32c
import pytest

from common.errors import CorruptRecord, DeviceBroken, DiskFull
from common.units import KiB
from entrylog import (
    EntryLogSettings,
    EntryLogStore,
    LedgerUsage,
    Location,
)
from entrylog import _format as fmt
from entrylog._device import IOV_MAX, BytesLike
from entrylog.testing import FaultyFileSystem, MemoryFileSystem
from tests.entrylog._data import append as _append
from tests.entrylog._data import payload as _payload

DIRECTORY = Path("/data/entrylogs")


def _settings(limit: int = 64 * KiB, buffer: int = 16 * KiB) -> EntryLogSettings:
    return EntryLogSettings(directory=DIRECTORY, size_bytes_limit=limit,
                            write_buffer_size_bytes=buffer)


def _reads_back(store: EntryLogStore, written: dict[tuple[int, int], Location],
                size: int = 1000) -> None:
    for (ledger_id, entry_id), location in written.items():
        assert store.read(location, ledger_id, entry_id)[0] == _payload(ledger_id, entry_id, size)


def _header(fs: MemoryFileSystem, store: EntryLogStore, log_id: int) -> fmt.FileHeader:
    raw = fs.file_bytes(store.path_of(log_id))
    return fmt.decode_file_header(raw, path=str(store.path_of(log_id)))


def _five_synced_one_pending(
        fs: MemoryFileSystem) -> tuple[EntryLogStore, dict[tuple[int, int], Location]]:
    store = EntryLogStore(_settings(), file_system=fs)
    synced = {(1, e): _append(store, 1, e) for e in range(5)}
    store.sync()
    _append(store, 1, 5)
    return store, synced


class RecordingFileSystem(MemoryFileSystem):
    """Remembers every buffer list handed to ``pwritev``; may cap each write."""

    def __init__(self, write_bytes_max: int | None = None) -> None:
        super().__init__()
        self.calls: list[list[BytesLike]] = []
        self._write_bytes_max = write_bytes_max

    def pwritev(self, handle: int, buffers: Sequence[BytesLike], offset: int) -> int:
        self.calls.append(list(buffers))
        if self._write_bytes_max is None:
            return super().pwritev(handle, buffers, offset)
        taken: list[BytesLike] = []  # What the kernel takes of a write cut short.
        room = self._write_bytes_max
        for buffer in buffers:
            if room == 0:
                break
            taken.append(buffer[:room])
            room -= len(taken[-1])
        return super().pwritev(handle, taken, offset)


class HeaderWriteFails(FaultyFileSystem):
    """ENOSPC on the next rewrite of a file header (offset 0, 4096 bytes)."""

    fail_header = False

    def pwritev(self, handle: int, buffers: Sequence[BytesLike], offset: int) -> int:
        if self.fail_header and offset == 0 and len(buffers[0]) == fmt.HEADER_SIZE_BYTES:
            self.fail_header = False
            self.fail_next("pwritev", errno.ENOSPC)
        return super().pwritev(handle, buffers, offset)


# --- zero-copy appends ------------------------------------------------------------


def test_payload_objects_reach_pwritev_uncopied() -> None:
    fs = RecordingFileSystem()
    store = EntryLogStore(_settings(), file_system=fs)
    payloads = [_payload(1, e, 3000) for e in range(10)]
    for entry_id, payload in enumerate(payloads):
        store.append(1, entry_id, payload, crc32c.crc32c(payload))
    store.sync()
    handed = [b for call in fs.calls for b in call]
    for payload in payloads:
        assert any(b is payload for b in handed), "payload copied before the write"
    record_headers = [b for b in handed if not any(b is p for p in payloads)]
    assert fmt.RECORD_HEADER_SIZE_BYTES in {len(b) for b in record_headers}
    store.close()


def test_writes_go_iov_max_buffers_at_a_time_and_pending_records_read_back() -> None:
    fs = RecordingFileSystem()
    store = EntryLogStore(_settings(limit=1024 * KiB, buffer=1024 * KiB), file_system=fs)
    count = IOV_MAX + 100  # Two buffers per record: more than two pwritev calls.
    written = {(2, e): _append(store, 2, e, size=50) for e in range(count)}
    _reads_back(store, written, size=50)  # Still pending: served from memory.
    store.sync()
    data_calls = [c for c in fs.calls if len(c) > 1]
    assert len(data_calls) >= 3
    assert all(len(c) <= IOV_MAX for c in fs.calls)
    _reads_back(store, written, size=50)
    store.close()
    reopened = EntryLogStore(_settings(limit=1024 * KiB), file_system=fs)
    _reads_back(reopened, written, size=50)
    assert reopened.ledgers_map(1) == {2: LedgerUsage(count, count * 78)}
    reopened.close()


def test_short_writes_are_resumed_and_the_bytes_are_the_same() -> None:
    whole, short = RecordingFileSystem(), RecordingFileSystem(write_bytes_max=777)
    for fs in (whole, short):
        store = EntryLogStore(_settings(buffer=4 * KiB), file_system=fs)
        for entry_id in range(120):
            _append(store, entry_id % 3, entry_id, size=300 + entry_id)
            if entry_id % 40 == 39:
                store.sync()
        store.close()
    assert len(short.calls) > 2 * len(whole.calls)  # Many writes were cut short.
    names = whole.list_directory(DIRECTORY)
    assert names == short.list_directory(DIRECTORY)
    for name in names:
        assert whole.file_bytes(DIRECTORY / name) == short.file_bytes(DIRECTORY / name)


def test_records_on_disk_are_the_format_table() -> None:
    fs = MemoryFileSystem()
    store = EntryLogStore(_settings(), file_system=fs)
    location = store.append(7, 3, b"abc", 0x364B3FB7)
    store.sync()
    raw = fs.file_bytes(store.path_of(location.log_id))
    assert raw[location.offset:location.offset + 31] == fmt.encode_record(7, 3, b"abc",
                                                                          0x364B3FB7)
    store.close()


def test_a_wrong_crc_is_stored_as_given_and_reads_refuse_it() -> None:
    fs = MemoryFileSystem()
    store = EntryLogStore(_settings(), file_system=fs)
    payload = _payload(1, 0)
    location = store.append(1, 0, payload, crc32c.crc32c(payload) ^ 1)  # Not recomputed.
    for _ in range(2):  # Pending, then on the file.
        with pytest.raises(CorruptRecord, match="payload crc32c mismatch") as info:
            store.read(location, 1, 0)
        assert (info.value.path, info.value.offset) == (str(store.path_of(1)), location.offset)
        store.sync()
    store.close()


# --- a full disk rolls back and goes on -----------------------------------------


def test_enospc_on_a_buffer_write_rolls_back_to_the_last_sync() -> None:
    fs = FaultyFileSystem()
    store = EntryLogStore(_settings(buffer=4 * KiB), file_system=fs)
    synced = {(1, e): _append(store, 1, e) for e in range(10)}
    store.sync()
    path = store.path_of(store.current_log_id)
    synced_size = fs.size_bytes(path)
    void = [_append(store, 1, e) for e in range(10, 14)]  # Written to the kernel already.
    assert fs.size_bytes(path) > synced_size
    fs.fail_next("pwritev", errno.ENOSPC)
    with pytest.raises(DiskFull, match="No space left"):
        for entry_id in range(14, 20):
            _append(store, 1, entry_id)
    assert fs.size_bytes(path) == synced_size  # The torn tail is gone.
    assert store.statistics().disk_full_count == 1
    assert store.ledgers_map(store.current_log_id) == {1: LedgerUsage(10, 10 * 1028)}
    _reads_back(store, synced)
    for entry_id, location in enumerate(void, start=10):
        with pytest.raises(CorruptRecord):
            store.read(location, 1, entry_id)

    # Still writable: the appends are made again, and stick.
    again = {(1, e): _append(store, 1, e) for e in range(10, 20)}
    store.sync()
    assert again[(1, 10)] == void[0]  # The rolled-back space is reused.
    store.close()
    reopened = EntryLogStore(_settings(), file_system=fs)
    _reads_back(reopened, synced | again)
    assert reopened.ledgers_map(1) == {1: LedgerUsage(20, 20 * 1028)}
    reopened.close()


def test_enospc_in_sync_rolls_back_and_the_next_sync_succeeds() -> None:
    fs = FaultyFileSystem()
    store, synced = _five_synced_one_pending(fs)
    fs.fail_next("pwritev", errno.ENOSPC)
    with pytest.raises(DiskFull):
        store.sync()
    store.sync()  # Nothing pending any more: fine.
    more = {(1, e): _append(store, 1, e) for e in range(5, 8)}
    store.sync()
    _reads_back(store, synced | more)
    store.close()


def test_enospc_on_the_map_of_a_rotation_keeps_the_log_current() -> None:
    fs = FaultyFileSystem()
    store = EntryLogStore(_settings(), file_system=fs)
    # 59 records of 1028 bytes fill log 1; the 60th (with the map) would pass 64 KiB.
    written = {(1, e): _append(store, 1, e) for e in range(59)}
    store.sync()
    size = fs.size_bytes(store.path_of(1))
    fs.fail_next("pwritev", errno.ENOSPC)  # Nothing pending: the next write is the map.
    with pytest.raises(DiskFull):
        _append(store, 1, 59)
    assert store.current_log_id == 1 and store.flushed_log_ids() == []
    assert not _header(fs, store, 1).sealed
    assert fs.size_bytes(store.path_of(1)) == size
    _reads_back(store, written)
    later = _append(store, 1, 59)  # Rotates now.
    assert later.log_id == 2 and _header(fs, store, 1).sealed
    assert store.ledgers_map(1) == {1: LedgerUsage(59, 59 * 1028)}
    store.close()


def test_enospc_on_the_sealed_header_puts_the_unsealed_header_back() -> None:
    fs = HeaderWriteFails()
    store = EntryLogStore(_settings(), file_system=fs)
    written = {(1, e): _append(store, 1, e) for e in range(3)}
    store.sync()
    fs.fail_header = True  # The map goes to the end, then the header fails.
    with pytest.raises(DiskFull):
        store.close()
    assert not _header(fs, store, 1).sealed
    assert fs.size_bytes(store.path_of(1)) == fmt.HEADER_SIZE_BYTES + 3 * 1028  # Map gone.
    reopened = EntryLogStore(_settings(), file_system=fs)
    assert _header(fs, reopened, 1).sealed
    _reads_back(reopened, written)
    assert reopened.ledgers_map(1) == {1: LedgerUsage(3, 3 * 1028)}
    reopened.close()


def test_enospc_creating_the_next_log_leaves_no_current_log_until_it_works() -> None:
    fs = FaultyFileSystem()
    store = EntryLogStore(_settings(), file_system=fs)
    written = {}
    entry_id = 0
    fs.fail_next("create", errno.ENOSPC)
    with pytest.raises(DiskFull):
        while True:
            written[(1, entry_id)] = _append(store, 1, entry_id)
            entry_id += 1
    assert store.flushed_log_ids() == [1] and _header(fs, store, 1).sealed
    assert store.current_log_id == 2
    assert fs.list_directory(DIRECTORY) == ["0000000000000001.log"]
    store.sync()  # Log 1 was synced by its seal; no log to sync.
    _reads_back(store, written)
    assert _append(store, 1, entry_id).log_id == 2
    store.close()


def test_a_filling_disk_fails_appends_with_disk_full_until_logs_are_removed() -> None:
    fs = FaultyFileSystem(capacity_bytes=160 * KiB)
    store = EntryLogStore(_settings(buffer=4 * KiB), file_system=fs)
    synced: dict[tuple[int, int], Location] = {}
    pending: dict[tuple[int, int], Location] = {}
    with pytest.raises(DiskFull):
        for entry_id in range(1000):
            pending[(1, entry_id)] = _append(store, 1, entry_id)
            if entry_id % 8 == 7:
                store.sync()
                synced |= pending
                pending = {}
    assert ("pwritev", errno.ENOSPC) in {(op, n) for op, n, _ in fs.failures}
    _reads_back(store, synced)
    with pytest.raises(DiskFull):  # Still full (the rollback freed only a block).
        for entry_id in range(10):
            _append(store, 2, entry_id)
        store.sync()
    for log_id in store.flushed_log_ids():
        store.remove(log_id)
        synced = {k: loc for k, loc in synced.items() if loc.log_id != log_id}
    more = {(2, e): _append(store, 2, e) for e in range(20)}
    store.sync()
    _reads_back(store, synced | more)
    store.close()


def test_open_on_a_full_disk_then_remove_frees_space_and_ids_never_repeat() -> None:
    fs = FaultyFileSystem()
    store = EntryLogStore(_settings(), file_system=fs)
    written = {(1, e): _append(store, 1, e) for e in range(150)}
    store.close()
    highest = store.current_log_id
    fs.capacity_bytes = fs.used_bytes()  # Not one block more.

    reopened = EntryLogStore(_settings(), file_system=fs)
    assert reopened.current_log_id == highest + 1
    assert f"{highest + 1:016x}.log" not in fs.list_directory(DIRECTORY)
    _reads_back(reopened, written)
    with pytest.raises(DiskFull):
        _append(reopened, 2, 0)
    # GC removes the highest log: its name stays, empty, so its id is not reused.
    reopened.remove(highest)
    assert fs.size_bytes(reopened.path_of(highest)) == 0
    assert highest not in reopened.log_ids()
    location = _append(reopened, 2, 0)
    reopened.sync()
    assert location.log_id == highest + 1
    reopened.close()

    again = EntryLogStore(_settings(), file_system=fs)
    assert again.current_log_id == highest + 2
    assert f"{highest:016x}.log" not in fs.list_directory(DIRECTORY)  # Placeholder dropped.
    assert again.read(location, 2, 0)[0] == _payload(2, 0)
    again.close()


def test_seal_unsealed_on_a_full_disk_leaves_the_log_for_later(
        caplog: pytest.LogCaptureFixture) -> None:
    fs = FaultyFileSystem()
    store = EntryLogStore(_settings(), file_system=fs)
    # Records of 1024 bytes: the log ends on a block boundary, the map needs a block.
    written = {(1, e): _append(store, 1, e, size=996) for e in range(40)}
    store.sync()
    fs.crash()
    fs.restart()
    fs.capacity_bytes = fs.used_bytes()  # Not one block more.
    with caplog.at_level(logging.WARNING, logger="entrylog"):
        reopened = EntryLogStore(_settings(), file_system=fs)
    assert "left unsealed for now" in caplog.text
    assert not _header(fs, reopened, 1).sealed
    assert fs.size_bytes(reopened.path_of(1)) == fmt.HEADER_SIZE_BYTES + 40 * 1024
    _reads_back(reopened, written, size=996)
    assert reopened.ledgers_map(1) == {1: LedgerUsage(40, 40 * 1024)}  # By scanning.
    reopened.close()
    fs.capacity_bytes = None
    last = EntryLogStore(_settings(), file_system=fs)
    assert _header(fs, last, 1).sealed
    last.close()


def test_disk_full_on_close_is_reported_and_handles_are_closed() -> None:
    fs = FaultyFileSystem()
    store, synced = _five_synced_one_pending(fs)
    fs.fail_next("pwritev", errno.ENOSPC)
    with pytest.raises(DiskFull):
        store.close()
    assert fs.open_handle_count() == 0
    reopened = EntryLogStore(_settings(), file_system=fs)
    _reads_back(reopened, synced)
    assert reopened.ledgers_map(1) == {1: LedgerUsage(5, 5 * 1028)}
    reopened.close()


# --- every other failure is fatal for writes ---------------------------------------


@pytest.mark.parametrize(("operation", "number"), [
    ("fdatasync", errno.EIO), ("fdatasync", errno.ENOSPC), ("pwritev", errno.EIO),
])
def test_a_failed_sync_or_write_stops_all_writes(operation: str, number: int) -> None:
    fs = FaultyFileSystem()
    store, synced = _five_synced_one_pending(fs)
    fs.fail_next(operation, number)
    with pytest.raises(DeviceBroken, match=operation.replace("pwritev", "write")):
        store.sync()
    # Never retried: after a failed fdatasync a retry can succeed over lost pages.
    for attempt in (store.sync, lambda: _append(store, 1, 6)):
        with pytest.raises(DeviceBroken, match="refused after an earlier failure"):
            attempt()
    assert [op for op, _, _ in fs.failures] == [operation]
    _reads_back(store, synced)  # Reads go on.
    store.close()  # Does not try to seal.
    assert not _header(fs, store, 1).sealed


def test_a_failed_rollback_is_fatal() -> None:
    fs = FaultyFileSystem()
    store = EntryLogStore(_settings(), file_system=fs)
    _append(store, 1, 0)
    fs.fail_next("pwritev", errno.ENOSPC)
    fs.fail_next("truncate", errno.EIO)
    with pytest.raises(DeviceBroken, match="truncate"):
        store.sync()
    with pytest.raises(DeviceBroken, match="refused"):
        _append(store, 1, 1)
    store.close()


def test_a_failed_directory_fsync_on_remove_stops_writes() -> None:
    fs = FaultyFileSystem()
    store = EntryLogStore(_settings(), file_system=fs)
    for entry_id in range(100):
        _append(store, 1, entry_id)
    victim = store.flushed_log_ids()[0]
    fs.fail_next("sync_directory")
    with pytest.raises(DeviceBroken, match="directory fsync"):
        store.remove(victim)
    with pytest.raises(DeviceBroken, match="refused"):
        _append(store, 1, 100)
    store.close()


def test_a_failed_read_is_reported_and_writes_go_on() -> None:
    fs = FaultyFileSystem()
    store = EntryLogStore(_settings(), file_system=fs)
    location = _append(store, 1, 0)
    store.sync()
    fs.fail_next("pread")
    with pytest.raises(DeviceBroken, match="read"):
        store.read(location, 1, 0)
    assert store.read(location, 1, 0)[0] == _payload(1, 0)
    _append(store, 1, 1)
    store.sync()
    store.close()
