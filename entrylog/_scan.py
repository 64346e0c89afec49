"""Sequential scan of one log's records, classifying where it stops.

The scanner reads through a ``read_at(offset, length)`` callable (no file
handling here), in windows of ``window_bytes`` so a scan costs one ``pread``
per window rather than two per record.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

from common.errors import CorruptRecord, InvariantViolation

from . import _format as fmt
from ._types import LedgerUsage, Location, ScanEnd, ScannedRecord, ScanStop

logger = logging.getLogger(__name__)

ReadAt = Callable[[int, int], bytes]
SCAN_WINDOW_BYTES = 1024 * 1024


class RecordScan:
    """Iterator over the valid records of one log; ``end`` is set once exhausted.

    ``data_end`` bounds the scan: the map offset of a sealed log, otherwise the
    logical size of the log.  When ``map_offset`` is 0 (no map known), a valid
    ledgers map found in the data also ends the scan: a crash between appending
    the map and rewriting the header leaves exactly that.
    """

    def __init__(
        self,
        *,
        log_id: int,
        path: str,
        read_at: ReadAt,
        data_end: int,
        map_offset: int,
        window_bytes: int = SCAN_WINDOW_BYTES,
    ) -> None:
        self.log_id = log_id
        self.path = path
        self._read_at = read_at
        self._data_end = data_end
        self._map_offset = map_offset
        self._window_bytes = window_bytes
        self._window = b""
        self._window_start = 0
        self.end: ScanEnd | None = None
        self._records = self._generate()

    def __iter__(self) -> Iterator[ScannedRecord]:
        return self

    def __next__(self) -> ScannedRecord:
        return next(self._records)

    def run_to_end(self) -> ScanEnd:
        for _ in self:
            pass
        end = self.end
        if end is None:
            raise InvariantViolation("an exhausted scan must know where it ended")
        return end

    def _get(self, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes at ``offset``, never past ``data_end``."""
        length = max(0, min(length, self._data_end - offset))
        start = offset - self._window_start
        if start < 0 or start + length > len(self._window):
            self._window = self._read_at(offset, max(length, self._window_bytes))
            self._window = self._window[: max(0, self._data_end - offset)]
            self._window_start = offset
            start = 0
        return self._window[start : start + length]

    def _finish(self, offset: int, stop: ScanStop, reason: str, count: int) -> None:
        self.end = ScanEnd(self.log_id, self.path, offset, stop, reason, count)

    def _tail_is_zero(self, offset: int) -> bool:
        # A crash can leave the end of a file extended with zeros (delayed
        # allocation) instead of the record that was being written.
        remaining = self._data_end - offset
        return remaining <= SCAN_WINDOW_BYTES and not any(self._get(offset, remaining))

    def _generate(self) -> Iterator[ScannedRecord]:
        offset = fmt.HEADER_SIZE_BYTES
        count = 0
        while True:
            if offset >= self._data_end:
                stop = ScanStop.LEDGERS_MAP if self._map_offset else ScanStop.END_OF_DATA
                self._finish(offset, stop, "", count)
                return
            if not self._map_offset and self._is_map_at(offset):
                self._finish(offset, ScanStop.LEDGERS_MAP, "ledgers map without header", count)
                return
            head = self._get(offset, fmt.RECORD_HEADER_SIZE_BYTES)
            if len(head) < fmt.RECORD_HEADER_SIZE_BYTES:
                self._finish(offset, ScanStop.TORN_TAIL, "record header truncated", count)
                return
            try:
                header = fmt.decode_record_header(head, path=self.path, offset=offset)
            except CorruptRecord as exc:
                self._finish_invalid(offset, exc.reason, count)
                return
            if offset + header.record_size_bytes > self._data_end:
                # Also in a sealed log: sealing after a crash puts the map
                # behind the torn tail, which then ends at the map offset.
                self._finish(offset, ScanStop.TORN_TAIL, "record extends past the end of data",
                             count)
                return
            payload = self._get(offset + fmt.RECORD_HEADER_SIZE_BYTES, header.payload_length)
            try:
                fmt.check_record_payload(header, payload, path=self.path, offset=offset)
            except CorruptRecord as exc:
                self._finish_invalid(offset, exc.reason, count)
                return
            yield ScannedRecord(
                Location(self.log_id, offset),
                header.ledger_id,
                header.entry_id,
                payload,
                header.payload_crc32c,
            )
            count += 1
            offset += header.record_size_bytes

    def _finish_invalid(self, offset: int, reason: str, count: int) -> None:
        stop = ScanStop.TORN_TAIL if self._tail_is_zero(offset) else ScanStop.CORRUPT
        self._finish(offset, stop, reason, count)

    def _is_map_at(self, offset: int) -> bool:
        head = self._get(offset, fmt.MAP_HEAD_SIZE_BYTES)
        if head[:4] != fmt.MAP_MAGIC:
            return False
        try:
            count = fmt.decode_ledgers_map_count(head, path=self.path, offset=offset)
            size = fmt.ledgers_map_size_bytes(count)
            if offset + size > self._data_end:
                return False
            fmt.decode_ledgers_map(self._get(offset, size), path=self.path, offset=offset)
        except CorruptRecord:
            return False
        return True


def usage_of(scan: RecordScan) -> dict[int, LedgerUsage]:
    """Per-ledger usage computed from every valid record of ``scan``."""
    counts: dict[int, list[int]] = {}
    for record in scan:
        item = counts.setdefault(record.ledger_id, [0, 0])
        item[0] += 1
        item[1] += fmt.RECORD_HEADER_SIZE_BYTES + len(record.payload)
    return {
        ledger_id: LedgerUsage(entry_count=c, byte_count=b) for ledger_id, (c, b) in counts.items()
    }


def log_scan_end(end: ScanEnd) -> None:
    """Report a scan that did not end cleanly, naming file and offset."""
    if end.clean:
        return
    what = "torn tail" if end.stop is ScanStop.TORN_TAIL else "corrupt record"
    logger.warning(
        "entry log %s: %s at offset %d (%s); %d valid records before it",
        end.path, what, end.offset, end.reason, end.record_count,
        extra={"path": end.path, "offset": end.offset, "stop": str(end.stop),
               "log_id": end.log_id, "valid_record_count": end.record_count},
    )
