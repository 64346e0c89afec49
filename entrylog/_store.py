"""``EntryLogStore``: the directory of entry logs, its writer and its readers."""

from __future__ import annotations

import functools
import logging
import os
import re
import threading
from pathlib import Path

from common.errors import CorruptRecord, DeviceBroken, LedgerdError, invariant
from common.files import make_directory

from . import _format as fmt
from ._io import (
    ReadFdCache,
    close_fd,
    file_size_bytes,
    pread_upto,
    pwrite_all,
    sync_directory,
    sync_fd,
)
from ._scan import RecordScan, log_scan_end, usage_of
from ._settings import EntryLogSettings
from ._types import (
    EntryLog,
    EntryLogStatistics,
    FollowingRecord,
    LedgerUsage,
    Location,
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
    ) -> None:
        settings.check()
        invariant(settings.size_bytes_limit > fmt.HEADER_SIZE_BYTES,
                  "entry log size limit must exceed the header")
        self._directory = Path(settings.directory)
        self._size_bytes_limit = settings.size_bytes_limit
        self._write_buffer_size_bytes = settings.write_buffer_size_bytes
        # Writers: append, sync, rotation, seal_unsealed, close.  Held across
        # fdatasync; never taken by readers.
        self._write_lock = threading.Lock()
        # Short critical sections over what readers look at: the current log's
        # buffer and written size, the set of logs, the header and map caches.
        self._state_lock = threading.Lock()
        self._fds = ReadFdCache(open_count_max=settings.read_fd_count_max)
        self._headers: dict[int, fmt.FileHeader] = {}  # sealed logs only; immutable
        self._maps: dict[int, dict[int, LedgerUsage]] = {}  # sealed logs only
        self._closed = False
        # After a failed write or fdatasync the kernel may have dropped the
        # dirty pages and a retried fsync can report success (the "fsyncgate"
        # problem), so the writer refuses all further writes.
        self._write_failure: LedgerdError | None = None
        self._bytes_written = 0
        self._entry_count_written = 0
        self._rotation_count = 0

        try:
            make_directory(self._directory)
            names = os.listdir(self._directory)
        except OSError as exc:
            raise DeviceBroken(f"cannot open entry log directory {self._directory}: {exc}") from exc
        existing = sorted(int(m.group(1), 16) for n in names if (m := _LOG_NAME.match(n)))
        self._log_ids: set[int] = set(existing)
        log_id = (existing[-1] if existing else 0) + 1
        self._current: CurrentLog = CurrentLog.create(self._directory, log_id, self.path_of(log_id))
        self._current_log_id = log_id
        self._log_ids.add(log_id)
        logger.info(
            "entry log store opened: directory=%s current_log_id=%d existing_log_count=%d",
            self._directory, log_id, len(existing),
            extra={"directory": str(self._directory), "log_id": log_id},
        )
        if seal_on_open:
            self.seal_unsealed()

    # --- naming and listing -------------------------------------------------

    def path_of(self, log_id: int) -> Path:
        return self._directory / f"{log_id:016x}.log"

    @property
    def current_log_id(self) -> int:
        """The log being appended to (after ``close()``: the last one)."""
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
            if not self._closed and log_id == self._current_log_id:
                return self._current.end_offset
            self._require_known_locked(log_id, 0)
        return file_size_bytes(self.path_of(log_id))

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
        )

    # --- writing ------------------------------------------------------------

    def append(self, ledger_id: int, entry_id: int, payload: bytes, crc32c: int) -> Location:
        """Buffer one entry in the current log, rotating first if it would not fit.

        The location is readable at once (reads see the buffer) but durable
        only after ``sync()``; nothing may point at it before that.
        """
        record = fmt.encode_record(ledger_id, entry_id, payload, crc32c)
        with self._write_lock:
            self._check_writable()
            try:
                current = self._current
                if current.record_count > 0 and current.size_bytes_if_appended(
                    len(record), ledger_id
                ) > self._size_bytes_limit:
                    current = self._rotate()
                with self._state_lock:
                    offset = current.append(record, ledger_id)
                    if len(current.buffer) >= self._write_buffer_size_bytes:
                        current.write_buffer()
            except DeviceBroken as exc:
                self._write_failure = exc
                raise
            self._bytes_written += len(record)
            self._entry_count_written += 1
            return Location(current.log_id, offset)

    def sync(self) -> None:
        """Write the buffer and fdatasync the current log.

        Logs rotated out since the last sync were synced when they were sealed.
        """
        with self._write_lock:
            self._check_writable()
            try:
                with self._state_lock:
                    self._current.write_buffer()
                self._current.sync()
            except DeviceBroken as exc:
                self._write_failure = exc
                raise

    def close(self) -> None:
        """Seal the current log (write its map), sync it and close every descriptor."""
        with self._write_lock:
            if self._closed:
                return
            try:
                if self._write_failure is None:
                    self._seal_current()
                else:
                    self._current.abandon()
            except BaseException:
                self._current.abandon()
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

    def _seal_current(self) -> fmt.FileHeader:
        current = self._current
        with self._state_lock:
            current.write_buffer()
        header = current.seal()
        with self._state_lock:
            self._headers[current.log_id] = header
            self._maps[current.log_id] = current.usage()
        logger.info(
            "entry log sealed: path=%s size_bytes=%d ledger_count=%d record_count=%d",
            current.path, header.ledgers_map_offset + header.ledgers_map_length,
            header.ledger_count, current.record_count,
            extra={"path": str(current.path), "log_id": current.log_id},
        )
        return header

    def _rotate(self) -> CurrentLog:
        """Seal the current log and start the next one (writer lock held)."""
        old = self._current
        self._seal_current()
        new_id = old.log_id + 1
        new = CurrentLog.create(self._directory, new_id, self.path_of(new_id))
        with self._state_lock:
            self._current = new
            self._current_log_id = new_id
            self._log_ids.add(new_id)
        self._rotation_count += 1
        return new

    # --- reading ------------------------------------------------------------

    def _require_known_locked(self, log_id: int, offset: int) -> None:
        if log_id not in self._log_ids:
            raise CorruptRecord(str(self.path_of(log_id)), offset,
                                f"entry log {log_id} does not exist (removed?)")

    def _read_range(self, log_id: int, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes of ``log_id`` at ``offset``, through the append buffer."""
        tail = b""
        with self._state_lock:
            invariant(not self._closed, "entry log store used after close()")
            current = self._current
            if log_id == current.log_id and current.sealed_header is None:
                file_end = current.written_bytes
                if offset >= file_end:
                    start = offset - file_end
                    return bytes(current.buffer[start : start + length])
                if offset + length > file_end:
                    tail = bytes(current.buffer[: offset + length - file_end])
                    length = file_end - offset
            else:
                self._require_known_locked(log_id, offset)
        # Bytes below the written size of a log never change, so the pread can
        # run outside the lock; the descriptor is pinned by the cache.
        path = self.path_of(log_id)
        with self._fds.use(log_id, path) as fd:
            data = pread_upto(fd, length, offset, path=path)
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
        path = str(self.path_of(log_id))
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
        path = str(self.path_of(log_id))
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
        path = str(self.path_of(log_id))
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
            current = self._current
            if log_id == current.log_id and current.sealed_header is None and not self._closed:
                return current.end_offset
        header = self._read_header(log_id)
        if header is not None and header.sealed:
            return header.ledgers_map_offset
        return file_size_bytes(self.path_of(log_id))

    def scan(self, log_id: int) -> RecordScan:
        """Every valid record of ``log_id`` in order; ``.end`` tells where it stopped."""
        with self._state_lock:
            current = self._current
            is_current = log_id == current.log_id and current.sealed_header is None
            end_offset = current.end_offset
            self._require_known_locked(log_id, 0)
        map_offset = 0
        if is_current:
            data_end = end_offset
        else:
            header = self._read_header(log_id)
            if header is not None and header.sealed:
                data_end = map_offset = header.ledgers_map_offset
            else:
                data_end = file_size_bytes(self.path_of(log_id))
        return RecordScan(
            log_id=log_id,
            path=str(self.path_of(log_id)),
            read_at=functools.partial(self._read_range, log_id),
            data_end=data_end,
            map_offset=map_offset,
        )

    def scan_end(self, log_id: int) -> ScanEnd:
        """Scan ``log_id`` to its end and report where and why it stopped."""
        return self.scan(log_id).run_to_end()

    def ledgers_map(self, log_id: int) -> dict[int, LedgerUsage]:
        """Per-ledger usage of ``log_id``: from its map, else by scanning its records."""
        with self._state_lock:
            current = self._current
            if log_id == current.log_id and current.sealed_header is None:
                return current.usage()
            cached = self._maps.get(log_id)
            if cached is not None:
                return dict(cached)
        header = self._read_header(log_id)
        if header is not None and header.sealed:
            path = str(self.path_of(log_id))
            raw = self._read_range(log_id, header.ledgers_map_offset, header.ledgers_map_length)
            try:
                usage = fmt.decode_ledgers_map(raw, path=path, offset=header.ledgers_map_offset)
            except CorruptRecord as exc:
                logger.warning("entry log ledgers map unusable, scanning instead: %s", exc,
                               extra={"path": path, "offset": header.ledgers_map_offset})
            else:
                with self._state_lock:
                    self._maps[log_id] = usage
                return dict(usage)
        scan = self.scan(log_id)
        usage = usage_of(scan)
        log_scan_end(scan.run_to_end())
        return usage

    # --- removal and repair ---------------------------------------------------

    def remove(self, log_id: int) -> None:
        """Delete a flushed log (idempotent); never the current one."""
        with self._state_lock:
            invariant(self._closed or log_id != self._current_log_id,
                      f"remove of the current entry log {log_id}")
            self._log_ids.discard(log_id)
            self._headers.pop(log_id, None)
            self._maps.pop(log_id, None)
        self._fds.retire(log_id)
        path = self.path_of(log_id)
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            raise DeviceBroken(f"cannot remove entry log {path}: {exc}") from exc
        sync_directory(self._directory)
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
                end = self._seal_flushed(log_id)
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
        size = file_size_bytes(path)
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
                self._maps[log_id] = usage
        logger.info(
            "entry log sealed after crash: path=%s valid_record_count=%d ledger_count=%d "
            "stop=%s stop_offset=%d",
            path, end.record_count, len(usage), end.stop, end.offset,
            extra={"path": str(path), "log_id": log_id, "offset": end.offset},
        )
        return end

    @staticmethod
    def _write_seal(path: Path, map_offset: int, map_bytes: bytes, header: fmt.FileHeader,
                    *, append_map: bool) -> None:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise DeviceBroken(f"cannot open entry log {path} to seal it: {exc}") from exc
        try:
            if append_map:
                pwrite_all(fd, map_bytes, map_offset, path=path)
                sync_fd(fd, path=path)
            pwrite_all(fd, fmt.encode_file_header(header), 0, path=path)
            sync_fd(fd, path=path)
        finally:
            close_fd(fd, path=path)


def _satisfies_the_seam(store: EntryLogStore) -> EntryLog:
    """Never called: makes mypy check that the store implements ``EntryLog``."""
    return store
