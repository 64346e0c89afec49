"""Entry log files: where flushed entries live, sorted by ledger within each flush.

Naming
    ``{log_id:016x}.log`` in ``EntryLogSettings.directory`` (created if
    missing).  Log ids start at 1 and only grow, never given to a second log;
    other files are ignored.  An empty file with a log's name holds no records
    (a placeholder, see 8.); the next open that starts a log removes it.

On-disk layout (big-endian; byte tables in ``entrylog/_format.py`` and
``docs/formats-entrylog.md``)::

    [ header: 4096 bytes ][ record ][ record ] ... [ torn tail? ][ ledgers map ]

    header  magic "LDEL", version, log_id, ledgers_map_offset (0 = unsealed),
            ledgers_map_length, ledger_count, crc32c; zero padded to 4096
    record  record_length (payload bytes), ledger_id, entry_id, payload_crc32c,
            header_crc32c (of the 24 bytes before it), payload
    map     magic "LDLM", count, count x (ledger_id, entry_count, byte_count),
            crc32c of everything before it

Device seam
    Every file and directory call goes through a ``FileSystem`` (``_device``)
    passed to ``EntryLogStore(settings, file_system=...)``: ``OsFileSystem``
    (the default, one ``os`` call per method) and the test doubles in
    ``entrylog.testing``, not part of this surface and never imported by the
    service: ``MemoryFileSystem`` and, for seeded simulation,
    ``FaultyFileSystem`` (crashes that keep,
    drop or tear what no fdatasync covered, lose unsynced creations and undo
    unsynced unlinks; failures, short writes and a full disk on demand).

Lifecycle
    1. Open: the directory is listed; a new current log ``max(id) + 1`` is
       created (header written, file and directory synced).  Every open starts a
       new log, so the log a crash left behind is never appended to again.
       ``seal_unsealed()`` (run by default on open) seals such logs.
    2. Append: the 28-byte record header and the caller's payload are kept by
       reference (no copy) until ``write_buffer_size_bytes`` of them are
       pending, then written with ``pwritev`` (``IOV_MAX`` buffers per call,
       short writes resumed); reads see pending records.  The payload CRC is
       stored as given; ``read`` verifies it.
    3. Sync: pending records written, ``fdatasync``.  Only then may the index
       point at the locations ``append`` returned.
    4. Rotation: when the sealed size (records plus map) would pass
       ``size_bytes_limit``, the current log is sealed, then log ``id + 1`` is
       created.  ``roll()`` seals it on demand (GC, for a log that is mostly
       garbage before it is full).
    5. Seal: write pending records, append the ledgers map, fdatasync, rewrite
       the header with the map's offset (``pwrite``), fdatasync.  Sealed logs
       are immutable.
    6. Flushed logs (every log but the current one) are read, scanned and, by GC
       and compaction, removed (unlink, directory fsync).
    7. Close: the current log is sealed; handles are closed.
    8. Full disk: a write (or creation) failing with ENOSPC or EDQUOT rolls the
       current log back to the size its last fdatasync covered (the file is
       truncated, pending records and their map counts dropped, an unsealed
       header put back if a seal was under way) and raises ``DiskFull``: every
       append since the last successful ``sync()`` is void and must be made
       again; later writes succeed once space is freed.  A rotation whose seal
       fails keeps the log current; one whose creation fails leaves no current
       log until an append creates it, and so does an open on a full disk.
       Meanwhile removing the highest log only empties it, keeping its name as
       the placeholder that stops its id from being used again.
       ``seal_unsealed`` leaves a log it has no room to seal for a later call.

Invariants
    1. Every record carries its ledger id and entry id, so the index can be
       rebuilt from the logs alone; ``read`` refuses a record whose ids differ
       from the ones asked for.
    2. Bytes of a log below its synced size never change, except the header,
       which changes once, from unsealed to sealed.  Bytes past it change only
       when a full disk rolls them back; no synced location points there, and
       a read of a rolled-back location fails its checks (invariant 6).
    3. A header names a map only once that map is durable; a sealed header's map
       covers every valid record of the log (and nothing else).
    4. A log's sealed size stays within ``size_bytes_limit`` unless it holds a
       single record larger than the limit.
    5. The current log is never removed; GC sees only ``flushed_log_ids()``.
    6. No bytes are returned that failed a CRC: a short read, a CRC mismatch or
       a misdirected record raises ``CorruptRecord`` with the file and offset.
    7. After a failed write, fdatasync, directory fsync or rollback the store
       refuses further writes (``DeviceBroken``), whatever the errno: a failed
       fdatasync may have dropped the pages it was to save, and a retry would
       report success over them ("fsyncgate").  Reads go on.  Only ENOSPC or
       EDQUOT from a write is not such a failure (``DiskFull``, lifecycle 8).
"""

from ._device import FileSystem as FileSystem
from ._device import OsFileSystem as OsFileSystem
from ._format import FORMAT_VERSION as FORMAT_VERSION
from ._format import RECORD_HEADER_SIZE_BYTES as RECORD_HEADER_SIZE_BYTES
from ._scan import RecordScan as RecordScan
from ._settings import EntryLogSettings as EntryLogSettings
from ._store import EntryLogStore as EntryLogStore
from ._types import EntryLog as EntryLog
from ._types import EntryLogStatistics as EntryLogStatistics
from ._types import FollowingRecord as FollowingRecord
from ._types import LedgerUsage as LedgerUsage
from ._types import Location as Location
from ._types import LocationRun as LocationRun
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
    "FileSystem",
    "FollowingRecord",
    "LedgerUsage",
    "Location",
    "LocationRun",
    "OsFileSystem",
    "RecordScan",
    "RecordScanner",
    "ScanEnd",
    "ScanStop",
    "ScannedRecord",
]
