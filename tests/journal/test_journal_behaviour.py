"""Journal behaviour on real devices: a preallocated file and a loop block device."""

from __future__ import annotations

import functools
import random
import threading
from pathlib import Path

import crc32c
import pytest

from common.errors import (
    CorruptRecord,
    DeviceBroken,
    EntryTooLarge,
    FormatMismatch,
    InvariantViolation,
    JournalFull,
)
from common.units import KiB, MiB
from journal import (
    DirectDevice,
    Journal,
    JournalAppend,
    JournalRecord,
    JournalSettings,
    SyncMode,
)
from journal._record import encode_record, encode_record_v1
from journal.testing import FaultyDevice, MemoryDevice
from tests.journal.conftest import ONE_PART_RECORD_OVERHEAD_BYTES, assert_acked_per_block


def started(settings: JournalSettings) -> tuple[Journal, list[JournalRecord]]:
    journal = Journal.open(settings)
    records = list(journal.replay())
    journal.start()
    return journal, records


def reopen(settings: JournalSettings) -> tuple[Journal, list[JournalRecord]]:
    return started(settings)


def test_direct_io_is_used_unless_the_sync_mode_is_buffered(journal_settings, sync_mode):
    journal, records = started(journal_settings())
    try:
        assert records == []
        direct_io = journal._device.direct_io  # type: ignore[attr-defined]
        assert direct_io == (sync_mode is not SyncMode.BUFFERED_FDATASYNC)
        assert journal.append_nowait(b"hello").future.result(timeout=10) > 0
    finally:
        journal.close()


def test_a_callback_appends_from_the_journal_thread_that_resolved_it(journal_settings):
    """A light load resolves futures on the thread that synced them (the writer's
    or the syncer's), not the acker's: a callback appending the next record from
    there is written, synced and resolved like any other, in offset order, and
    each record's hook runs before its future resolves."""
    journal, _ = started(journal_settings(capacity_bytes=8 * MiB))
    try:
        resolved: list[int] = []
        hooked: list[int] = []
        finished = threading.Event()

        def append(n: int) -> None:
            record = journal.append_nowait(b"%d" % n, on_synced=lambda: hooked.append(n))

            def done(future: object) -> None:
                assert hooked[-1] == n
                resolved.append(record.future.result())
                if n < 300:
                    append(n + 1)
                else:
                    finished.set()

            record.future.add_done_callback(done)

        append(0)
        assert finished.wait(30), f"the chain stalled after {len(resolved)} appends"
        assert len(resolved) == 301 and resolved == sorted(resolved)
        assert hooked == list(range(301))
    finally:
        journal.close()


def test_concurrent_appends_ack_in_order_and_replay_byte_for_byte(journal_settings):
    settings = journal_settings(capacity_bytes=8 * MiB)
    journal, _ = started(settings)
    acked: list[bytes] = []
    appends = []
    lock = threading.Lock()

    def writer(index: int) -> None:
        rng = random.Random(index)
        for i in range(150):
            body = f"{index}:{i}:".encode() + rng.randbytes(rng.randrange(0, 4000))
            with lock:  # the caller's own lock: append order is offset order
                # on_synced runs on a journal thread in offset order.  (Not a
                # done-callback of the future: one added after the future
                # resolved runs at once in this thread, out of that order.)
                append = journal.append_nowait(
                    body, on_synced=functools.partial(acked.append, body))
                appends.append((append, body))
            if i % 10 == 9:
                append.future.result(timeout=30)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for a, _ in appends:
        a.future.result(timeout=30)
    assert_acked_per_block([a for a, _ in appends])
    assert acked == [body for _, body in appends]
    trim_at = appends[len(appends) // 3][0].offset
    journal.trim(trim_at)
    stats = journal.statistics()
    assert stats.record_count == len(appends) and stats.queue_depth == 0
    assert stats.synced_offset == stats.appended_offset == appends[-1][0].end_offset
    journal.close()
    journal.close()  # idempotent

    journal, records = reopen(settings)
    try:
        live = [(a.offset, a.end_offset, body) for a, body in appends if a.offset >= trim_at]
        assert [(r.offset, r.end_offset, r.body) for r in records] == live
        report = journal.recovery_report
        assert report.clean_shutdown and report.holes == () and report.torn_tail_offset is None
        assert report.start_offset == trim_at and report.record_count == len(live)
    finally:
        journal.close()


def test_ring_wraps_over_several_laps_with_trims(journal_settings):
    settings = journal_settings(capacity_bytes=512 * KiB, sliding_window_bytes_max=128 * KiB,
                                block_size_bytes_soft_limit=32 * KiB)
    rng = random.Random(7)
    live: list[tuple[int, bytes]] = []
    journal, _ = started(settings)
    try:
        for round_no in range(30):
            for _ in range(rng.randrange(20, 60)):
                body = rng.randbytes(rng.randrange(1, 6000))
                try:
                    append = journal.append_nowait(body)
                except JournalFull:
                    journal.wait_synced(journal.appended_offset, timeout_s=10)
                    keep = live[len(live) // 2][0]
                    journal.trim(keep)
                    live = [(o, b) for o, b in live if o >= keep]
                    append = journal.append_nowait(body)
                live.append((append.offset, body))
            journal.wait_synced(journal.appended_offset, timeout_s=10)
            if round_no % 3 == 2:
                journal.close()
                journal, records = reopen(settings)
                assert [(r.offset, r.body) for r in records] == live
        assert journal.appended_offset > 4 * settings.capacity_bytes  # several laps
    finally:
        journal.close()
    journal, records = reopen(settings)
    journal.close()
    # Stale records of earlier laps sit right after the live ones: rejected by offset.
    assert [(r.offset, r.body) for r in records] == live


def test_back_pressure_when_full_and_space_after_trim(journal_settings):
    settings = journal_settings(capacity_bytes=256 * KiB, sliding_window_bytes_max=64 * KiB,
                                block_size_bytes_soft_limit=16 * KiB)
    journal, _ = started(settings)
    try:
        appends = []
        with pytest.raises(JournalFull, match="ring is full"):
            while True:
                appends.append(journal.append_nowait(b"x" * 3000))
        assert len(appends) > 60
        for a in appends:
            a.future.result(timeout=10)
        assert not journal.wait_for_space(3000, timeout_s=0.01)
        waiter_result: list[bool] = []
        waiter = threading.Thread(
            target=lambda: waiter_result.append(journal.wait_for_space(3000, timeout_s=30)))
        waiter.start()
        journal.trim(appends[10].end_offset)
        waiter.join()
        assert waiter_result == [True]
        journal.append_nowait(b"y" * 3000).future.result(timeout=10)
        with pytest.raises(InvariantViolation):
            journal.trim(journal.appended_offset + 1)  # beyond what is synced
    finally:
        journal.close()


def test_lone_writer_is_not_delayed_by_the_group_wait(journal_settings):
    journal, _ = started(journal_settings(group_wait_s_max=60.0))
    try:
        # With a 60 s group wait this resolves only because an idle device writes at once.
        assert journal.append_nowait(b"alone").future.result(timeout=20) == (
            ONE_PART_RECORD_OVERHEAD_BYTES + 5)
    finally:
        journal.close()


def test_refuses_a_device_smaller_than_the_capacity(journal_settings, device_path: Path):
    if not str(device_path).startswith("/dev/"):
        DirectDevice(device_path, create_size_bytes=1 * MiB).close()
    settings = journal_settings(capacity_bytes=32 * MiB)
    with pytest.raises(FormatMismatch) as info:
        Journal.open(settings)
    message = str(info.value)
    assert str(device_path) in message and "journal_capacity=33554432" in message
    assert "needs 33562624" in message


def test_refuses_foreign_bytes_and_does_not_format_them(journal_settings, device_path: Path):
    settings = journal_settings()
    device = DirectDevice(device_path, create_size_bytes=8192 + settings.capacity_bytes)
    foreign = random.Random(1).randbytes(8192)
    device.pwrite(0, foreign)
    device.sync()
    device.close()
    with pytest.raises(FormatMismatch, match=r"holds another format.*refusing to format it"):
        Journal.open(settings)
    device = DirectDevice(device_path)
    try:
        assert device.pread(0, 8192) == foreign
    finally:
        device.close()


def test_refuses_a_capacity_change(journal_settings):
    Journal.open(journal_settings(capacity_bytes=4 * MiB)).close()
    with pytest.raises(FormatMismatch,
                       match="capacity 4194304 bytes but journal_capacity=2097152"):
        Journal.open(journal_settings(capacity_bytes=2 * MiB))


def _pumped_journal(capacity_bytes: int = 1 * MiB) -> tuple[Journal, FaultyDevice,
                                                             JournalSettings]:
    settings = JournalSettings(device_path=Path("unused"), capacity_bytes=capacity_bytes,
                               sliding_window_bytes_max=256 * KiB,
                               block_size_bytes_soft_limit=16 * KiB)
    device = FaultyDevice(8192 + settings.capacity_bytes)
    journal = Journal.open(settings, device=device)
    list(journal.replay())
    journal.start(background=False)
    return journal, device, settings


@pytest.mark.parametrize("fault", ["pwrite", "sync"])
def test_device_error_fails_pending_appends_and_never_acks(fault):
    journal, device, settings = _pumped_journal()
    durable = journal.append_nowait(b"durable")
    assert journal.pump_write() and journal.pump_sync()
    assert durable.future.result(timeout=0) == durable.end_offset
    pending = [journal.append_nowait(b"p%d" % i) for i in range(5)]
    # A done-callback runs before waiting threads are let through: reading the
    # (shared) future from there must not wait for them.
    seen: list[BaseException | None] = []
    pending[0].future.add_done_callback(lambda f: seen.append(f.exception()))
    if fault == "pwrite":
        device.fail_next_pwrite()
    else:
        device.fail_next_sync()
        assert journal.pump_write()
    assert not journal.pump_write() and not journal.pump_sync()
    for append in pending:
        with pytest.raises(DeviceBroken, match="injected"):
            append.future.result(timeout=0)
    assert len(seen) == 1 and isinstance(seen[0], DeviceBroken)
    with pytest.raises(DeviceBroken):
        journal.append_nowait(b"after")
    with pytest.raises(DeviceBroken):
        journal.wait_synced(pending[-1].end_offset, timeout_s=1)
    journal.close()
    reopened = Journal.open(settings, device=device)
    records = list(reopened.replay())
    assert not reopened.recovery_report.clean_shutdown  # a broken journal is not clean
    assert records[0].body == b"durable"
    reopened.close()


def test_statistics_and_offsets(journal_settings):
    journal, _ = started(journal_settings())
    try:
        appends = [journal.append_nowait(b"z" * 100) for _ in range(10)]
        journal.wait_synced(appends[-1].end_offset, timeout_s=10)
        stats = journal.statistics()
        # Records follow each other, or the next starts on the next block when the
        # writer wrote a partial block in between (an idle device writes at once, so
        # how many of the ten share the first write depends on thread timing).
        previous_end = 0
        for append in appends:
            assert append.end_offset - append.offset == ONE_PART_RECORD_OVERHEAD_BYTES + 100
            next_block = -(-previous_end // 4096) * 4096
            assert append.offset in (previous_end, next_block), (append, previous_end)
            previous_end = append.end_offset
        end = appends[-1].end_offset
        assert stats.appended_offset == stats.synced_offset == end
        assert stats.trim_offset == 0 and stats.capacity_bytes == 4 * MiB
        assert stats.used_bytes == -(-end // 4096) * 4096 and stats.sync_count >= 1
        assert stats.block_count >= 1 and stats.bytes_written == 4096 * stats.block_count
    finally:
        journal.close()


class CountingDevice(FaultyDevice):
    def __init__(self, size_bytes: int) -> None:
        super().__init__(size_bytes)
        self.writes: list[tuple[int, int]] = []

    def pwrite(self, offset: int, data: bytes | memoryview) -> None:
        self.writes.append((offset, len(data)))
        super().pwrite(offset, data)


def test_blocks_queued_behind_a_busy_device_go_out_in_one_write():
    soft = 16 * KiB
    settings = JournalSettings(device_path=Path("unused"), capacity_bytes=1 * MiB,
                               sliding_window_bytes_max=256 * KiB,
                               block_size_bytes_soft_limit=soft)
    device = CountingDevice(8192 + settings.capacity_bytes)
    journal = Journal.open(settings, device=device)
    list(journal.replay())
    journal.start(background=False)
    # Each record is just over the soft limit, so each is sealed as its own block
    # and padded to 20 KiB; three blocks fit the 4 x soft (64 KiB) write limit.
    bodies = [bytes([n]) * 16_400 for n in range(6)]
    appends = [journal.append_nowait(body) for body in bodies]
    assert journal.pump_write() and journal.pump_write() and not journal.pump_write()
    ring_writes = [(offset, size) for offset, size in device.writes if offset >= 8192]
    assert ring_writes == [(8192, 60 * KiB), (8192 + 60 * KiB, 60 * KiB)]
    assert journal.pump_sync()
    # Each record is a block of its own: its own future, its own end.
    assert all(a.future.result(timeout=0) == a.end_offset for a in appends)
    assert journal.statistics().block_count == 6
    journal.close()
    reopened = Journal.open(settings, device=device)
    assert [r.body for r in reopened.replay()] == bodies  # padding between blocks skipped
    reopened.close()


def test_close_returns_after_every_queued_append_is_acknowledged(journal_settings):
    journal, _ = started(journal_settings())
    appends = [journal.append_nowait(b"r%d" % i * 50) for i in range(500)]
    journal.close()  # the acker thread is joined after the last sync
    assert all(a.future.done() for a in appends)
    assert_acked_per_block(appends)


def test_parts_keep_the_crcs_they_came_with_and_the_hook_runs_before_the_ack(
        journal_settings):
    settings = journal_settings()
    journal, _ = started(settings)
    parts = [b"envelope", b"payload one", memoryview(b"payload two")]
    crcs = [crc32c.crc32c(p) for p in parts]
    seen: list[bool] = []
    appends: list[JournalAppend] = []
    appends.append(journal.append_nowait(
        parts, crcs=crcs, on_synced=lambda: seen.append(appends[0].future.done())))
    try:
        assert appends[0].future.result(timeout=10) == appends[0].end_offset
        assert seen == [False]  # the hook ran first: waiters see what it did
    finally:
        journal.close()
    reopened, records = reopen(settings)
    reopened.close()
    assert [r.parts for r in records] == [(b"envelope", b"payload one", b"payload two")]
    assert [r.crcs for r in records] == [tuple(crcs)]


def test_a_part_whose_given_crc_is_wrong_is_caught_on_replay(journal_settings):
    settings = journal_settings()
    journal, _ = started(settings)
    journal.append_nowait([b"good"]).future.result(timeout=10)
    journal.append_nowait([b"bad"], crcs=[crc32c.crc32c(b"bad") ^ 1]).future.result(timeout=10)
    journal.close()
    reopened = Journal.open(settings)
    with pytest.raises(CorruptRecord, match="part 0 crc32c mismatch"):
        list(reopened.replay())  # after a clean shutdown a bad record is corruption
    reopened.close()


def test_records_written_before_parts_replay_as_one_part(journal_settings):
    settings = journal_settings()
    device = MemoryDevice(8192 + settings.capacity_bytes)
    journal = Journal.open(settings, device=device)
    list(journal.replay())
    journal.start()
    journal.close()  # formatted; now write what an older version left behind
    jid = journal.journal_id
    first = encode_record_v1(b"old body", logical_offset=0, journal_id=jid)
    second = encode_record([b"new", b"parts"], logical_offset=len(first), journal_id=jid)
    device.poke(8192, first + second)
    reopened = Journal.open(settings, device=device)
    records = list(reopened.replay())
    reopened.close()
    assert [(r.parts, r.body) for r in records] == [
        ((b"old body",), b"old body"), ((b"new", b"parts"), b"newparts")]


# --- append_many_nowait: consecutive records, one lock and one future ---------------


def _two_parts(n: int, size: int) -> tuple[list[bytes], list[int]]:
    parts = [b"envelope %d" % n, bytes([n]) * size]
    return parts, [crc32c.crc32c(p) for p in parts]


def test_many_records_in_one_call_are_records_of_their_own_behind_one_future():
    journal, device, settings = _pumped_journal()
    records = [_two_parts(n, 100 + 3000 * n) for n in range(6)]  # spans blocks
    hooked: list[tuple[int, bool]] = []
    appends: list[JournalAppend] = []
    appends.append(journal.append_many_nowait(
        records, on_synced=lambda count: hooked.append((count, appends[0].future.done()))))
    append = appends[0]
    assert (append.offset, append.record_count) == (0, 6)
    assert journal.statistics().record_count == 6
    while journal.pump_write():
        pass
    assert not append.future.done()  # written, not synced: no ack
    assert journal.pump_sync()
    assert append.future.result(timeout=0) == append.end_offset == journal.synced_offset
    assert hooked == [(6, False)]  # the hook ran once, with the count, before the ack
    journal.close()
    reopened = Journal.open(settings, device=device)
    replayed = list(reopened.replay())
    reopened.close()
    assert [(r.parts, r.crcs) for r in replayed] == [
        (tuple(parts), tuple(crcs)) for parts, crcs in records]


@pytest.mark.parametrize("seed", range(8))
def test_a_crash_before_the_sync_leaves_whole_records_of_a_call_or_none(seed: int):
    journal, device, settings = _pumped_journal()
    records = [_two_parts(n, 1500 + 700 * n) for n in range(8)]  # records cross sectors
    append = journal.append_many_nowait(records)
    while journal.pump_write():
        pass
    device.crash(random.Random(seed))  # before any fdatasync: nothing was acknowledged
    assert not append.future.done()
    journal.close()
    device.restart()
    reopened = Journal.open(settings, device=device)
    replayed = [r.parts for r in reopened.replay()]
    reopened.close()
    expected = [tuple(parts) for parts, _ in records]
    # Each replayed record is one of the call's, whole and in order (a record after
    # a hole within the sliding window replays too: it was never acknowledged).
    positions = [expected.index(parts) for parts in replayed]
    assert positions == sorted(set(positions))


def test_a_full_ring_takes_the_records_that_fit_and_refuses_only_when_none_does():
    journal, _, _ = _pumped_journal(capacity_bytes=64 * KiB)
    records = [_two_parts(n, 3000) for n in range(40)]  # ~120 KiB: more than the ring
    first = journal.append_many_nowait(records)
    assert 0 < first.record_count < len(records)
    assert journal.statistics().record_count == first.record_count
    appended = journal.appended_offset
    with pytest.raises(JournalFull):
        journal.append_many_nowait(records[first.record_count:])
    assert journal.appended_offset == appended  # nothing queued by the refused call
    while journal.pump_write() or journal.pump_sync():
        pass
    assert first.future.result(timeout=0) == first.end_offset == appended
    journal.close()


def test_a_record_too_large_for_any_block_ends_the_run_and_raises_first():
    journal, _, _ = _pumped_journal()
    huge = _two_parts(0, 256 * KiB)  # over the sliding window
    run = journal.append_many_nowait([_two_parts(1, 10), huge, _two_parts(2, 10)])
    assert run.record_count == 1
    with pytest.raises(EntryTooLarge):
        journal.append_many_nowait([huge, _two_parts(2, 10)])
    journal.close()


@pytest.mark.parametrize("as_parts", [False, True], ids=["one body", "a list of one part"])
def test_the_largest_one_part_record_fits_and_one_byte_more_does_not(as_parts):
    """A single body takes a shorter framing path than a list of parts; both
    draw the line at the same byte (window minus one block, less the framing)."""
    journal, _, settings = _pumped_journal()
    largest = settings.sliding_window_bytes_max - 4096 - ONE_PART_RECORD_OVERHEAD_BYTES

    def append(n: int) -> JournalAppend:
        body = bytes(n)
        return journal.append_nowait([body] if as_parts else body)

    with pytest.raises(EntryTooLarge):
        append(largest + 1)
    fits = append(largest)
    while journal.pump_write() or journal.pump_sync():
        pass
    assert fits.future.result(timeout=0) == fits.end_offset
    journal.close()


@pytest.mark.parametrize("device_path", ["file"], indirect=True)
@pytest.mark.parametrize("sync_mode", [SyncMode.DIRECT_FDATASYNC], indirect=True)
def test_a_journal_written_in_one_sync_mode_replays_in_every_other(journal_settings):
    """The sync mode is how bytes reach the disk, not what they are: a journal
    written in any mode (the first, O_DIRECT + fdatasync, is what every release
    before the setting wrote) replays byte for byte in every mode and goes on
    taking appends."""
    modes = list(SyncMode)
    bodies: list[bytes] = []
    for n, mode in enumerate(modes + modes[:1]):
        journal, records = started(journal_settings(sync_mode=mode))
        try:
            assert [r.body for r in records] == bodies
            body = b"written in %s, round %d " % (mode.value.encode(), n) * 40
            journal.append_nowait(body).future.result(timeout=10)
            bodies.append(body)
        finally:
            journal.close()


def test_appends_of_one_block_share_one_future_that_wakes_every_waiter():
    """One future per group-commit block: its appends share it, it resolves with
    the block's last record end once synced, every thread waiting on it wakes,
    and it cannot be cancelled (it stands for other callers' appends too)."""
    settings = JournalSettings(device_path=Path("unused"), capacity_bytes=4 * MiB,
                               sliding_window_bytes_max=512 * KiB,
                               block_size_bytes_soft_limit=64 * KiB)
    journal = Journal.open(settings, device=MemoryDevice(8192 + settings.capacity_bytes))
    list(journal.replay())
    journal.start(background=False)
    appends = [journal.append_nowait(b"r%d" % i * 100) for i in range(8)]
    future = appends[0].future
    assert all(a.future is future for a in appends)
    assert journal.statistics().queue_depth == 8
    assert not future.cancel()
    with pytest.raises(TimeoutError):
        future.result(timeout=0.01)
    got: list[int] = []
    waiting = threading.Barrier(9)

    def wait() -> None:
        waiting.wait()
        got.append(future.result(timeout=10))

    threads = [threading.Thread(target=wait) for _ in range(8)]
    for thread in threads:
        thread.start()
    waiting.wait()
    assert journal.pump_write() and journal.pump_sync()
    for thread in threads:
        thread.join()
    assert got == [appends[-1].end_offset] * 8
    assert future.exception(timeout=0) is None
    assert journal.statistics().queue_depth == 0
    # The next append opens a new block: a future of its own.
    later = journal.append_nowait(b"later")
    assert later.future is not future and not later.future.done()
    journal.close()
    assert later.future.result(timeout=0) == later.end_offset
