"""EntryLogStore on real files: round trips, rotation, read-ahead, crash and corruption."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.errors import CorruptRecord, InvariantViolation
from common.units import KiB
from entrylog import EntryLogSettings, EntryLogStore, LedgerUsage, Location, ScanStop
from entrylog import _format as fmt
from tests.entrylog._data import append as _append
from tests.entrylog._data import payload as _payload

REPO_ROOT = Path(__file__).resolve().parents[2]


def _settings(directory: Path, limit: int = 64 * KiB, **knobs: int) -> EntryLogSettings:
    return EntryLogSettings(directory=directory, size_bytes_limit=limit, **knobs)


def _record_bytes(size: int) -> int:
    return fmt.RECORD_HEADER_SIZE_BYTES + size


def _expected_usage(written: dict[tuple[int, int], Location], log_id: int,
                    size: int = 1000) -> dict[int, LedgerUsage]:
    counts: dict[int, int] = {}
    for (ledger_id, _entry_id), location in written.items():
        if location.log_id == log_id:
            counts[ledger_id] = counts.get(ledger_id, 0) + 1
    return {lid: LedgerUsage(n, n * _record_bytes(size)) for lid, n in counts.items()}


def _header_on_disk(path: Path) -> fmt.FileHeader:
    return fmt.decode_file_header(path.read_bytes()[: fmt.HEADER_SIZE_BYTES], path=str(path))


def _flip_byte(path: Path, offset: int) -> None:
    with path.open("r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x10]))


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    return tmp_path / "entrylogs"


@pytest.fixture
def store(directory: Path) -> Iterator[EntryLogStore]:
    s = EntryLogStore(_settings(directory))
    yield s
    s.close()


# A crash is a real process exit with no close(): whatever append+sync wrote is
# on disk, the log has no map and its header still says unsealed.
_CRASH_CHILD = """
import json, os, sys
import crc32c
from entrylog import EntryLogStore
from entrylog import EntryLogSettings
args = json.loads(sys.argv[1])
store = EntryLogStore(EntryLogSettings(directory=args["directory"],
                                       size_bytes_limit=args["limit"]))
out = []
for ledger_id, entry_id in args["entries"]:
    seed = f"L{ledger_id}E{entry_id}-".encode()
    payload = (seed * (args["size"] // len(seed) + 1))[: args["size"]]
    loc = store.append(ledger_id, entry_id, payload, crc32c.crc32c(payload))
    out.append([ledger_id, entry_id, loc.log_id, loc.offset])
store.sync()
print(json.dumps(out), flush=True)
os._exit(0)
"""


def _crash_after_sync(directory: Path, entries: list[tuple[int, int]], *, size: int = 1000,
                      limit: int = 64 * KiB) -> dict[tuple[int, int], Location]:
    arg = json.dumps({"directory": str(directory), "limit": limit, "size": size,
                      "entries": entries})
    done = subprocess.run([sys.executable, "-c", _CRASH_CHILD, arg], cwd=REPO_ROOT,
                          capture_output=True, text=True, check=True, timeout=60)
    rows = json.loads(done.stdout)
    return {(lid, eid): Location(log_id, offset) for lid, eid, log_id, offset in rows}


# --- round trips and rotation ------------------------------------------------


def test_append_read_round_trip_across_rotations(store: EntryLogStore) -> None:
    written: dict[tuple[int, int], Location] = {}
    for entry_id in range(100):
        for ledger_id in (1, 2, 3):
            location = _append(store, ledger_id, entry_id)
            written[(ledger_id, entry_id)] = location
            # Readable at once, through the append buffer.
            assert store.read(location, ledger_id, entry_id)[0] == _payload(ledger_id, entry_id)
    store.sync()
    assert len(store.log_ids()) >= 4
    assert store.flushed_log_ids() == store.log_ids()[:-1]
    assert store.current_log_id == store.log_ids()[-1]
    for (ledger_id, entry_id), location in written.items():
        payload, crc = store.read(location, ledger_id, entry_id)
        assert payload == _payload(ledger_id, entry_id)
        assert crc == crc32c.crc32c(payload)
    for log_id in store.flushed_log_ids():
        assert store.log_size_bytes(log_id) <= 64 * KiB
        assert _header_on_disk(store.path_of(log_id)).sealed


@settings(max_examples=40, deadline=None)
@given(runs=st.lists(st.tuples(st.integers(1, 3), st.lists(st.integers(0, 20000), min_size=1,
                                                          max_size=40)),
                     min_size=1, max_size=6),
       buffer=st.sampled_from([3000, 16 * KiB, 1024 * KiB]))
def test_a_run_lands_where_one_append_per_record_would(
        tmp_path_factory: pytest.TempPathFactory, runs: list[tuple[int, list[int]]],
        buffer: int) -> None:
    """``append_run`` (a checkpoint's call) places each record exactly where
    ``append`` of the records one by one does, through write-buffer flushes and
    rotations in mid-run, empty payloads included; and every record reads back."""
    placed: list[list[Location]] = []
    stores = []
    for one_by_one in (False, True):
        directory = tmp_path_factory.mktemp("entrylogs")
        store = EntryLogStore(_settings(directory, limit=64 * KiB,
                                        write_buffer_size_bytes=buffer))
        stores.append(store)
        locations: list[Location] = []
        next_id: dict[int, int] = {}
        for ledger_id, sizes in runs:
            first = next_id.get(ledger_id, 0)
            payloads = [bytes([(first + i) % 251]) * size for i, size in enumerate(sizes)]
            crcs = [crc32c.crc32c(p) for p in payloads]
            if one_by_one:
                locations += [store.append(ledger_id, first + i, p, c)
                              for i, (p, c) in enumerate(zip(payloads, crcs, strict=True))]
            else:
                locations += [Location(run.log_id, offset)
                              for run in store.append_run(ledger_id, first, payloads, crcs)
                              for offset in run.offsets]
            next_id[ledger_id] = first + len(sizes)
        placed.append(locations)
    try:
        assert placed[0] == placed[1]
        store = stores[0]
        store.sync()
        next_id = {}
        for ledger_id, sizes in runs:
            first = next_id.get(ledger_id, 0)
            for i, size in enumerate(sizes):
                location = placed[0].pop(0)
                payload, _crc = store.read(location, ledger_id, first + i)
                assert payload == bytes([(first + i) % 251]) * size
            next_id[ledger_id] = first + len(sizes)
    finally:
        for store in stores:
            store.close()


def test_ledgers_map_after_rotation_equals_what_was_written(store: EntryLogStore) -> None:
    written = {}
    for entry_id in range(60):
        for ledger_id in (10, 20, 30):
            if ledger_id == 30 and entry_id % 3:
                continue  # Uneven ledgers, interleaved.
            written[(ledger_id, entry_id)] = _append(store, ledger_id, entry_id)
    for log_id in store.log_ids():
        assert store.ledgers_map(log_id) == _expected_usage(written, log_id)
    # The sealed logs' maps are on disk, not just in memory.
    for log_id in store.flushed_log_ids():
        path = store.path_of(log_id)
        header = _header_on_disk(path)
        raw = path.read_bytes()[header.ledgers_map_offset :]
        assert len(raw) == header.ledgers_map_length
        on_disk = fmt.decode_ledgers_map(raw, path=str(path), offset=header.ledgers_map_offset)
        assert on_disk == _expected_usage(written, log_id)


def test_a_sealed_log_keeps_no_per_ledger_state_in_memory(directory: Path) -> None:
    """A log of 30,000 small ledgers, sealed: what the store holds for it stays
    under a few bytes per ledger (a decoded map kept per sealed log cost about
    150), and its map is read back from the file, whole, each time."""
    import tracemalloc

    ledgers = 30_000
    store = EntryLogStore(_settings(directory, limit=64 * 1024 * KiB))
    try:
        for lid in range(1, ledgers + 1):
            _append(store, lid, 0, size=20)
        log_id = store.current_log_id
        tracemalloc.start()
        try:
            before, _ = tracemalloc.get_traced_memory()
            assert store.roll() == log_id  # sealed
            store.ledgers_map(log_id)  # read, then dropped
            after, _ = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert after - before < 8 * ledgers, after - before
        usage = store.ledgers_map(log_id)
        assert len(usage) == ledgers
        assert usage[ledgers] == LedgerUsage(1, _record_bytes(20))
    finally:
        store.close()


def test_reopen_starts_a_new_log_and_reads_old_entries(directory: Path) -> None:
    store = EntryLogStore(_settings(directory))
    written = {(1, e): _append(store, 1, e) for e in range(150)}
    last_id = store.current_log_id
    store.close()

    reopened = EntryLogStore(_settings(directory))
    try:
        assert reopened.current_log_id == last_id + 1
        assert reopened.flushed_log_ids() == list(range(1, last_id + 1))
        for (ledger_id, entry_id), location in written.items():
            assert reopened.read(location, ledger_id, entry_id)[0] == _payload(ledger_id, entry_id)
        assert reopened.ledgers_map(last_id) == _expected_usage(written, last_id)
        assert reopened.seal_unsealed() == []  # close() sealed everything.
    finally:
        reopened.close()


def test_entry_larger_than_the_limit_goes_alone_into_a_log(store: EntryLogStore) -> None:
    small = _append(store, 1, 0)
    big = _append(store, 1, 1, size=80 * KiB)
    after = _append(store, 1, 2)
    assert small.log_id < big.log_id < after.log_id
    assert store.ledgers_map(big.log_id) == {1: LedgerUsage(1, _record_bytes(80 * KiB))}
    assert store.read(big, 1, 1)[0] == _payload(1, 1, 80 * KiB)


def test_reads_span_written_file_and_buffer(directory: Path) -> None:
    # A tiny write buffer makes most records cross into the file while the
    # latest ones are still buffered.
    store = EntryLogStore(_settings(directory, limit=1024 * KiB, write_buffer_size_bytes=3000))
    try:
        written = {(5, e): _append(store, 5, e, size=700) for e in range(40)}
        for (ledger_id, entry_id), location in written.items():
            assert store.read(location, ledger_id, entry_id)[0] == _payload(5, entry_id, 700)
        following = store.read_following(written[(5, 0)], 5, bytes_max=1024 * KiB, count_max=100)
        assert [f.entry_id for f in following] == list(range(1, 40))
        assert store.ledgers_map(store.current_log_id) == {5: LedgerUsage(40, 40 * 728)}
    finally:
        store.close()


def test_statistics_snapshot(store: EntryLogStore) -> None:
    for e in range(100):
        _append(store, 1, e)
    stats = store.statistics()
    assert stats.entry_count_written == 100
    assert stats.bytes_written == 100 * _record_bytes(1000)
    assert stats.log_count == len(store.log_ids())
    assert stats.rotation_count == stats.log_count - 1
    assert stats.current_log_id == store.current_log_id
    assert stats.total_size_bytes == sum(store.log_size_bytes(i) for i in store.log_ids())


# --- read-ahead ----------------------------------------------------------------


def test_read_following_returns_next_records_of_the_same_ledger(store: EntryLogStore) -> None:
    # As a flush writes them: sorted by ledger, then entry.
    ledger1 = [_append(store, 1, e, size=100) for e in range(10)]
    ledger2 = [_append(store, 2, e, size=100) for e in range(5)]

    following = store.read_following(ledger1[3], 1, bytes_max=1024 * KiB, count_max=100)
    assert [f.entry_id for f in following] == list(range(4, 10))
    assert [f.location for f in following] == ledger1[4:]
    for f in following:
        assert f.payload == _payload(1, f.entry_id, 100)
        assert f.crc32c == crc32c.crc32c(f.payload)

    assert store.read_following(ledger1[9], 1, bytes_max=1024 * KiB, count_max=100) == []
    counted = store.read_following(ledger1[0], 1, bytes_max=1024 * KiB, count_max=3)
    assert [f.entry_id for f in counted] == [1, 2, 3]
    bounded = store.read_following(ledger1[0], 1, bytes_max=2 * _record_bytes(100) + 1,
                                   count_max=100)
    assert [f.entry_id for f in bounded] == [1, 2]
    # The last record of the log: end of data, then (after sealing) the map.
    assert store.read_following(ledger2[-1], 2, bytes_max=1024 * KiB, count_max=100) == []
    store.sync()
    log_id = store.current_log_id
    _append(store, 3, 0, size=70 * KiB)  # Forces rotation: log_id is now sealed.
    assert store.current_log_id != log_id
    assert store.read_following(ledger2[-1], 2, bytes_max=1024 * KiB, count_max=100) == []
    sealed = store.read_following(ledger2[0], 2, bytes_max=1024 * KiB, count_max=100)
    assert [f.entry_id for f in sealed] == [1, 2, 3, 4]


def test_read_following_stops_at_a_corrupt_record(directory: Path) -> None:
    store = EntryLogStore(_settings(directory))
    locations = [_append(store, 1, e, size=100) for e in range(6)]
    store.close()
    _flip_byte(store.path_of(1), locations[4].offset + fmt.RECORD_HEADER_SIZE_BYTES + 5)
    reopened = EntryLogStore(_settings(directory))
    try:
        following = reopened.read_following(locations[0], 1, bytes_max=1024 * KiB,
                                            count_max=100)
        assert [f.entry_id for f in following] == [1, 2, 3]
    finally:
        reopened.close()


# --- crash before rotation -------------------------------------------------------


def test_crash_before_rotation_map_by_scanning_then_sealed(directory: Path) -> None:
    entries = [(lid, e) for e in range(20) for lid in (7, 8)]
    written = _crash_after_sync(directory, entries)
    assert {loc.log_id for loc in written.values()} == {1}
    assert not _header_on_disk(directory / "0000000000000001.log").sealed

    store = EntryLogStore(_settings(directory), seal_on_open=False)
    try:
        assert store.current_log_id == 2
        assert store.flushed_log_ids() == [1]
        assert store.ledgers_map(1) == _expected_usage(written, 1)  # by scanning
        end = store.scan_end(1)
        assert (end.stop, end.record_count) == (ScanStop.END_OF_DATA, 40)

        ends = store.seal_unsealed()
        assert [(e.log_id, e.stop) for e in ends] == [(1, ScanStop.END_OF_DATA)]
        header = _header_on_disk(store.path_of(1))
        assert header.sealed and header.ledger_count == 2
        assert store.ledgers_map(1) == _expected_usage(written, 1)
        assert store.scan_end(1).stop is ScanStop.LEDGERS_MAP
        for (ledger_id, entry_id), location in written.items():
            assert store.read(location, ledger_id, entry_id)[0] == _payload(ledger_id, entry_id)
        assert store.seal_unsealed() == []  # Idempotent.
    finally:
        store.close()


def test_open_seals_crashed_logs_by_default(directory: Path) -> None:
    written = _crash_after_sync(directory, [(1, e) for e in range(5)])
    store = EntryLogStore(_settings(directory))
    try:
        assert _header_on_disk(store.path_of(1)).sealed
        assert store.ledgers_map(1) == _expected_usage(written, 1)
    finally:
        store.close()


def test_crash_between_map_and_header_rewrite_reuses_the_map(directory: Path) -> None:
    store = EntryLogStore(_settings(directory))
    written = {(4, e): _append(store, 4, e) for e in range(10)}
    store.close()
    path = directory / "0000000000000001.log"
    size = path.stat().st_size
    # Undo only the header rewrite: the map is on disk, the header is unsealed.
    with path.open("r+b") as f:
        f.write(fmt.encode_file_header(fmt.FileHeader(1)))

    reopened = EntryLogStore(_settings(directory))
    try:
        assert path.stat().st_size == size  # No second map appended.
        assert _header_on_disk(path).sealed
        assert reopened.ledgers_map(1) == _expected_usage(written, 1)
    finally:
        reopened.close()


def test_torn_header_is_rewritten_from_the_scan(directory: Path) -> None:
    written = _crash_after_sync(directory, [(3, e) for e in range(5)])
    path = directory / "0000000000000001.log"
    _flip_byte(path, 20)  # Inside the crc-covered fields: the header fails its crc.
    store = EntryLogStore(_settings(directory), seal_on_open=False)
    try:
        assert store.ledgers_map(1) == _expected_usage(written, 1)
        assert [e.log_id for e in store.seal_unsealed()] == [1]
        assert _header_on_disk(path).log_id == 1
    finally:
        store.close()


def test_foreign_file_is_left_alone(directory: Path) -> None:
    directory.mkdir(parents=True)
    foreign = directory / "0000000000000001.log"
    foreign.write_bytes(b"not an entry log" * 300)
    store = EntryLogStore(_settings(directory))
    try:
        assert store.current_log_id == 2
        assert foreign.read_bytes() == b"not an entry log" * 300
    finally:
        store.close()


# --- corruption ------------------------------------------------------------------


def test_truncated_log_reports_file_and_offset(directory: Path,
                                                caplog: pytest.LogCaptureFixture) -> None:
    entries = [(1, e) for e in range(10)]
    written = _crash_after_sync(directory, entries)
    path = directory / "0000000000000001.log"
    last = written[(1, 9)]
    os.truncate(path, last.offset + 500)  # Mid-payload of the last record.

    store = EntryLogStore(_settings(directory), seal_on_open=False)
    try:
        with pytest.raises(CorruptRecord) as info:
            store.read(last, 1, 9)
        assert info.value.path == str(path) and info.value.offset == last.offset
        assert str(path) in str(info.value) and str(last.offset) in str(info.value)
        for entry_id in range(9):
            assert store.read(written[(1, entry_id)], 1, entry_id)[0] == _payload(1, entry_id)

        end = store.scan_end(1)
        assert (end.stop, end.offset, end.record_count) == (ScanStop.TORN_TAIL, last.offset, 9)
        assert end.path == str(path)

        with caplog.at_level(logging.WARNING, logger="entrylog"):
            ends = store.seal_unsealed()
        assert [(e.stop, e.offset) for e in ends] == [(ScanStop.TORN_TAIL, last.offset)]
        assert f"entry log {path}: torn tail at offset {last.offset}" in caplog.text
        # The torn tail stays; the map lists only the valid records.
        assert store.ledgers_map(1) == {1: LedgerUsage(9, 9 * _record_bytes(1000))}
        assert _header_on_disk(path).ledgers_map_offset == last.offset + 500
        assert store.read(written[(1, 8)], 1, 8)[0] == _payload(1, 8)
        with pytest.raises(CorruptRecord):
            store.read(last, 1, 9)
    finally:
        store.close()


def test_truncated_record_header_is_corrupt(directory: Path) -> None:
    written = _crash_after_sync(directory, [(1, e) for e in range(3)])
    path = directory / "0000000000000001.log"
    os.truncate(path, written[(1, 2)].offset + 10)
    store = EntryLogStore(_settings(directory), seal_on_open=False)
    try:
        with pytest.raises(CorruptRecord, match="record header truncated"):
            store.read(written[(1, 2)], 1, 2)
        assert store.scan_end(1).stop is ScanStop.TORN_TAIL
    finally:
        store.close()


def test_zero_filled_tail_is_a_torn_tail(directory: Path) -> None:
    written = _crash_after_sync(directory, [(1, e) for e in range(3)])
    path = directory / "0000000000000001.log"
    size = path.stat().st_size
    with path.open("ab") as f:
        f.write(bytes(3000))  # What delayed allocation can leave after a crash.
    store = EntryLogStore(_settings(directory), seal_on_open=False)
    try:
        end = store.scan_end(1)
        assert (end.stop, end.offset, end.record_count) == (ScanStop.TORN_TAIL, size, 3)
        assert store.ledgers_map(1) == _expected_usage(written, 1)
    finally:
        store.close()


def test_flipped_payload_bit_is_corrupt(directory: Path) -> None:
    store = EntryLogStore(_settings(directory))
    locations = [_append(store, 1, e) for e in range(5)]
    store.close()
    path = store.path_of(1)
    _flip_byte(path, locations[2].offset + fmt.RECORD_HEADER_SIZE_BYTES + 100)

    reopened = EntryLogStore(_settings(directory))
    try:
        with pytest.raises(CorruptRecord, match="payload crc32c mismatch") as info:
            reopened.read(locations[2], 1, 2)
        assert info.value.offset == locations[2].offset and info.value.path == str(path)
        assert reopened.read(locations[3], 1, 3)[0] == _payload(1, 3)
        end = reopened.scan_end(1)
        assert (end.stop, end.offset, end.record_count) == (ScanStop.CORRUPT,
                                                            locations[2].offset, 2)
    finally:
        reopened.close()


def test_flipped_map_bit_falls_back_to_scanning(directory: Path,
                                                caplog: pytest.LogCaptureFixture) -> None:
    store = EntryLogStore(_settings(directory))
    written = {(lid, e): _append(store, lid, e) for e in range(10) for lid in (1, 2)}
    store.close()
    path = store.path_of(1)
    header = _header_on_disk(path)
    _flip_byte(path, header.ledgers_map_offset + 20)

    reopened = EntryLogStore(_settings(directory))
    try:
        with caplog.at_level(logging.WARNING, logger="entrylog"):
            assert reopened.ledgers_map(1) == _expected_usage(written, 1)
        assert "ledgers map unusable, scanning instead" in caplog.text
        assert str(path) in caplog.text
    finally:
        reopened.close()


def test_misdirected_location_is_corrupt(store: EntryLogStore) -> None:
    first = _append(store, 1, 0)
    second = _append(store, 2, 0)
    with pytest.raises(CorruptRecord, match="record holds ledger 2 entry 0, expected ledger 1"):
        store.read(second, 1, 0)
    with pytest.raises(CorruptRecord, match="expected ledger 1 entry 5"):
        store.read(first, 1, 5)
    with pytest.raises(CorruptRecord, match="record header crc32c mismatch"):
        store.read(Location(first.log_id, first.offset + 1), 1, 0)
    with pytest.raises(CorruptRecord, match="file header"):
        store.read(Location(first.log_id, 0), 1, 0)


# --- removal ---------------------------------------------------------------------


def test_remove_flushed_log(store: EntryLogStore) -> None:
    locations = [_append(store, 1, e) for e in range(100)]
    flushed = store.flushed_log_ids()
    victim = flushed[0]
    assert store.read(locations[0], 1, 0)  # Caches a read descriptor for the victim.
    store.remove(victim)
    assert victim not in store.log_ids()
    assert not store.path_of(victim).exists()
    with pytest.raises(CorruptRecord, match="does not exist"):
        store.read(locations[0], 1, 0)
    store.remove(victim)  # Idempotent: a GC crash may repeat the step.
    with pytest.raises(InvariantViolation):
        store.remove(store.current_log_id)


# --- concurrency -------------------------------------------------------------------


def test_readers_run_while_the_writer_appends_and_rotates(directory: Path) -> None:
    store = EntryLogStore(_settings(directory, write_buffer_size_bytes=4 * KiB))
    published: list[tuple[int, Location]] = []
    lock = threading.Lock()
    done = threading.Event()
    errors: list[BaseException] = []

    def reader() -> None:
        index = 0
        try:
            while not done.is_set() or index < len(published):
                with lock:
                    batch = published[index:]
                for entry_id, location in batch:
                    assert store.read(location, 1, entry_id)[0] == _payload(1, entry_id, 300)
                index += len(batch)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for entry_id in range(1500):
            location = _append(store, 1, entry_id, size=300)
            with lock:
                published.append((entry_id, location))
            if entry_id % 200 == 0:
                store.sync()
    finally:
        done.set()
        for t in threads:
            t.join()
        store.close()
    assert errors == []
    assert len({loc.log_id for _, loc in published}) > 3


def test_read_descriptor_cache_stays_bounded(directory: Path) -> None:
    store = EntryLogStore(_settings(directory, read_fd_count_max=2))
    try:
        written = {(1, e): _append(store, 1, e) for e in range(300)}
        assert len(store.log_ids()) > 4
        for _ in range(2):
            for (ledger_id, entry_id), location in written.items():
                assert store.read(location, ledger_id, entry_id)[0] == _payload(1, entry_id)
        assert store.statistics().read_fd_open_count <= 2
    finally:
        store.close()


def test_scan_of_a_sealed_log_with_a_torn_tail(directory: Path) -> None:
    written = _crash_after_sync(directory, [(1, e) for e in range(4)])
    path = directory / "0000000000000001.log"
    os.truncate(path, written[(1, 3)].offset + 100)
    store = EntryLogStore(_settings(directory))  # Seals log 1 behind its torn tail.
    try:
        end = store.scan_end(1)
        assert (end.stop, end.offset, end.record_count) == (
            ScanStop.TORN_TAIL, written[(1, 3)].offset, 3)
        records = list(store.scan(1))
        assert [(r.ledger_id, r.entry_id) for r in records] == [(1, 0), (1, 1), (1, 2)]
        assert [r.location for r in records] == [written[(1, e)] for e in range(3)]
        following = store.read_following(written[(1, 0)], 1, bytes_max=KiB * KiB,
                                         count_max=100)
        assert [f.entry_id for f in following] == [1, 2]
    finally:
        store.close()


def test_public_surface_is_the_package_init() -> None:
    import entrylog

    for name in entrylog.__all__:
        value = getattr(entrylog, name)
        assert not name.startswith("_")
        if isinstance(value, type):
            assert value.__module__.startswith("entrylog._")
    assert entrylog.FORMAT_VERSION == 1


def test_roll_seals_the_current_log_and_the_next_append_starts_another(
        directory: Path) -> None:
    store = EntryLogStore(_settings(directory, limit=1024 * KiB))
    try:
        first = store.current_log_id
        written = {(1, e): _append(store, 1, e) for e in range(5)}
        assert store.flushed_log_ids() == []
        assert store.roll() == first
        assert store.flushed_log_ids() == [first]
        assert _header_on_disk(store.path_of(first)).sealed
        assert store.ledgers_map(first) == _expected_usage(written, first)
        assert store.roll() is None  # nothing appended since: nothing to seal
        later = _append(store, 1, 5)
        assert later.log_id == first + 1
        for (lid, eid), location in written.items():
            assert store.read(location, lid, eid)[0] == _payload(lid, eid)
    finally:
        store.close()
