"""Power-loss simulation: a FUSE file system that forgets what was not synced.

Layout: ``BACKING/`` is the disk, always exactly what would survive a power cut
now; ``BACKING/.powercut/`` holds inodes no durable entry names yet (deleted at
every cut and mount).  Everything newer lives in the daemon's memory.

Lifecycle: ``PowercutMount(...).start()`` mounts (one power epoch) →
``arm(Trigger)`` and/or ``cut(pids)`` → ``unmount()`` (a clean unmount syncs
everything, one after a cut keeps the disk as the cut left it) → mount again
(the reboot).

Invariants (the fault model; docs/powerloss.md has it in full):

1. A file's data and size reach the disk only at a completed fsync/fdatasync
   of that file; O_DIRECT writes are no exception.
2. A directory entry (create, mkdir, rename, link, unlink, rmdir) reaches the
   disk only at a completed fsync of its directory.
3. A cut falls between two operations; the processes it kills never see the
   result of a later one; afterwards every operation fails with EIO.
4. STRICT cuts keep nothing else; PARTIAL cuts keep a seeded random subset of
   the unsynced 4 KiB blocks, file sizes and directories.
"""

from ._model import BLOCK_SIZE_BYTES as BLOCK_SIZE_BYTES
from ._model import CutMode as CutMode
from ._model import CutReport as CutReport
from ._model import VolatileFS as VolatileFS
from ._mount import PowercutError as PowercutError
from ._mount import PowercutMount as PowercutMount
from ._mount import fuse_unavailable as fuse_unavailable
from ._trigger import Trigger as Trigger

__all__ = ["BLOCK_SIZE_BYTES", "CutMode", "CutReport", "PowercutError", "PowercutMount",
           "Trigger", "VolatileFS", "fuse_unavailable"]
