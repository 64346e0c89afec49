"""``EntryLogStore``: the directory of entry logs, its writer and its readers."""

from __future__ import annotations

import bisect
import contextlib
import functools
import itertools
import logging
import operator
import re
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from common.errors import CorruptRecord, DeviceBroken, DiskFull, LedgerdError, invariant

from . import _format as fmt
from ._device import FileSystem, OsFileSystem
from ._io import Files, ReadFdCache
from ._scan import RecordScan, log_scan_end, usage_of
from ._settings import EntryLogSettings
from ._types import (
    EntryLog,
    EntryLogStatistics,
    FollowingRecord,
    LedgerUsage,
    Location,
    LocationRun,
    ScanEnd,
    ScanStop,
)
from ._writer import CurrentLog

logger = logging.getLogger(__name__)

_LOG_NAME = re.compile(r"^([0-9a-f]{16})\.log$")
# The first pread of ``read`` fetches this much, enough for the header and the
# payload of a typical entry in one system call.
_READ_GUESS_BYTES = 4096


class EntryLogStore:
    """Entry logs in ``settings.directory``; see the package docstring for the rules.

    Every file and directory call goes through ``file_system`` (default: the
    real one, ``OsFileSystem``); tests pass the doubles of ``entrylog.testing``
    (``MemoryFileSystem``, ``FaultyFileSystem``).

    Thread safety: ``read``, ``read_following``, ``scan``, ``ledgers_map``,
    ``remove`` and the listing calls may run on any thread at any time.  The
    writer calls (``append``, ``sync``, ``seal_unsealed``, ``close``) are
    serialised by a writer lock; one flusher thread is expected to own them.
    """

    def __init__(
        self,
        settings: EntryLogSettings,
        *,
        seal_on_open: bool = True,
        file_system: FileSystem | None = None,
    ) -> None:
        settings.check()
        invariant(settings.size_bytes_limit > fmt.HEADER_SIZE_BYTES,
                  "entry log size limit must exceed the header")
        self._directory = Path(settings.directory)
        self._path_prefix = str(self._directory / "x")[:-1]  # "" for ".", "/" for "/"
        self._size_bytes_limit = settings.size_bytes_limit
        self._write_buffer_size_bytes = settings.write_buffer_size_bytes
        self._files = Files(file_system if file_system is not None else OsFileSystem())
        # Writers: append, sync, rotation, seal_unsealed, close.  Held across
        # fdatasync; never taken by readers.
        self._write_lock = threading.Lock()
        # Short critical sections over what readers look at: the current log's
        # pending records and written size, the set of logs, the caches.
        self._state_lock = threading.Lock()
        self._fds = ReadFdCache(self._files, open_count_max=settings.read_fd_count_max)
        self._headers: dict[int, fmt.FileHeader] = {}  # sealed logs only; immutable
        self._closed = False
        # After a failed write or fdatasync the kernel may have dropped the
        # dirty pages and a retried fsync can report success (the "fsyncgate"
        # problem), so the writer refuses all further writes.  A full disk is
        # not such a failure: the writer rolls back and goes on (DiskFull).
        self._write_failure: LedgerdError | None = None
        self._bytes_written = 0
        self._entry_count_written = 0
        self._rotation_count = 0
        self._disk_full_count = 0

        # None between a rotation (or an open) and the creation of the next log,
        # which a full disk can postpone; ``_current_log_id`` is then the id
        # that log will get.
        self._current: CurrentLog | None = None
        self._log_ids: set[int] = set()
        self._current_log_id = 0
        self._open_directory()
        if seal_on_open:
            self.seal_unsealed()

    def _open_directory(self) -> None:
        """List the logs, start the next one, drop the placeholders below it."""
        self._files.make_directory(self._directory)
        names = self._files.list_directory(self._directory)
        existing = sorted(int(m.group(1), 16) for n in names if (m := _LOG_NAME.match(n)))
        # Empty files hold no records: placeholders kept by ``remove`` so that
        # ids never repeat, or logs whose creation failed.
        placeholders = [i for i in existing if self._files.size_bytes(self.path_of(i)) == 0]
        self._log_ids = set(existing) - set(placeholders)
        self._current_log_id = (existing[-1] if existing else 0) + 1
        try:
            self._start_current()
        except DiskFull as exc:
            # Opening must work on a full disk, or space could never be freed.
            self._disk_full_count += 1
            logger.warning("entry log store opened without a current log (%s); "
                           "the first append after space is freed creates it", exc,
                           extra={"directory": str(self._directory)})
        else:
            if placeholders:  # The new log's name now records how far ids went.
                for log_id in placeholders:
                    self._files.unlink(self.path_of(log_id))
                self._files.sync_directory(self._directory)
        logger.info(
            "entry log store opened: directory=%s current_log_id=%d existing_log_count=%d",
            self._directory, self._current_log_id, len(existing) - len(placeholders),
            extra={"directory": str(self._directory), "log_id": self._current_log_id},
        )

    # --- naming and listing -------------------------------------------------

    def path_of(self, log_id: int) -> Path:
        return self._directory / f"{log_id:016x}.log"

    def _path_text(self, log_id: int) -> str:
        # ``str(path_of())`` without pathlib, which costs more than a cached pread.
        return f"{self._path_prefix}{log_id:016x}.log"

    @property
    def unsynced_bytes(self) -> int:
        """Bytes appended to the current log since it was last synced (logs
        rotated out were synced when they were sealed)."""
        with self._state_lock:
            current = self._current
            return 0 if current is None else current.end_offset - current.durable_bytes

    @property
    def current_log_id(self) -> int:
        """The log being appended to (or the id the next one gets while a full disk
        keeps it from being created; after ``close()``: the last one)."""
        return self._current_log_id

    def log_ids(self) -> list[int]:
        with self._state_lock:
            return sorted(self._log_ids)

    def flushed_log_ids(self) -> list[int]:
        """Every log except the current one: the only ones GC may look at."""
        with self._state_lock:
            current = None if self._closed else self._current_log_id
            return sorted(i for i in self._log_ids if i != current)

    def log_size_bytes(self, log_id: int) -> int:
        with self._state_lock:
            current = self._current
            if not self._closed and current is not None and log_id == current.log_id:
                return current.end_offset
            self._require_known_locked(log_id, 0)
        return self._files.size_bytes(self.path_of(log_id))

    def statistics(self) -> EntryLogStatistics:
        ids = self.log_ids()
        total = 0
        for log_id in ids:
            try:
                total += self.log_size_bytes(log_id)
            except CorruptRecord:
                continue  # Removed while we were counting.
        return EntryLogStatistics(
            log_count=len(ids),
            current_log_id=self._current_log_id,
            bytes_written=self._bytes_written,
            entry_count_written=self._entry_count_written,
            total_size_bytes=total,
            rotation_count=self._rotation_count,
            read_fd_open_count=self._fds.open_count(),
            disk_full_count=self._disk_full_count,
        )

    # --- writing ------------------------------------------------------------

    def append(self, ledger_id: int, entry_id: int, payload: bytes, crc32c: int) -> Location:
        """Queue one entry in the current log, rotating first if it would not fit.

        The payload is kept by reference until it is written (it must not
        change) and ``crc32c`` is stored as given; ``read`` verifies it.  The
        location is readable at once but durable only after ``sync()``;
        nothing may point at it before that.  ``DiskFull``: every append since
        the last successful ``sync()`` is void (rolled back); make them again.
        """
        (run,) = self.append_run(ledger_id, entry_id, (payload,), (crc32c,))
        return Location(run.log_id, run.offsets[0])

    def append_run(self, ledger_id: int, first_entry_id: int, payloads: Sequence[bytes],
                   crcs: Sequence[int]) -> list[LocationRun]:
        """:meth:`append` for one ledger's consecutive entries ``first_entry_id, …``
        (payloads and their crc32c) under one acquisition of the writer lock: a
        checkpoint flushes a ledger's thousands of entries in a few calls, which
        pay the lock and the checks once, not per entry.  Returns where they
        went, in order: one ``LocationRun`` per log they went to (a rotation
        splits them), whose offsets together are one per entry."""
        runs: list[LocationRun] = []
        header_size = fmt.RECORD_HEADER_SIZE_BYTES
        # ends[k]: the bytes of records 0 … k-1, so a part's extent is arithmetic.
        ends = list(itertools.accumulate(map(operator.add, map(len, payloads),
                                             itertools.repeat(header_size)), initial=0))
        with self._write_lock:
            self._check_writable()
            start = 0
            try:
                while start < len(payloads):
                    end = self._append_part(ledger_id, first_entry_id, payloads, crcs,
                                            ends, start, runs)
                    self._bytes_written += ends[end] - ends[start]
                    self._entry_count_written += end - start
                    start = end
            except (DiskFull, DeviceBroken) as exc:
                self._note_failure(exc)
                raise
        return runs

    def _append_part(self, ledger_id: int, first_entry_id: int, payloads: Sequence[bytes],
                     crcs: Sequence[int], ends: list[int], start: int,
                     runs: list[LocationRun]) -> int:
        """Append records ``start:end`` of a run, as many as fit the current log
        (rotated first if the first one does not) and its write buffer: the
        checks :meth:`append` makes per record, made by bisection of ``ends``.
        Returns ``end``."""
        base = ends[start]
        current = self._current_for(ends[start + 1] - base, ledger_id)
        # The log's size once sealed, were the records appended: the map grows
        # by this ledger's item once, however many there are.
        room = self._size_bytes_limit - current.size_bytes_if_appended(0, ledger_id)
        buffered = self._write_buffer_size_bytes - current.pending_bytes
        # Every record that ends within the room, and after the first only those
        # that start while the write buffer still has room (as append would).
        end = min(bisect.bisect_right(ends, base + room, lo=start + 1) - 1,
                  bisect.bisect_left(ends, base + buffered, lo=start + 1))
        end = max(end, start + 1)
        part_payloads, part_crcs = payloads[start:end], crcs[start:end]
        offsets = current.append_run(
            ledger_id, fmt.encode_record_headers(ledger_id, first_entry_id + start,
                                                 part_payloads, part_crcs),
            part_payloads)
        runs.append(LocationRun(current.log_id, offsets))
        if current.pending_bytes >= self._write_buffer_size_bytes:
            current.write_pending()
        return end

    def sync(self) -> None:
        """Write the pending records and fdatasync the current log.

        Logs rotated out since the last sync were synced when they were sealed.
        ``DiskFull``: as for ``append``; ``DeviceBroken``: writes are over.
        """
        with self._write_lock:
            self._check_writable()
            current = self._current
            if current is None:
                return  # Rotated out and sealed (synced); no log started since.
            with self._failures_latched():
                current.write_pending()
                current.sync()

    def roll(self) -> int | None:
        """Seal the current log now, as a rotation would (the next append starts
        log ``id + 1``), so that GC, which looks only at flushed logs, may
        remove or compact it: a log that stops filling before its size limit
        would otherwise keep the entries of deleted ledgers forever.  Returns
        the id of the log sealed; None when the current log holds no record
        (or there is none).  ``DiskFull``: as for ``sync``, the log stays current.
        """
        with self._write_lock:
            self._check_writable()
            current = self._current
            if current is None or current.record_count == 0:
                return None
            with self._failures_latched():
                self._rotate(current)
            return current.log_id

    def close(self) -> None:
        """Seal the current log (write its map), sync it and close every handle.

        ``DiskFull`` while sealing: handles are closed all the same, the log is
        left unsealed (the next open seals it) and appends since the last
        ``sync()`` are lost, as the error says.
        """
        with self._write_lock:
            if self._closed:
                return
            current = self._current
            try:
                if current is not None:
                    if self._write_failure is None:
                        self._seal_current(current)
                    else:
                        current.abandon()
            except BaseException:
                if current is not None:
                    current.abandon()
                raise
            finally:
                with self._state_lock:
                    self._closed = True
                self._fds.close_all()
            logger.info("entry log store closed: directory=%s last_log_id=%d",
                        self._directory, self._current_log_id,
                        extra={"directory": str(self._directory), "log_id": self._current_log_id})

    def _check_writable(self) -> None:
        invariant(not self._closed, "entry log store used after close()")
        if self._write_failure is not None:
            raise DeviceBroken(
                f"entry log writes refused after an earlier failure: {self._write_failure}"
            )

    @contextlib.contextmanager
    def _failures_latched(self) -> Iterator[None]:
        """Count full disks; latch every other storage failure (writer lock held)."""
        try:
            yield
        except (DiskFull, DeviceBroken) as exc:
            self._note_failure(exc)
            raise

    def _note_failure(self, exc: DiskFull | DeviceBroken) -> None:
        if isinstance(exc, DiskFull):
            self._disk_full_count += 1
        else:
            self._write_failure = exc

    def _current_for(self, record_size_bytes: int, ledger_id: int) -> CurrentLog:
        """The log the next record goes to: rotate if it would not fit, start one if none."""
        current = self._current
        if current is not None and current.record_count > 0 and current.size_bytes_if_appended(
            record_size_bytes, ledger_id
        ) > self._size_bytes_limit:
            self._rotate(current)
            current = None
        if current is None:
            current = self._start_current()
        return current

    def _start_current(self) -> CurrentLog:
        log_id = self._current_log_id
        current = CurrentLog.create(self._files, self._directory, log_id, self.path_of(log_id),
                                    self._state_lock)
        with self._state_lock:
            self._current = current
            self._log_ids.add(log_id)
        return current

    def _seal_current(self, current: CurrentLog) -> fmt.FileHeader:
        current.write_pending()
        header = current.seal()
        with self._state_lock:
            self._headers[current.log_id] = header
        logger.info(
            "entry log sealed: path=%s size_bytes=%d ledger_count=%d record_count=%d",
            current.path, header.ledgers_map_offset + header.ledgers_map_length,
            header.ledger_count, current.record_count,
            extra={"path": str(current.path), "log_id": current.log_id},
        )
        return header

    def _rotate(self, current: CurrentLog) -> None:
        """Seal the current log; the next one is started by ``_current_for``.

        Sealing first and creating second means a full disk at either step
        leaves no log half made: a failed seal rolls back and the log stays
        current, a failed creation leaves no current log until one succeeds.
        """
        self._seal_current(current)
        with self._state_lock:
            self._current = None
            self._current_log_id = current.log_id + 1
        self._rotation_count += 1

    # --- reading ------------------------------------------------------------

    def _current_unsealed_locked(self, log_id: int) -> CurrentLog | None:
        """The current log if it is ``log_id`` and still takes appends (state lock held)."""
        current = self._current
        if current is not None and current.log_id == log_id and current.sealed_header is None:
            return current
        return None

    def _require_known_locked(self, log_id: int, offset: int) -> None:
        if log_id not in self._log_ids:
            raise CorruptRecord(self._path_text(log_id), offset,
                                f"entry log {log_id} does not exist (removed?)")

    def _read_range(self, log_id: int, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes of ``log_id`` at ``offset``, through the append buffer."""
        tail = b""
        with self._state_lock:
            invariant(not self._closed, "entry log store used after close()")
            current = self._current_unsealed_locked(log_id)
            if current is not None:
                file_end = current.written_bytes
                if offset >= file_end:
                    return current.read_pending(offset, length)
                if offset + length > file_end:
                    tail = current.read_pending(file_end, offset + length - file_end)
                    length = file_end - offset
            else:
                self._require_known_locked(log_id, offset)
        # Bytes below the written size of a log change only in a rollback after
        # a full disk (bytes no synced location points at; a read of them then
        # fails its checks), so the pread can run outside the lock; the handle
        # is pinned by the cache.
        with self._fds.use(log_id, self.path_of) as handle:
            data = self._files.pread_upto(handle, length, offset, path=self._path_text(log_id))
        if tail and len(data) == length:
            data += tail
        return data

    def read(self, location: Location, ledger_id: int, entry_id: int) -> tuple[bytes, int]:
        """(payload, crc32c) of the entry at ``location``, every check verified.

        Sees records still in the append buffer.  Raises ``CorruptRecord``
        (naming file and offset) on a short read, a CRC mismatch, or a record
        that belongs to another ledger or entry (a misdirected location).
        """
        log_id, offset = location
        path = self._path_text(log_id)
        if offset < fmt.HEADER_SIZE_BYTES:
            raise CorruptRecord(path, offset, "location points into the file header")
        data = self._read_range(log_id, offset, _READ_GUESS_BYTES)
        header = fmt.decode_record_header(data, path=path, offset=offset)
        if header.ledger_id != ledger_id or header.entry_id != entry_id:
            raise CorruptRecord(
                path, offset,
                f"record holds ledger {header.ledger_id} entry {header.entry_id}, "
                f"expected ledger {ledger_id} entry {entry_id}",
            )
        size = header.record_size_bytes
        if len(data) < size and len(data) == _READ_GUESS_BYTES:
            data += self._read_range(log_id, offset + len(data), size - len(data))
        payload = bytes(data[fmt.RECORD_HEADER_SIZE_BYTES : size])
        fmt.check_record_payload(header, payload, path=path, offset=offset)
        return payload, header.payload_crc32c

    def read_following(
        self, location: Location, ledger_id: int, *, bytes_max: int, count_max: int
    ) -> list[FollowingRecord]:
        """Read-ahead: valid records after ``location`` while they belong to ``ledger_id``.

        At most ``count_max`` records and ``bytes_max`` record bytes (headers
        included).  Never raises ``CorruptRecord``: read-ahead is optional, so
        it stops at the end of data, the ledgers map, another ledger, or an
        invalid record (logged), and the record at ``location`` itself is not
        included (the caller reads it with ``read()``).
        """
        if bytes_max <= 0 or count_max <= 0:
            return []
        log_id, offset = location
        path = self._path_text(log_id)
        try:
            data_end = self._data_end(log_id)
            if not fmt.HEADER_SIZE_BYTES <= offset < data_end:
                return []
            window = self._read_range(log_id, offset, min(data_end - offset, bytes_max + 65536))
            first = fmt.decode_record_header(window, path=path, offset=offset)
            if first.ledger_id != ledger_id:
                return []
            start = offset + first.record_size_bytes
            if start >= data_end:
                return []
            window_start = offset
            if start + min(bytes_max, data_end - start) > offset + len(window):
                window = self._read_range(log_id, start, min(data_end - start, bytes_max))
                window_start = start
        except CorruptRecord:
            return []  # The log is gone or the record is bad: read() reports it.
        return self._parse_following(window, window_start, start, data_end, ledger_id,
                                     bytes_max=bytes_max, count_max=count_max,
                                     log_id=log_id, path=path)

    def _parse_following(
        self, window: bytes, window_start: int, start: int, data_end: int, ledger_id: int,
        *, bytes_max: int, count_max: int, log_id: int, path: str,
    ) -> list[FollowingRecord]:
        found: list[FollowingRecord] = []
        used = 0
        position = start
        while len(found) < count_max and position < data_end:
            relative = position - window_start
            try:
                # Only the header's bytes: slicing the rest of the window would
                # copy it once per record (quadratic in the window size).
                header = fmt.decode_record_header(
                    window[relative:relative + fmt.RECORD_HEADER_SIZE_BYTES], path=path,
                    offset=position)
            except CorruptRecord as exc:
                self._note_readahead_stop(exc, relative, window)
                break
            size = header.record_size_bytes
            if header.ledger_id != ledger_id or used + size > bytes_max:
                break
            if relative + size > len(window) or position + size > data_end:
                break  # Beyond what this read fetched, or a torn tail.
            payload = bytes(window[relative + fmt.RECORD_HEADER_SIZE_BYTES : relative + size])
            try:
                fmt.check_record_payload(header, payload, path=path, offset=position)
            except CorruptRecord as exc:
                self._note_readahead_stop(exc, relative, window)
                break
            found.append(FollowingRecord(header.entry_id, payload, header.payload_crc32c,
                                         Location(log_id, position)))
            used += size
            position += size
        return found

    @staticmethod
    def _note_readahead_stop(exc: CorruptRecord, relative: int, window: bytes) -> None:
        # Short bytes at the end of the window are just the end of this read;
        # a record that is all there and still fails its checks is worth a line.
        # Info, not warning: a torn tail left in a sealed log would otherwise
        # warn on every read-ahead that reaches it.
        if len(window) - relative >= fmt.RECORD_HEADER_SIZE_BYTES:
            logger.info("entry log read-ahead stopped: %s", exc,
                           extra={"path": exc.path, "offset": exc.offset})

    # --- headers, maps, scans -------------------------------------------------

    def _read_header(self, log_id: int) -> fmt.FileHeader | None:
        """The header of a flushed log, or None (logged) when it does not decode."""
        with self._state_lock:
            cached = self._headers.get(log_id)
        if cached is not None:
            return cached
        path = self._path_text(log_id)
        raw = self._read_range(log_id, 0, fmt.HEADER_SIZE_BYTES)
        try:
            header = fmt.decode_file_header(raw, path=path)
            if header.log_id != log_id:
                raise CorruptRecord(path, 0, f"header names log {header.log_id}")
        except CorruptRecord as exc:
            logger.warning("entry log header unusable, scanning instead: %s", exc,
                           extra={"path": path, "offset": 0})
            return None
        if header.sealed:
            with self._state_lock:
                self._headers[log_id] = header
        return header

    def _data_end(self, log_id: int) -> int:
        """Where records end: the map offset of a sealed log, else its size."""
        with self._state_lock:
            current = self._current_unsealed_locked(log_id)
            if current is not None and not self._closed:
                return current.end_offset
        header = self._read_header(log_id)
        if header is not None and header.sealed:
            return header.ledgers_map_offset
        return self._files.size_bytes(self.path_of(log_id))

    def scan(self, log_id: int) -> RecordScan:
        """Every valid record of ``log_id`` in order; ``.end`` tells where it stopped."""
        with self._state_lock:
            current = self._current_unsealed_locked(log_id)
            end_offset = None if current is None else current.end_offset
            self._require_known_locked(log_id, 0)
        map_offset = 0
        if end_offset is not None:
            data_end = end_offset
        else:
            header = self._read_header(log_id)
            if header is not None and header.sealed:
                data_end = map_offset = header.ledgers_map_offset
            else:
                data_end = self._files.size_bytes(self.path_of(log_id))
        return RecordScan(
            log_id=log_id,
            path=self._path_text(log_id),
            read_at=functools.partial(self._read_range, log_id),
            data_end=data_end,
            map_offset=map_offset,
        )

    def scan_end(self, log_id: int) -> ScanEnd:
        """Scan ``log_id`` to its end and report where and why it stopped."""
        return self.scan(log_id).run_to_end()

    def ledgers_map(self, log_id: int) -> dict[int, LedgerUsage]:
        """Per-ledger usage of ``log_id``: from its map, else by scanning its records.

        A sealed log's map is read from its file at each call, not kept: its
        callers (GC measuring a new or changed log, compaction, the admin
        listing) are rare, and a decoded map costs about 150 bytes per ledger
        in memory, for every sealed log, where the file holds 24."""
        with self._state_lock:
            current = self._current_unsealed_locked(log_id)
            if current is not None:
                return current.usage()
        header = self._read_header(log_id)
        if header is not None and header.sealed:
            path = self._path_text(log_id)
            raw = self._read_range(log_id, header.ledgers_map_offset, header.ledgers_map_length)
            try:
                usage = fmt.decode_ledgers_map(raw, path=path, offset=header.ledgers_map_offset)
            except CorruptRecord as exc:
                logger.warning("entry log ledgers map unusable, scanning instead: %s", exc,
                               extra={"path": path, "offset": header.ledgers_map_offset})
            else:
                return usage
        scan = self.scan(log_id)
        usage = usage_of(scan)
        log_scan_end(scan.run_to_end())
        return usage

    # --- removal and repair ---------------------------------------------------

    def remove(self, log_id: int) -> None:
        """Delete a flushed log (idempotent); never the current one.

        While a full disk keeps the next log from being created, the highest
        log's name is all that says how far ids went: removing that log then
        empties the file but keeps the name (the next open drops it), so that
        a log id is never given to a second log.
        """
        with self._state_lock:
            invariant(self._closed or log_id != self._current_log_id,
                      f"remove of the current entry log {log_id}")
            keep_name = self._current is None and all(i <= log_id for i in self._log_ids)
            self._log_ids.discard(log_id)
            self._headers.pop(log_id, None)
        self._fds.retire(log_id)
        path = self.path_of(log_id)
        try:
            if keep_name:
                self._files.empty_file(path)
            else:
                self._files.unlink(path)
                self._files.sync_directory(self._directory)
        except DeviceBroken as exc:
            # The directory may not say what we think it says; new logs would
            # be created in it, so writes stop here as after a failed fdatasync.
            self._write_failure = exc
            raise
        logger.info("entry log removed: path=%s", path, extra={"path": str(path), "log_id": log_id})

    def seal_unsealed(self) -> list[ScanEnd]:
        """Give every flushed log left without a map by a crash its map.

        The map lists only the valid records found by a scan; a torn tail is
        left in place (logged with file and offset) and the map goes after it.
        Returns how the scan of each log it sealed ended.
        """
        sealed: list[ScanEnd] = []
        with self._write_lock:
            invariant(not self._closed, "entry log store used after close()")
            for log_id in self.flushed_log_ids():
                try:
                    with self._failures_latched():
                        end = self._seal_flushed(log_id)
                except DiskFull as exc:
                    # Unsealed logs read fine (their map comes from a scan); the
                    # next seal_unsealed (next open at the latest) seals it.
                    logger.warning("entry log %s left unsealed for now: %s",
                                   self.path_of(log_id), exc,
                                   extra={"path": self._path_text(log_id), "log_id": log_id})
                    continue
                if end is not None:
                    sealed.append(end)
        return sealed

    def _seal_flushed(self, log_id: int) -> ScanEnd | None:
        path = self.path_of(log_id)
        raw = self._read_range(log_id, 0, fmt.HEADER_SIZE_BYTES)
        try:
            header = fmt.decode_file_header(raw, path=str(path))
        except CorruptRecord as exc:
            if len(raw) < fmt.HEADER_SIZE_BYTES or raw[:4] != fmt.FILE_MAGIC:
                # Not recognisably ours: rewriting it could destroy someone's data.
                logger.error("entry log left alone, header not recognised: %s", exc,
                             extra={"path": str(path), "offset": 0})
                return None
            header = None  # A torn header rewrite; the scan below recovers it.
        if header is not None and (header.sealed or header.log_id != log_id):
            if header.log_id != log_id:
                logger.error("entry log %s left alone: header names log %d", path, header.log_id,
                             extra={"path": str(path), "offset": 0})
            return None
        size = self._files.size_bytes(path)
        scan = RecordScan(log_id=log_id, path=str(path),
                          read_at=functools.partial(self._read_range, log_id),
                          data_end=size, map_offset=0)
        usage = usage_of(scan)
        end = scan.run_to_end()
        log_scan_end(end)
        found_map = end.stop is ScanStop.LEDGERS_MAP
        if found_map:
            # The map reached the disk but the header rewrite did not: point at it.
            map_offset = end.offset
            count = fmt.decode_ledgers_map_count(
                self._read_range(log_id, map_offset, fmt.MAP_HEAD_SIZE_BYTES),
                path=str(path), offset=map_offset,
            )
            map_bytes = self._read_range(log_id, map_offset, fmt.ledgers_map_size_bytes(count))
            usage = fmt.decode_ledgers_map(map_bytes, path=str(path), offset=map_offset)
        else:
            map_offset = size
            map_bytes = fmt.encode_ledgers_map(usage)
        new_header = fmt.FileHeader(log_id, map_offset, len(map_bytes), len(usage))
        self._write_seal(path, map_offset, map_bytes, new_header, append_map=not found_map)
        with self._state_lock:
            if log_id in self._log_ids:
                self._headers[log_id] = new_header
        logger.info(
            "entry log sealed after crash: path=%s valid_record_count=%d ledger_count=%d "
            "stop=%s stop_offset=%d",
            path, end.record_count, len(usage), end.stop, end.offset,
            extra={"path": str(path), "log_id": log_id, "offset": end.offset},
        )
        return end

    def _write_seal(self, path: Path, map_offset: int, map_bytes: bytes,
                    header: fmt.FileHeader, *, append_map: bool) -> None:
        handle = self._files.open_write(path)
        try:
            if append_map:
                try:
                    self._files.pwrite_all(handle, map_bytes, map_offset, path=path)
                except DiskFull:
                    # Give back what part of the map took; the log stays unsealed.
                    self._files.truncate(handle, map_offset, path=path)
                    raise
                self._files.sync(handle, path=path)
            # DiskFull here leaves a durable map that the header does not name
            # yet (perhaps a torn header): the next scan finds the map.
            self._files.pwrite_all(handle, fmt.encode_file_header(header), 0, path=path)
            self._files.sync(handle, path=path)
        finally:
            self._files.close(handle, path=path)


def _satisfies_the_seam(store: EntryLogStore) -> EntryLog:
    """Never called: makes mypy check that the store implements ``EntryLog``."""
    return store
