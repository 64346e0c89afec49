"""The write-ahead journal: a ring of records on a raw block device or a file.

On-disk layout (byte tables in ``_header.py``, ``_record.py`` and
``docs/formats-journal.md``)::

    device offset 0      header slot 0  (4 KiB)  generation even
    device offset 4096   header slot 1  (4 KiB)  generation odd
    device offset 8192   ring data area, ``capacity_bytes`` long

Logical offsets grow forever; logical offset L lives at device offset
``8192 + L % capacity``.  A write or read crossing the end of the ring is split in
two.  The device is a block device (production: a dedicated partition, size from
BLKGETSIZE64) or a regular file preallocated to ``8192 + capacity`` bytes
(embedded default), opened with O_DIRECT; every I/O is 4 KiB aligned in offset,
length and memory.

Records (32-byte header + body) are packed into blocks.  A block starts at a 4 KiB
aligned logical offset and is zero-padded to a 4 KiB multiple; a record never
spans two blocks.

Lifecycle::

    j = Journal.open(settings)          # read the header; format only an all-zero one
    for record in j.replay(): ...       # once: live records from the trim offset
    j.start()                           # repair crash leftovers, header UNCLEAN, threads
    a = j.append_nowait(body)           # offset now; a.future -> its block's end, synced
    a = j.append_many_nowait(records)   # consecutive records, one lock and one future
    j.trim(offset)                      # after a checkpoint: header, then free space
    j.close()                           # drain, sync, header CLEAN

Group commit: the writer thread seals the open block when it reaches
``block_size_bytes_soft_limit``, when its first record waited
``group_wait_s_max``, or at once when nothing is written-but-unsynced (an idle
device: a lone writer pays no batching delay, and under load records gather while
the previous fdatasync runs).  It pwrites blocks from one aligned mmap buffer,
sealed blocks queued behind a busy device together in one write of up to four
soft limits (one large write costs the device less than several small ones); the
syncer thread runs fdatasync, and the blocks written before that sync began are
resolved in logical order.  Everything per group is per block, not per append:
the appends of one block share one future (resolved with the end of the block's
last record) and one list of ``on_synced`` hooks, and a block is handed between
threads once.  Several blocks may be in flight, bounded by
``sliding_window_bytes_max``.  Each hand-over between these threads is a wake-up
(a futex and the GIL) on the round trip of a group, so a light load takes fewer:
a writer that finds no sync running syncs what it wrote itself, and a sync whose
blocks carry few hooks (``_INLINE_HOOKS_MAX``) resolves them itself while the
acker thread has nothing in hand; more go to the acker, which runs them while
the next sync already runs.  One sync runs at a time and holds its turn until its
blocks are resolved or handed to the acker, so acks stay in offset order (I4).
How a write is made durable is ``JournalSettings.sync_mode`` (``SyncMode``):
O_DIRECT + fdatasync, O_DIRECT + RWF_DSYNC (the write is durable on return, the
sync does nothing), or a page-cache write + fdatasync; the bytes on the device
are the same in every mode, which may change between two opens.

Invariants (checked with ``invariant()`` where they are enforced):

I1  Both header slots all zero means a new device; a device with no valid slot but
    some non-zero bytes is refused with FormatMismatch, never reformatted.
I2  The capacity is fixed at format time: a different ``capacity_bytes`` setting
    or a device smaller than ``8192 + capacity`` is refused with FormatMismatch.
I3  ``trim_offset <= synced_offset <= appended_offset``; data at or after the trim
    offset is never overwritten: an append that would need ring bytes before
    ``trim_offset + capacity`` raises JournalFull.
I4  Logical offsets are assigned under the append lock, so append order is offset
    order, and futures resolve strictly in offset order, only after an fdatasync
    that began after the record's block was written.  A device error fails every
    pending and later append with DeviceBroken; nothing is acked after it.
I5  A header write goes to slot ``generation % 2`` and is synced; every header
    update writes both slots in turn, so a torn header write leaves the other slot
    with the previous state and one slot damaged at rest loses nothing.  A trim
    frees ring space only after its header is durable.
I6  Bytes written but not yet synced never exceed ``sliding_window_bytes_max``
    (and one block never exceeds it), so after a crash every record that may have
    reached the device lies within one window past the first hole.  The header
    stores this window; it only grows.
I7  Recovery follows rules R1-R6 in ``_recovery.py``: zero padding to a 4 KiB
    boundary is skipped; valid records within one window past the first hole are
    returned; a valid record more than one window past it, or any CRC failure or
    hole after a CLEAN shutdown, raises CorruptRecord(path, offset); after an
    UNCLEAN shutdown holes get pad records and torn bytes get zeros (synced before
    new data) and are reported in ``recovery_report``; writing resumes at the
    4 KiB aligned end of the last valid record.

Test doubles: ``journal.testing`` (``MemoryDevice``, ``FaultyDevice``) holds
in-memory devices for tests and seeded simulation.  They are not part of this
surface and the service never imports them (``tests/test_layers.py``).
"""

from ._device import BlockDevice as BlockDevice
from ._device import DirectDevice as DirectDevice
from ._device import aligned_buffer as aligned_buffer
from ._journal import Journal as Journal
from ._record import record_body_bytes as record_body_bytes
from ._recovery import align_up as align_up
from ._settings import ALIGNMENT_BYTES as ALIGNMENT_BYTES
from ._settings import JournalSettings as JournalSettings
from ._settings import SyncMode as SyncMode
from ._types import JournalAppend as JournalAppend
from ._types import JournalRecord as JournalRecord
from ._types import JournalStatistics as JournalStatistics
from ._types import RecoveryReport as RecoveryReport

__all__ = [
    "ALIGNMENT_BYTES",
    "BlockDevice",
    "DirectDevice",
    "Journal",
    "JournalAppend",
    "JournalRecord",
    "JournalSettings",
    "JournalStatistics",
    "RecoveryReport",
    "SyncMode",
    "align_up",
    "aligned_buffer",
    "record_body_bytes",
]
