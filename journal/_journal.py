"""The journal: ring layout, group commit, trim, and the recovery entry point."""

from __future__ import annotations

import enum
import functools
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

import crc32c

from common.errors import (
    DeviceBroken,
    EntryTooLarge,
    FormatMismatch,
    JournalFull,
    SyncTimeout,
    invariant,
)
from common.states import Moves, transition

from ._device import BlockDevice, DirectDevice, aligned_buffer
from ._header import (
    HEADER_AREA_SIZE_BYTES,
    HEADER_SLOT_COUNT,
    HEADER_SLOT_SIZE_BYTES,
    JournalHeader,
    ShutdownType,
    SlotClass,
    choose_header,
    decode_header,
    encode_header,
)
from ._record import (
    RECORD_HEADER_SIZE_BYTES,
    encode_one_part_table,
    encode_pad_header,
    encode_part_table,
    encode_record_header,
    record_body_bytes,
)
from ._recovery import RingReader, Scanner, ScanResult, align_up
from ._settings import ALIGNMENT_BYTES, JournalSettings
from ._types import Buffer, JournalAppend, JournalRecord, JournalStatistics, RecoveryReport

_log = logging.getLogger("ledgerd.journal")
_ZEROS = bytes(ALIGNMENT_BYTES)
# A group commit whose blocks carry at most this many on_synced hooks is
# resolved on the thread that synced it (the syncer, or the writer), when the
# acker has nothing in hand: handing it to the acker costs a thread wake-up (a
# futex and a GIL hand-over), more than running a few hooks and resolving one
# future per block (its waiters wake one another), and it is on the round trip
# of every group.
_INLINE_HOOKS_MAX = 4


class _State(enum.Enum):
    OPENED = "opened"  # header read; replay() not finished
    REPLAYED = "replayed"  # write position known; start() may run
    RUNNING = "running"
    CLOSING = "closing"
    CLOSED = "closed"


# close() may run in any state; only a running journal drains (CLOSING) first.
_MOVES: Moves[_State] = {
    _State.OPENED: {_State.REPLAYED, _State.CLOSED},
    _State.REPLAYED: {_State.RUNNING, _State.CLOSED},
    _State.RUNNING: {_State.CLOSING},
    _State.CLOSING: {_State.CLOSED},
}


class _BlockFuture(Future[int]):
    """The future every append of one block shares.

    Waiting threads pass a lock along instead of sleeping on the future's
    condition: set_result's notify_all would wake every waiter at once, only for
    them all to queue again on that condition's lock (and the GIL), two wake-ups
    each; here each waiter is woken once, by the one before it.  It cannot be
    cancelled: it stands for other callers' appends too, and for bytes that may
    already be on their way to the device.
    """

    def __init__(self) -> None:
        super().__init__()
        self._gate = threading.Lock()
        self._gate.acquire()  # released once, when the future is resolved
        # Set before the gate opens: a waiter the gate let through reads it
        # without the two trips through the future's condition a result() takes.
        self._value: int | None = None

    def _wait(self, timeout: float | None) -> None:
        if self.done():  # e.g. a done-callback, run before the gate opens
            return
        if self._gate.acquire(timeout=-1 if timeout is None else max(0.0, timeout)):
            self._gate.release()  # the next waiter's turn

    def result(self, timeout: float | None = None) -> int:
        value = self._value
        if value is None:
            self._wait(timeout)
            value = self._value
            if value is None:  # failed, or timed out
                return super().result(0)
        return value

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._wait(timeout)
        return super().exception(0)

    def cancel(self) -> bool:
        return False

    def set_result(self, result: int) -> None:
        self._value = result  # final already: the block's hooks have run
        super().set_result(result)
        self._gate.release()

    def set_exception(self, exception: BaseException | None) -> None:
        super().set_exception(exception)
        self._gate.release()


@dataclass(slots=True)
class _Block:
    """One group-commit block and everything its appends share: the block, not
    each append, owns the future, the hooks and the hand-overs between threads
    (one future made, resolved and handed to the acker per block)."""

    start: int  # 4 KiB aligned logical offset
    end: int  # end of the last record in it
    first_time: float  # monotonic time its first record was queued
    pieces: list[Buffer] = field(default_factory=list)
    # Resolved with ``end`` once a sync covers the block: every append in it.
    future: _BlockFuture = field(default_factory=_BlockFuture)
    hooks: list[Callable[[], None]] = field(default_factory=list)  # appends' on_synced
    record_count: int = 0


# (parts, body length, part table, its CRC32C): a record before its offset is known
_Framed = tuple[Sequence[Buffer], int, bytes, int]


def _resolve(blocks: list[_Block]) -> None:
    """Acknowledge synced blocks in order: each block's hooks, then its future."""
    for block in blocks:
        for on_synced in block.hooks:
            on_synced()
        block.future.set_result(block.end)


def _new_journal_id() -> int:
    while True:
        journal_id = int.from_bytes(os.urandom(8), "big")
        if journal_id:
            return journal_id


class Journal:
    """Write-ahead journal on a ring of a block device; see ``journal/__init__``."""

    def __init__(self, *, settings: JournalSettings, device: BlockDevice, owns_device: bool,
                 header: JournalHeader, fresh: bool, clock: Callable[[], float]) -> None:
        self._settings = settings
        self._device = device
        self._owns_device = owns_device
        self._clock = clock
        self._capacity = header.capacity_bytes
        self._journal_id = header.journal_id
        self._generation = header.generation
        self._header_trim = header.trim_offset
        self._recovery_window = header.sliding_window_max_length
        self._clean_shutdown = header.shutdown_type is ShutdownType.CLEAN
        window = settings.sliding_window_bytes_max
        # A block never exceeds the sliding window, so a lone block always fits in it
        # and the recovery window stays sound (no valid record beyond F + W).
        self._block_max = window
        self._body_length_max = window - ALIGNMENT_BYTES - RECORD_HEADER_SIZE_BYTES
        self._one_part_length_max = self._body_length_max - record_body_bytes(1, 0)
        self._block_soft = settings.block_size_bytes_soft_limit
        # Blocks queued behind a busy device are written together up to this size.
        self._write_bytes_max = min(window, 4 * self._block_soft)
        self._group_wait_s = settings.group_wait_s_max

        self._lock = threading.Lock()
        self._writer_cv = threading.Condition(self._lock)
        self._syncer_cv = threading.Condition(self._lock)
        self._synced_cv = threading.Condition(self._lock)
        self._space_cv = threading.Condition(self._lock)
        self._acker_cv = threading.Condition(self._lock)
        self._header_lock = threading.Lock()
        self._close_lock = threading.Lock()
        self._header_buffer = aligned_buffer(HEADER_SLOT_SIZE_BYTES)
        self._write_buffer = aligned_buffer(self._block_max)
        self._write_view = memoryview(self._write_buffer)

        self._state = _State.REPLAYED if fresh else _State.OPENED
        self._replay_started = fresh
        self._fresh_unreplayed = fresh
        self._background = True
        self._threads: list[threading.Thread] = []
        self._failure: DeviceBroken | None = None
        self._scan: ScanResult | None = None
        self._report: RecoveryReport | None = None
        if fresh:
            self._report = RecoveryReport(
                clean_shutdown=True, start_offset=0, end_offset=0, write_offset=0,
                record_count=0, bytes=0, holes=(), torn_tail_offset=None, duration_s=0.0)
            self._scan = ScanResult(end_offset=0, write_offset=0)

        # Offsets (logical).  Invariant I3: trim <= synced <= appended.
        self._trim = header.trim_offset
        self._appended = 0
        self._next_block_start = 0
        self._written_end = 0  # aligned end of the last block written
        self._written_record_end = 0  # end of the last record in it
        self._synced_end = 0  # aligned end of the last block synced
        self._synced_offset = 0
        self._open: _Block | None = None
        self._sealed: deque[_Block] = deque()
        self._unacked: deque[_Block] = deque()  # blocks whose future is unresolved
        self._unacked_record_count = 0
        self._writing = False
        self._writer_done = False
        # Synced appends whose futures the acker thread resolves, in offset order.
        self._acks: deque[list[_Block]] = deque()
        self._acking = False  # the acker is resolving a batch it took
        self._syncing = False  # a sync (by the syncer, or by the writer itself) runs
        self._syncer_done = False
        self._record_count = 0
        self._block_count = 0
        self._bytes_written = 0
        self._sync_count = 0

    # --- opening ---------------------------------------------------------

    @classmethod
    def open(cls, settings: JournalSettings, *, device: BlockDevice | None = None,
             clock: Callable[[], float] = time.time) -> Journal:
        """Open (or format, when both header slots are zero) the journal.

        Without ``device`` a :class:`DirectDevice` is opened on ``settings.device_path``
        (a missing path becomes a preallocated file) and the journal closes it; a
        device passed in stays the caller's.
        """
        needed = HEADER_AREA_SIZE_BYTES + settings.capacity_bytes
        owns = device is None
        if device is None:
            device = DirectDevice(settings.device_path, create_size_bytes=needed,
                                  sync_mode=settings.sync_mode)
        try:
            return cls._open_on(settings, device, owns, clock, needed)
        except BaseException:
            if owns:
                device.close()
            raise

    @classmethod
    def _open_on(cls, settings: JournalSettings, device: BlockDevice, owns: bool,
                 clock: Callable[[], float], needed: int) -> Journal:
        if settings.capacity_bytes <= 0 or settings.capacity_bytes % ALIGNMENT_BYTES:
            raise FormatMismatch(
                f"journal_capacity={settings.capacity_bytes} must be a positive multiple of "
                f"{ALIGNMENT_BYTES}")
        if device.size_bytes < needed:
            raise FormatMismatch(
                f"journal device {device.path} holds {device.size_bytes} bytes but "
                f"journal_capacity={settings.capacity_bytes} needs {needed} "
                f"({HEADER_AREA_SIZE_BYTES} header bytes + capacity); use a larger device "
                "or a smaller journal_capacity")
        checks = [
            decode_header(device.pread(i * HEADER_SLOT_SIZE_BYTES, HEADER_SLOT_SIZE_BYTES),
                          slot_index=i)
            for i in range(HEADER_SLOT_COUNT)
        ]
        header = choose_header(checks, path=device.path)
        fresh = header is None
        if header is None:
            header = JournalHeader(
                journal_id=_new_journal_id(), generation=0,
                capacity_bytes=settings.capacity_bytes, trim_offset=0,
                last_write_time_us=0,
                sliding_window_max_length=settings.sliding_window_bytes_max,
                shutdown_type=ShutdownType.CLEAN)
        elif header.capacity_bytes != settings.capacity_bytes:
            raise FormatMismatch(
                f"journal device {device.path} was formatted with capacity "
                f"{header.capacity_bytes} bytes but journal_capacity={settings.capacity_bytes};"
                " capacity is fixed at format time (set it back, or use a new device)")
        else:
            for i, check in enumerate(checks):
                if check.klass is SlotClass.INVALID:
                    _log.warning("journal %s: header slot %d is damaged (%s); using generation"
                                 " %d from the other slot", device.path, i, check.reason,
                                 header.generation)
        journal = cls(settings=settings, device=device, owns_device=owns, header=header,
                      fresh=fresh, clock=clock)
        if fresh:
            _log.info("formatting journal %s: capacity %d bytes, id %#018x", device.path,
                      settings.capacity_bytes, header.journal_id)
            journal._persist_header(ShutdownType.CLEAN)
        return journal

    # --- ring I/O ----------------------------------------------------------

    def _read_ring(self, start: int, size: int) -> bytes:
        parts = []
        while size > 0:
            physical = start % self._capacity
            n = min(size, self._capacity - physical)
            parts.append(self._device.pread(HEADER_AREA_SIZE_BYTES + physical, n))
            start += n
            size -= n
        return b"".join(parts)

    def _write_ring(self, start: int, data: bytes | memoryview) -> None:
        # A block crossing the end of the ring is split in two writes; both stay
        # 4 KiB aligned because the capacity is a multiple of 4 KiB.
        done, total = 0, len(data)
        while done < total:
            physical = (start + done) % self._capacity
            n = min(total - done, self._capacity - physical)
            self._device.pwrite(HEADER_AREA_SIZE_BYTES + physical, data[done:done + n])
            done += n

    def _persist_header(self, shutdown: ShutdownType) -> None:
        """Write the header to both slots, one after the other, each synced (I5).

        A torn write damages one slot while the other still holds the previous
        state, and after both writes either slot alone is enough (so one slot
        damaged at rest loses nothing).  Caller holds ``_header_lock`` or is alone.
        """
        for _ in range(HEADER_SLOT_COUNT):
            self._generation += 1
            header = JournalHeader(
                journal_id=self._journal_id, generation=self._generation,
                capacity_bytes=self._capacity, trim_offset=self._header_trim,
                last_write_time_us=int(self._clock() * 1_000_000),
                sliding_window_max_length=self._recovery_window, shutdown_type=shutdown)
            self._header_buffer[:] = encode_header(header)
            view = memoryview(self._header_buffer)
            try:
                self._device.pwrite(header.slot_index * HEADER_SLOT_SIZE_BYTES, view)
            finally:
                view.release()
            self._device.sync()

    # --- recovery ----------------------------------------------------------

    def replay(self) -> Iterator[JournalRecord]:
        """The live records from the trim offset, in logical order (call once, before
        start()).  Raises CorruptRecord (after yielding the records before the
        damage) when the log is damaged in a way a crash cannot explain."""
        if self._fresh_unreplayed:
            # A journal formatted by this open() holds nothing to replay.
            self._fresh_unreplayed = False
            return iter(())
        invariant(not self._replay_started, "replay() runs once, before start()")
        self._replay_started = True
        scanner = Scanner(
            RingReader(self._read_ring), path=self._device.path, start=self._trim,
            capacity=self._capacity, journal_id=self._journal_id,
            window=self._recovery_window, clean=self._clean_shutdown,
            data_offset=HEADER_AREA_SIZE_BYTES)
        return self._replay(scanner)

    def _replay(self, scanner: Scanner) -> Iterator[JournalRecord]:
        yield from scanner.records()
        invariant(scanner.result is not None and scanner.report is not None,
                  "scanner finished without a result")
        assert scanner.result is not None and scanner.report is not None  # for mypy
        self._scan, self._report = scanner.result, scanner.report
        report = self._report
        if report.holes or report.torn_tail_offset is not None:
            _log.warning(
                "journal %s: unclean shutdown left holes at %s and torn tail at %s; "
                "they will be repaired (%d records recovered)", self._device.path,
                list(report.holes), report.torn_tail_offset, report.record_count)
        with self._lock:
            self._appended = self._synced_offset = report.write_offset
            self._next_block_start = self._written_end = report.write_offset
            self._written_record_end = self._synced_end = report.write_offset
            self._state = transition(self._state, _State.REPLAYED, _MOVES)

    @property
    def recovery_report(self) -> RecoveryReport:
        invariant(self._report is not None, "recovery_report needs a finished replay()")
        assert self._report is not None
        return self._report

    # --- lifecycle ---------------------------------------------------------

    def start(self, *, background: bool = True) -> None:
        """Repair what recovery found, mark the header UNCLEAN, start committing.

        ``background=False`` starts no threads: the owner drives group commit with
        :meth:`pump_write` and :meth:`pump_sync` (deterministic simulation).
        """
        with self._close_lock:
            self._fresh_unreplayed = False
            invariant(self._state is _State.REPLAYED,
                      f"start() needs a finished replay(), journal is {self._state.value}")
            assert self._scan is not None
            self._repair(self._scan)
            self._recovery_window = max(self._recovery_window,
                                        self._settings.sliding_window_bytes_max)
            with self._header_lock:
                self._persist_header(ShutdownType.UNCLEAN)
            self._background = background
            with self._lock:
                self._state = transition(self._state, _State.RUNNING, _MOVES)
            if background:
                self._threads = [
                    threading.Thread(target=self._writer_loop, name="journal-writer",
                                     daemon=True),
                    threading.Thread(target=self._syncer_loop, name="journal-syncer",
                                     daemon=True),
                    threading.Thread(target=self._acker_loop, name="journal-acker",
                                     daemon=True),
                ]
                for thread in self._threads:
                    thread.start()

    def _repair(self, scan: ScanResult) -> None:
        """R5: pad holes, zero torn bytes; synced before any new record is written,
        so the log is contiguous again and a later clean shutdown sees no damage."""
        if not scan.repairs:
            return
        for repair in scan.repairs:
            sector = repair.start - repair.start % ALIGNMENT_BYTES
            if repair.kind == "pad":
                data = encode_pad_header(hole_length=repair.end - repair.start,
                                         logical_offset=repair.start,
                                         journal_id=self._journal_id)
                self._write_ring(sector, data + _ZEROS[len(data):])
            else:
                invariant(repair.end <= sector + ALIGNMENT_BYTES, "zero repair spans sectors")
                sector_bytes = bytearray(self._read_ring(sector, ALIGNMENT_BYTES))
                sector_bytes[repair.start - sector:repair.end - sector] = _ZEROS[
                    : repair.end - repair.start]
                self._write_ring(sector, bytes(sector_bytes))
        self._device.sync()
        _log.warning("journal %s: applied %d recovery repairs", self._device.path,
                     len(scan.repairs))

    def close(self) -> None:
        """Write and sync everything queued, stop the threads, mark the header CLEAN
        (unless the journal broke).  Idempotent.  Raises DeviceBroken when the
        CLEAN header cannot be written (resources are released all the same)."""
        with self._close_lock:
            with self._lock:
                if self._state is _State.CLOSED:
                    return
                was_running = self._state is _State.RUNNING
                if was_running:
                    self._state = transition(self._state, _State.CLOSING, _MOVES)
                    self._writer_cv.notify_all()
                    self._syncer_cv.notify_all()
            try:
                if was_running:
                    if self._background:
                        for thread in self._threads:
                            thread.join()
                    else:
                        while self.pump_write() or self.pump_sync():
                            pass
                    if self._failure is None:
                        with self._header_lock:
                            try:
                                self._persist_header(ShutdownType.CLEAN)
                            except DeviceBroken as exc:
                                self._fail(exc)
                                raise
            finally:
                with self._lock:
                    self._state = transition(self._state, _State.CLOSED, _MOVES)
                    self._space_cv.notify_all()
                    self._synced_cv.notify_all()
                self._release_buffers()
                if self._owns_device:
                    self._device.close()

    def _release_buffers(self) -> None:
        # A device error's traceback may still reference slices of these buffers;
        # then the mmap cannot be closed now and the garbage collector frees it.
        try:
            self._write_view.release()
            self._write_buffer.close()
            self._header_buffer.close()
        except BufferError:
            pass

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- appending -----------------------------------------------------------

    def _position_locked(self, record_size: int) -> tuple[int, bool]:
        """Where a record of ``record_size`` bytes would go, and whether the open
        block must be sealed first (it would grow past the sliding window)."""
        block = self._open
        if block is None:
            return self._next_block_start, False
        if align_up(block.end + record_size) - block.start > self._block_max:
            return align_up(block.end), True
        return block.end, False

    def _seal_locked(self) -> None:
        block = self._open
        invariant(block is not None, "seal without an open block")
        assert block is not None
        self._sealed.append(block)
        self._next_block_start = align_up(block.end)
        self._open = None

    def append_nowait(self, parts: Buffer | Sequence[Buffer], *,
                      crcs: Sequence[int] | None = None,
                      on_synced: Callable[[], None] | None = None) -> JournalAppend:
        """Queue one record of one or more parts; its logical offset is assigned now (I4).

        ``crcs`` are the parts' CRC32C when the caller already has them (computed
        here otherwise); the parts are referenced, not copied, until the writer
        thread copies them into its aligned buffer, so the caller must not change
        them.  ``on_synced`` runs on a journal thread (the acker, or for a small
        group the thread that synced it) once an fdatasync covers the record,
        before ``future`` resolves: what it does is visible to whoever waits on
        the future.  Neither it nor a callback of the future may wait for the
        journal.

        Raises JournalFull when the ring has no room for it until a trim (never
        overwrites untrimmed data), EntryTooLarge when it can never fit a block,
        DeviceBroken once the journal has failed.
        """
        if isinstance(parts, bytes | bytearray | memoryview):
            # One body, the common append: framed without the per-part lists.
            length = len(parts)
            if length > self._one_part_length_max:
                raise EntryTooLarge(
                    f"journal record of {record_body_bytes(1, length)} bytes exceeds "
                    f"{self._body_length_max} (journal sliding window minus one block)")
            crc = crc32c.crc32c(parts) if crcs is None else crcs[0]
            table, table_crc = encode_one_part_table(length, crc)
            framed: _Framed = ((parts,), record_body_bytes(1, length), table, table_crc)
        else:
            if crcs is None:
                crcs = [crc32c.crc32c(p) for p in parts]
            framed = self._frame(parts, crcs)
        with self._lock:
            self._check_running_locked()
            offset, end, block = self._queue_locked(framed)
            if on_synced is not None:
                block.hooks.append(on_synced)
        return JournalAppend(offset, end, block.future)

    def append_many_nowait(self, records: Sequence[tuple[Sequence[Buffer], Sequence[int]]], *,
                           on_synced: Callable[[int], None] | None = None) -> JournalAppend:
        """Queue consecutive records, each ``(parts, crcs)`` as for
        :meth:`append_nowait`, under one lock acquisition and with one future:
        as many of them, from the first, as fit (``record_count`` says how many;
        a record that finds the ring full or is too large ends the run, and
        raises only when it is the first, so nothing is queued then).  Each is a
        record of its own on the device, all or nothing on its own; the future
        resolves once the last queued one is synced, after
        ``on_synced(record_count)`` ran.  For callers with many small records
        ready at once (append streams), which would otherwise pay a lock, a
        future and a wake-up per record."""
        framed: list[_Framed] = []
        for parts, crcs in records:
            try:
                framed.append(self._frame(parts, crcs))
            except EntryTooLarge:
                if not framed:
                    raise
                break
        invariant(bool(framed), "append_many_nowait needs at least one record")
        with self._lock:
            self._check_running_locked()
            offset, end, block = self._queue_locked(framed[0])
            count = 1
            for record in framed[1:]:
                try:
                    _, end, block = self._queue_locked(record)
                except JournalFull:
                    break
                count += 1
            # Blocks are synced and resolved in order: the last one's future and
            # hooks come after every earlier block's.
            if on_synced is not None:
                block.hooks.append(functools.partial(on_synced, count))
        return JournalAppend(offset, end, block.future, record_count=count)

    def _frame(self, parts: Sequence[Buffer], crcs: Sequence[int]) -> _Framed:
        """What a record needs before its offset is known (no lock held)."""
        lengths = [len(p) for p in parts]
        length = record_body_bytes(len(lengths), sum(lengths))
        if length > self._body_length_max:
            raise EntryTooLarge(
                f"journal record of {length} bytes exceeds {self._body_length_max} "
                "(journal sliding window minus one block)")
        table, table_crc = encode_part_table(lengths, crcs)
        return parts, length, table, table_crc

    def _check_running_locked(self) -> None:
        if self._failure is not None:
            raise DeviceBroken(f"journal {self._device.path} is broken: "
                               f"{self._failure}") from self._failure
        if self._state is not _State.RUNNING:
            invariant(False, f"append to a journal that is {self._state.value}")

    def _queue_locked(self, framed: _Framed) -> tuple[int, int, _Block]:
        """Give a framed record its offset and put it into the open block:
        (offset, end, the block).  JournalFull changes nothing."""
        parts, length, table, table_crc = framed
        size = RECORD_HEADER_SIZE_BYTES + length
        offset, seal_first = self._position_locked(size)
        end = offset + size
        if align_up(end) - self._trim > self._capacity:
            # Back-pressure reaches clients as is: no path in the message.
            raise JournalFull(
                f"journal ring is full: {self._capacity} bytes, "
                f"trim offset {self._trim}, record needs up to {align_up(end)}")
        if seal_first:
            self._seal_locked()
        block = self._open
        if block is None:
            block = self._open = _Block(offset, offset, time.monotonic())
            self._unacked.append(block)
            self._writer_cv.notify()
        pieces = block.pieces
        pieces.append(encode_record_header(
            body_length=length, logical_offset=offset, journal_id=self._journal_id,
            table_crc32c=table_crc))
        pieces.append(table)
        pieces.extend(parts)
        block.end = self._appended = end
        block.record_count += 1
        self._record_count += 1
        self._unacked_record_count += 1
        if end - block.start >= self._block_soft:
            self._seal_locked()
            self._writer_cv.notify()
        return offset, end, block

    def wait_for_space(self, nbytes: int, timeout_s: float) -> bool:
        """Wait until a record with an ``nbytes`` body fits the ring (a trim freed
        space); False on timeout or when the journal is broken or closed."""
        size = RECORD_HEADER_SIZE_BYTES + nbytes

        def fits() -> bool:
            offset, _ = self._position_locked(size)
            return align_up(offset + size) - self._trim <= self._capacity

        with self._lock:
            self._space_cv.wait_for(
                lambda: fits() or self._failure is not None or self._state is _State.CLOSED,
                timeout_s)
            return fits() and self._failure is None and self._state is not _State.CLOSED

    def wait_synced(self, offset: int, timeout_s: float | None = None) -> None:
        """Block until ``synced_offset >= offset``; DeviceBroken if the journal
        fails first, SyncTimeout after ``timeout_s``."""
        with self._lock:
            self._synced_cv.wait_for(
                lambda: self._synced_offset >= offset or self._failure is not None
                or self._state is _State.CLOSED, timeout_s)
            if self._synced_offset >= offset:
                return
            if self._failure is not None:
                raise DeviceBroken(f"journal {self._device.path} is broken: "
                                   f"{self._failure}") from self._failure
            if self._state is _State.CLOSED:
                raise DeviceBroken(f"journal {self._device.path} closed before offset "
                                   f"{offset} was synced")
            raise SyncTimeout(f"journal offset {offset} not synced within {timeout_s} s")

    def trim(self, offset: int) -> None:
        """Free the ring before ``offset``: persist the header (I5), then wake
        wait_for_space.  ``offset`` must lie in [trim_offset, synced_offset]."""
        with self._header_lock:
            with self._lock:
                invariant(self._trim <= offset <= self._synced_offset,
                          f"trim to {offset} outside [{self._trim}, {self._synced_offset}]")
                if self._failure is not None:
                    raise DeviceBroken(f"journal {self._device.path} is broken: "
                                       f"{self._failure}") from self._failure
                if offset == self._trim:
                    return
                shutdown = (ShutdownType.UNCLEAN if self._state is _State.RUNNING
                            else ShutdownType.CLEAN if self._clean_shutdown
                            else ShutdownType.UNCLEAN)
            self._header_trim = offset
            try:
                self._persist_header(shutdown)
            except DeviceBroken as exc:
                self._fail(exc)
                raise
            with self._lock:
                self._trim = offset
                self._space_cv.notify_all()

    # --- group commit ----------------------------------------------------

    def _take_blocks_locked(self, *, force: bool) -> list[_Block]:
        """The next blocks to write in one pwrite, if any may be written now.

        The open block is sealed when it waited ``group_wait_s_max``, when the
        device is idle (nothing written but unsynced: a lone writer gets no added
        latency, and under load records pile up while the previous sync runs), or
        when ``force``.  Sealed blocks queued behind a busy device are contiguous
        in the ring, so they go out together, up to ``_write_bytes_max``: one
        larger write costs the device much less than several small ones.  A block
        is taken only while the bytes written but unsynced stay within the
        sliding window (I6).
        """
        if self._failure is not None:
            return []
        block = self._open
        if block is not None and not self._sealed and (
                force or self._written_end == self._synced_end
                or time.monotonic() - block.first_time >= self._group_wait_s):
            self._seal_locked()
        blocks: list[_Block] = []
        while self._sealed:
            end = align_up(self._sealed[0].end)
            if end - self._synced_end > self._block_max or (
                    blocks and end - blocks[0].start > self._write_bytes_max):
                break
            blocks.append(self._sealed.popleft())
        self._writing = bool(blocks)
        return blocks

    def _write_blocks(self, blocks: list[_Block]) -> None:
        start = blocks[0].start
        view = self._write_view
        at = 0
        for block in blocks:
            invariant(block.start == start + at, "blocks written together are contiguous")
            # One join in C, then one copy into the aligned buffer: cheaper than a
            # Python slice assignment per piece (three a record).
            data = b"".join(block.pieces)
            view[at:at + len(data)] = data
            at += len(data)
            invariant(start + at == block.end, "block pieces disagree with its offsets")
            padded = align_up(block.end) - start
            view[at:padded] = _ZEROS[: padded - at]
            at = padded
        self._write_ring(start, view[:at])
        with self._lock:
            self._written_end = start + at
            self._written_record_end = blocks[-1].end
            self._writing = False
            self._block_count += len(blocks)
            self._bytes_written += at
            # An idle device: the writer syncs what it wrote itself (the syncer
            # is for writes that land while a sync runs), one thread wake-up
            # less on the round trip of every group that finds the device idle.
            inline = self._background and not self._syncing
            if not inline:
                self._syncer_cv.notify()
        if inline:
            self._sync_once(wait=False)

    def _sync_once(self, *, wait: bool) -> bool:
        """Sync what is written, if no other sync runs (the syncer's, or the
        writer's own), and acknowledge it.  A sync holds ``_syncing`` until its
        appends are published and, when it resolves them itself, resolved:
        syncs and their acks stay in logical-offset order (I4)."""
        with self._lock:
            while wait and self._failure is None and not self._writer_done and (
                    self._written_end == self._synced_end or self._syncing):
                self._syncer_cv.wait()
            if self._failure is not None or self._written_end == self._synced_end \
                    or self._syncing:
                return False
            target_end, target_offset = self._written_end, self._written_record_end
            self._syncing = True
        done: list[_Block] = []
        try:
            # Everything written before this sync begins is covered by it.
            self._device.sync()
            with self._lock:
                self._synced_end, self._synced_offset = target_end, target_offset
                self._sync_count += 1
                hooks = 0
                while self._unacked and self._unacked[0].end <= target_offset:
                    block = self._unacked.popleft()
                    done.append(block)
                    self._unacked_record_count -= block.record_count
                    hooks += len(block.hooks)
                self._writer_cv.notify()
                self._synced_cv.notify_all()
                if self._background and done and (
                        hooks > _INLINE_HOOKS_MAX or self._acks or self._acking):
                    # Running many appends' hooks (and the callbacks they feed)
                    # takes longer than an fdatasync under load: the acker does it
                    # while the next sync already runs.  A few, with the acker
                    # idle, are run here: handing them over costs a wake-up.
                    self._acks.append(done)
                    self._acker_cv.notify()
                    done = []
            _resolve(done)
        finally:
            with self._lock:
                self._syncing = False
                self._syncer_cv.notify()  # what was written meanwhile is the syncer's
        return True

    def _writer_loop(self) -> None:
        try:
            while True:
                with self._lock:
                    while True:
                        closing = self._state is _State.CLOSING
                        blocks = self._take_blocks_locked(force=closing)
                        if blocks or self._failure is not None:
                            break
                        if closing and self._open is None and not self._sealed:
                            self._writer_done = True
                            self._syncer_cv.notify()
                            return
                        timeout = None
                        if self._open is not None and not self._sealed:
                            timeout = max(0.0, self._open.first_time + self._group_wait_s
                                          - time.monotonic())
                        self._writer_cv.wait(timeout)
                if not blocks:
                    return
                self._write_blocks(blocks)
        except BaseException as exc:
            self._fail(exc)

    def _syncer_loop(self) -> None:
        try:
            while self._sync_once(wait=True) or (
                    self._failure is None and not self._writer_done):
                pass
        except BaseException as exc:
            self._fail(exc)
        finally:
            with self._lock:
                self._syncer_done = True
                self._acker_cv.notify()

    def _acker_loop(self) -> None:
        """Resolve synced appends' futures (durable already: even after a failure
        of the journal, these were covered by a successful fdatasync)."""
        while True:
            with self._lock:
                self._acking = False
                self._acker_cv.wait_for(lambda: bool(self._acks) or self._syncer_done)
                if not self._acks:
                    return
                batch = self._acks.popleft()
                self._acking = True
            _resolve(batch)

    def pump_write(self) -> bool:
        """Write the next block now (``start(background=False)`` only)."""
        invariant(not self._background, "pump_write() is for start(background=False)")
        with self._lock:
            blocks = self._take_blocks_locked(force=True)
        if not blocks:
            return False
        try:
            self._write_blocks(blocks)
        except DeviceBroken as exc:
            self._fail(exc)
            return False
        return True

    def pump_sync(self) -> bool:
        """Sync what was written and resolve its futures (``background=False``)."""
        invariant(not self._background, "pump_sync() is for start(background=False)")
        try:
            return self._sync_once(wait=False)
        except DeviceBroken as exc:
            self._fail(exc)
            return False

    def _fail(self, exc: BaseException) -> None:
        """Break the journal: every pending and future append fails, nothing is acked."""
        with self._lock:
            if self._failure is None:
                if isinstance(exc, DeviceBroken):
                    self._failure = exc
                else:
                    self._failure = DeviceBroken(f"journal {self._device.path} failed: {exc!r}")
                    self._failure.__cause__ = exc
                _log.error("journal %s is broken: %s", self._device.path, self._failure)
            failure = self._failure
            pending = [block.future for block in self._unacked]
            self._unacked.clear()
            self._unacked_record_count = 0
            self._sealed.clear()
            self._open = None
            self._writer_done = True
            for cv in (self._writer_cv, self._syncer_cv, self._synced_cv, self._space_cv):
                cv.notify_all()
        for future in pending:
            error = DeviceBroken(f"journal {self._device.path} is broken: {failure}")
            error.__cause__ = failure
            future.set_exception(error)

    # --- observation -----------------------------------------------------

    @property
    def path(self) -> str:
        return self._device.path

    @property
    def journal_id(self) -> int:
        return self._journal_id

    @property
    def capacity_bytes(self) -> int:
        return self._capacity

    @property
    def appended_offset(self) -> int:
        return self._appended

    @property
    def synced_offset(self) -> int:
        return self._synced_offset

    @property
    def trim_offset(self) -> int:
        return self._trim

    @property
    def broken(self) -> bool:
        return self._failure is not None

    def statistics(self) -> JournalStatistics:
        with self._lock:
            next_write, _ = self._position_locked(0)
            return JournalStatistics(
                appended_offset=self._appended, synced_offset=self._synced_offset,
                trim_offset=self._trim, capacity_bytes=self._capacity,
                used_bytes=align_up(next_write) - self._trim,
                record_count=self._record_count, block_count=self._block_count,
                bytes_written=self._bytes_written, sync_count=self._sync_count,
                queue_depth=self._unacked_record_count)
