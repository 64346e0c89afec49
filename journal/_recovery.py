"""Recovery: scan the ring from the trim offset, classify what follows the log.

The scan reads through a :class:`RingReader` and never writes; it returns the
records and a :class:`ScanResult` holding the repairs the journal must apply
before it writes again.  The rules (numbered as in ``journal/__init__``, R1-R6):

R1  From the trim offset, follow records while they are VALID.  At a position
    that is not 4 KiB aligned, bytes that are zero up to the next boundary are
    block padding: skip to that boundary.
R2  The first other position F is the first invalid position (a hole or the end).
    Scan every aligned position in [F, F + W) (W = sliding_window_max_length of
    the header): VALID records found there were written in the same in-flight
    window, out of order; follow their chains and return them too.
R3  Then look one more window ahead, [F + W, F + 2W): a VALID record there cannot
    come from the last in-flight window (the writer never has more than W bytes
    written but unsynced), so the bytes at F are corruption in the middle of the
    log: raise CorruptRecord(path, F).
R4  After a CLEAN shutdown nothing was in flight: a CORRUPT record (right magic,
    offset and journal id, but a CRC fails) anywhere, or a hole followed by VALID
    records, is corruption: raise CorruptRecord.
R5  After an UNCLEAN shutdown, CORRUPT records and holes within the window are
    what a crash leaves behind: repair them (pad records over holes, zeros over
    torn bytes past the last valid record) and report them.
R6  Writing resumes at the 4 KiB aligned end of the last VALID record.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from common.errors import CorruptRecord

from ._record import (
    RECORD_HEADER_SIZE_BYTES,
    RecordCheck,
    RecordClass,
    check_record_body,
    check_record_header,
)
from ._types import JournalRecord, RecoveryReport

BLOCK = 4096
_CHUNK_BYTES = 4 << 20


def align_up(offset: int) -> int:
    return -(-offset // BLOCK) * BLOCK


class Verdict(enum.Enum):
    END = "end"  # the log simply ends; nothing to repair
    REPAIR = "repair"  # crash leftovers: fill holes, zero torn bytes
    CORRUPT = "corrupt"  # raise CorruptRecord


def decide(*, clean: bool, corrupt_seen: bool, valid_after_hole: bool,
           valid_beyond_window: bool) -> Verdict:
    """The recovery decision table (R3-R5), over every input."""
    if valid_beyond_window:
        return Verdict.CORRUPT
    if clean:
        return Verdict.CORRUPT if (corrupt_seen or valid_after_hole) else Verdict.END
    return Verdict.REPAIR if (corrupt_seen or valid_after_hole) else Verdict.END


class RingReader:
    """Reads logical ranges of the ring through a cache of one aligned chunk.

    When a read moves forward past the cached chunk (the replay's common
    case), the chunk after the new one is read ahead on one background thread,
    so the device read overlaps with checking and applying the records already
    in memory instead of adding to it.  A record straddling two chunks is the
    only thing joined; chunks themselves are never copied.
    """

    def __init__(self, read_ring: Callable[[int, int], bytes], *,
                 chunk_bytes: int = _CHUNK_BYTES) -> None:
        self._read_ring = read_ring  # (aligned logical offset, aligned size) -> bytes
        self._chunk = chunk_bytes
        self._start = 0
        self._data = b""
        self._ahead: tuple[int, Future[bytes]] | None = None
        self._pool: ThreadPoolExecutor | None = None

    def get(self, offset: int, size: int) -> bytes:
        end = self._start + len(self._data)
        if self._start <= offset and offset + size <= end:
            i = offset - self._start
            return self._data[i:i + size]
        if self._start <= offset < end:
            # Straddles the chunk end: take the head from this chunk and move on.
            head = self._data[offset - self._start:]
            self._move_to(end, offset + size)
            return head + self._data[:size - len(head)]
        self._move_to(offset - offset % BLOCK, offset + size)
        i = offset - self._start
        return self._data[i:i + size]

    def _move_to(self, start: int, need_end: int) -> None:
        """Cache the chunk at ``start`` (at least up to ``need_end``); read the
        next one ahead when this is a move forward."""
        forward = start >= self._start
        ahead, self._ahead = self._ahead, None
        data = b""
        if ahead is not None and ahead[0] == start:
            data = ahead[1].result()  # a failed read-ahead raises here, once needed
        if len(data) < need_end - start:
            data = self._read_ring(start, max(align_up(need_end) - start, self._chunk))
        self._data, self._start = data, start
        if forward:
            self._read_ahead(start + len(data))

    def _read_ahead(self, start: int) -> None:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="journal-replay-read")
        self._ahead = (start, self._pool.submit(self._read_ring, start, self._chunk))

    def close(self) -> None:
        """Stop the read-ahead thread (waits for a read in progress)."""
        self._ahead = None
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


@dataclass(frozen=True, slots=True)
class Repair:
    """One write recovery applies before new data: a pad record or zeros."""

    kind: str  # "pad" (aligned [start, end) becomes one pad record) or "zero"
    start: int
    end: int


@dataclass(slots=True)
class ScanResult:
    end_offset: int
    write_offset: int
    record_count: int = 0
    body_bytes: int = 0
    holes: list[int] = field(default_factory=list)
    torn_tail_offset: int | None = None
    repairs: list[Repair] = field(default_factory=list)


_Follow = Generator[JournalRecord, None, tuple[int, RecordCheck | None]]


class Scanner:
    def __init__(self, reader: RingReader, *, path: str, start: int, capacity: int,
                 journal_id: int, window: int, clean: bool, data_offset: int) -> None:
        self._reader = reader
        self._capacity = capacity
        self._data_offset = data_offset
        self._path = path
        self._start = start
        self._limit = start + capacity
        self._journal_id = journal_id
        self._window = window
        self._clean = clean
        self._last_end = start
        self.result: ScanResult | None = None
        self.report: RecoveryReport | None = None

    def _check(self, pos: int) -> RecordCheck:
        head = check_record_header(
            self._reader.get(pos, RECORD_HEADER_SIZE_BYTES), expected_offset=pos,
            journal_id=self._journal_id, body_length_max=self._window)
        if head.klass is not RecordClass.VALID:
            return RecordCheck(head.klass, head.reason)
        if head.pad:
            return check_record_body(head, b"")
        return check_record_body(
            head, self._reader.get(pos + RECORD_HEADER_SIZE_BYTES, head.body_length))

    def _is_padding(self, pos: int) -> bool:
        return not any(self._reader.get(pos, align_up(pos) - pos))

    def _follow(self, pos: int, stop: int) -> _Follow:
        """R1: yield the chain of VALID records from ``pos``; return where it broke
        and why (None when it reached ``stop``)."""
        while pos < stop:
            check = self._check(pos)
            if check.klass is RecordClass.VALID:
                if not check.pad:
                    yield JournalRecord(pos, pos + check.size_bytes, check.parts, check.crcs)
                pos += check.size_bytes
                self._last_end = pos
            elif pos % BLOCK and check.klass is RecordClass.END and self._is_padding(pos):
                pos = align_up(pos)
            else:
                return pos, check
        return pos, None

    def records(self) -> Iterator[JournalRecord]:
        """Yield the live records in logical order; fill ``result`` and ``report``."""
        try:
            yield from self._records()
        finally:
            self._reader.close()

    def _records(self) -> Iterator[JournalRecord]:
        began = time.monotonic()
        result = ScanResult(end_offset=self._start, write_offset=align_up(self._start))
        chain = self._follow(self._start, self._limit)
        while True:
            try:
                record = next(chain)
            except StopIteration as stop:
                first, bad = stop.value
                break
            result.record_count += 1
            result.body_bytes += record.body_length
            yield record
        if bad is not None:
            for record in self._scan_window(first, bad, result):
                result.record_count += 1
                result.body_bytes += record.body_length
                yield record
        result.end_offset = self._last_end
        result.write_offset = align_up(self._last_end)
        self.result = result
        self.report = RecoveryReport(
            clean_shutdown=self._clean, start_offset=self._start, end_offset=self._last_end,
            write_offset=result.write_offset, record_count=result.record_count,
            bytes=result.body_bytes, holes=tuple(result.holes),
            torn_tail_offset=result.torn_tail_offset,
            duration_s=time.monotonic() - began)

    def _scan_window(self, first: int, bad: RecordCheck,
                     result: ScanResult) -> Iterator[JournalRecord]:
        """R2-R5 over the bytes after the first invalid position ``first``."""
        window_end = min(first + self._window, self._limit)
        look_end = min(first + 2 * self._window, self._limit)
        corrupt: list[tuple[int, str]] = []
        zeros: list[int] = []  # unaligned chain ends: zero up to the next boundary
        found: list[JournalRecord] = []
        pads: list[tuple[int, int]] = []
        holes: list[int] = []

        def note_break(pos: int, check: RecordCheck) -> int:
            if pos % BLOCK:
                # Inside a block, bytes that are neither a record nor zero padding are
                # a torn or damaged record whatever their class.
                corrupt.append((pos, f"{check.reason} inside a block"))
                zeros.append(pos)
                return align_up(pos)
            if check.klass is RecordClass.CORRUPT:
                corrupt.append((pos, check.reason))
            return pos + BLOCK

        hole_start = first
        q = note_break(first, bad)
        cut_at: int | None = None
        while q < window_end:
            check = self._check(q)
            if check.klass is not RecordClass.VALID:
                if check.klass is RecordClass.CORRUPT:
                    corrupt.append((q, check.reason))
                q += BLOCK
                continue
            holes.append(hole_start)
            if align_up(hole_start) < q:
                pads.append((align_up(hole_start), q))
            q, broke = self._collect(q, window_end, found)
            if broke is None:
                cut_at = q
                break
            hole_start = q
            q = note_break(q, broke)
        beyond = None
        if cut_at is not None and cut_at < self._limit:
            # The last chain ran into the window end: what sits there decides.
            check = self._check(cut_at)
            if check.klass is RecordClass.VALID:
                beyond = cut_at
            elif not (cut_at % BLOCK and check.klass is RecordClass.END
                      and self._is_padding(cut_at)):
                hole_start = cut_at
                note_break(cut_at, check)
        if beyond is None:
            beyond = self._look_beyond(max(q, window_end), look_end)
        verdict = decide(clean=self._clean, corrupt_seen=bool(corrupt),
                         valid_after_hole=bool(holes), valid_beyond_window=beyond is not None)
        if verdict is Verdict.CORRUPT:
            raise self._verdict_error(first, bad, beyond, corrupt, found)
        write_offset = align_up(self._last_end)
        result.holes = holes
        result.repairs = (
            [Repair("pad", s, e) for s, e in pads]
            + [Repair("zero", p, align_up(p)) for p in zeros]
            + [Repair("zero", at, at + BLOCK) for at, _ in corrupt
               if at % BLOCK == 0 and at >= write_offset])
        tail_torn = hole_start % BLOCK != 0 or any(at >= hole_start for at, _ in corrupt)
        if verdict is Verdict.REPAIR and tail_torn:
            result.torn_tail_offset = hole_start
        yield from found

    def _collect(self, pos: int, stop: int,
                 into: list[JournalRecord]) -> tuple[int, RecordCheck | None]:
        """Follow the chain at ``pos`` into ``into``; return where and why it broke."""
        chain = self._follow(pos, stop)
        while True:
            try:
                into.append(next(chain))
            except StopIteration as end:
                broke: tuple[int, RecordCheck | None] = end.value
                return broke

    def _verdict_error(self, first: int, bad: RecordCheck, beyond: int | None,
                       corrupt: list[tuple[int, str]],
                       found: list[JournalRecord]) -> CorruptRecord:
        """The CorruptRecord for a CORRUPT verdict (R3, R4), naming the first cause."""
        if beyond is not None:
            return self._corrupt(first, (
                f"valid record at logical offset {beyond} lies more than one sliding "
                f"window ({self._window} bytes) past invalid bytes at {first}: "
                f"{bad.reason}"))
        if corrupt:
            at, reason = corrupt[0]
            return self._corrupt(at, f"{reason} after a clean shutdown")
        after = found[0].offset if found else first
        return self._corrupt(first, (
            f"hole ({bad.reason}) before valid records at {after} after a clean shutdown"))

    def _corrupt(self, offset: int, reason: str) -> CorruptRecord:
        """CorruptRecord at a logical offset; the reason adds the device offset."""
        device_offset = self._data_offset + offset % self._capacity
        return CorruptRecord(self._path, offset,
                             f"{reason} (logical offset {offset}, device offset {device_offset})")

    def _look_beyond(self, start: int, stop: int) -> int | None:
        """R3: the first VALID record at an aligned position in [start, stop)."""
        q = align_up(start)
        while q < stop:
            if self._check(q).klass is RecordClass.VALID:
                return q
            q += BLOCK
        return None
