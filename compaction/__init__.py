"""Garbage collection and minor/major compaction of entry logs.

(The card calls it ``gc``; a top-level package of that name would lose every
import to Python's built-in ``gc`` module.)

Public surface:

- :class:`GarbageCollector` — the background collector the app owns; it is the
  ``GcControl`` the admin routes call (trigger, suspend/resume, details).
- :class:`GcRunReport` — what one run did.
- :class:`EntryLogCompactor`, :class:`CompactionProgress`, :func:`is_live` — moving
  one log's live entries (used by the collector; exposed for the crash test);
  :class:`CompactionStep` — the steps an ``on_step`` hook is told of.
- :class:`ByteRateLimiter`, :data:`BURST_S` — the compaction rate limit and its bucket.
- :class:`CompactionSettings` — every knob of GC and compaction.
- :func:`entry_log_usage` — every entry log's usage (the admin listing, GC).
- :func:`log_usage`, :func:`removable`, :func:`compaction_candidates`,
  :class:`LogUsage` — the pure selection rules.

Invariants:

1. An entry log is removed only when no index location of a locally live
   ledger points into it (usage 0 by its map, or every live record copied and
   committed).
2. Copies are fsynced before the index points at them; the index is updated
   before the old log is removed.
3. A compaction never holds the checkpoint lock for longer than one index batch
   (``commit_bytes`` of copies), so adds and checkpoints keep flowing.
"""

from ._collector import GarbageCollector as GarbageCollector
from ._collector import GcRunReport as GcRunReport
from ._collector import entry_log_usage as entry_log_usage
from ._compactor import CompactionProgress as CompactionProgress
from ._compactor import CompactionStep as CompactionStep
from ._compactor import EntryLogCompactor as EntryLogCompactor
from ._compactor import is_live as is_live
from ._selection import LogUsage as LogUsage
from ._selection import compaction_candidates as compaction_candidates
from ._selection import log_usage as log_usage
from ._selection import removable as removable
from ._settings import CompactionSettings as CompactionSettings
from ._throttle import BURST_S as BURST_S
from ._throttle import ByteRateLimiter as ByteRateLimiter

__all__ = [
    "BURST_S",
    "ByteRateLimiter",
    "CompactionProgress",
    "CompactionSettings",
    "CompactionStep",
    "EntryLogCompactor",
    "GarbageCollector",
    "GcRunReport",
    "LogUsage",
    "compaction_candidates",
    "entry_log_usage",
    "is_live",
    "log_usage",
    "removable",
]
