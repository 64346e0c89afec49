"""Entry log files: where flushed entries live, sorted by ledger within each flush.

Naming
    ``{log_id:016x}.log`` in ``EntryLogSettings.directory`` (created if
    missing).  Log ids start at 1 and only grow; other files are ignored.

On-disk layout (big-endian; byte tables in ``entrylog/_format.py`` and
``docs/formats-entrylog.md``)::

    [ header: 4096 bytes ][ record ][ record ] ... [ torn tail? ][ ledgers map ]

    header  magic "LDEL", version, log_id, ledgers_map_offset (0 = unsealed),
            ledgers_map_length, ledger_count, crc32c; zero padded to 4096
    record  record_length (payload bytes), ledger_id, entry_id, payload_crc32c,
            header_crc32c (of the 24 bytes before it), payload
    map     magic "LDLM", count, count x (ledger_id, entry_count, byte_count),
            crc32c of everything before it

Lifecycle
    1. Open: the directory is listed; a new current log ``max(id) + 1`` is
       created (header written, file and directory synced).  Every open starts a
       new log, so the log a crash left behind is never appended to again.
       ``seal_unsealed()`` (run by default on open) seals such logs.
    2. Append: records go to an in-memory buffer, written to the file once it
       passes ``write_buffer_size_bytes``; reads see the buffer.
    3. Sync: buffer written, ``fdatasync``.  Only then may the index point at
       the locations ``append`` returned.
    4. Rotation: when the sealed size (records plus map) would pass
       ``size_bytes_limit``, the current log is sealed and log ``id + 1`` starts.
    5. Seal: write buffer, append the ledgers map, fdatasync, rewrite the header
       with the map's offset (``pwrite``), fdatasync.  Sealed logs are immutable.
    6. Flushed logs (every log but the current one) are read, scanned and, by GC
       and compaction, removed.
    7. Close: the current log is sealed; descriptors are closed.

Invariants
    1. Every record carries its ledger id and entry id, so the index can be
       rebuilt from the logs alone; ``read`` refuses a record whose ids differ
       from the ones asked for.
    2. Bytes of a log below its written size never change, except the header,
       which changes once, from unsealed to sealed.
    3. A header names a map only once that map is durable; a sealed header's map
       covers every valid record of the log (and nothing else).
    4. A log's sealed size stays within ``size_bytes_limit`` unless it holds a
       single record larger than the limit.
    5. The current log is never removed; GC sees only ``flushed_log_ids()``.
    6. No bytes are returned that failed a CRC: a short read, a CRC mismatch or
       a misdirected record raises ``CorruptRecord`` with the file and offset.
    7. After a failed write or fdatasync the store refuses further writes
       (``DeviceBroken``); reads go on.
"""

from ._device import FileSystem as FileSystem
from ._device import OsFileSystem as OsFileSystem
from ._format import FORMAT_VERSION as FORMAT_VERSION
from ._format import RECORD_HEADER_SIZE_BYTES as RECORD_HEADER_SIZE_BYTES
from ._memory import FaultyFileSystem as FaultyFileSystem
from ._memory import MemoryFileSystem as MemoryFileSystem
from ._scan import RecordScan as RecordScan
from ._settings import EntryLogSettings as EntryLogSettings
from ._store import EntryLogStore as EntryLogStore
from ._types import EntryLog as EntryLog
from ._types import EntryLogStatistics as EntryLogStatistics
from ._types import FollowingRecord as FollowingRecord
from ._types import LedgerUsage as LedgerUsage
from ._types import Location as Location
from ._types import RecordScanner as RecordScanner
from ._types import ScanEnd as ScanEnd
from ._types import ScannedRecord as ScannedRecord
from ._types import ScanStop as ScanStop

__all__ = [
    "FORMAT_VERSION",
    "RECORD_HEADER_SIZE_BYTES",
    "EntryLog",
    "EntryLogSettings",
    "EntryLogStatistics",
    "EntryLogStore",
    "FaultyFileSystem",
    "FileSystem",
    "FollowingRecord",
    "LedgerUsage",
    "Location",
    "MemoryFileSystem",
    "OsFileSystem",
    "RecordScan",
    "RecordScanner",
    "ScanEnd",
    "ScanStop",
    "ScannedRecord",
]
