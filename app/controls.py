"""Admin seams the routes use for services that run beside the engine.

Garbage collection/compaction and offload are separate components (STYLE 2: admin
controls are not part of the data path).  ``create_app`` takes an object for each;
``None`` means the service is not running here, and its admin routes answer 503.
Implementations conform structurally; they need not import this module.  Blocking
methods are called from a worker thread, never on the event loop.
"""

from __future__ import annotations

from typing import Protocol, TypedDict, runtime_checkable

from ledger import OffloadInfo


class GcDetailsDict(TypedDict, total=False):
    force_compacting: bool
    major_compacting: bool
    minor_compacting: bool
    last_major_compaction_time: float | None
    last_minor_compaction_time: float | None
    major_compaction_count: int
    minor_compaction_count: int


@runtime_checkable
class GcControl(Protocol):
    """Force-GC and compaction suspension (BookKeeper's ``/api/v1/bookie/gc*``)."""

    def trigger_gc(self, *, force_major: bool, force_minor: bool) -> None:
        """Start a GC run now (returns at once; the run is in the background)."""

    def is_in_force_gc(self) -> bool: ...

    def gc_details(self) -> GcDetailsDict: ...

    def suspend_compaction(self, *, major: bool, minor: bool) -> None: ...

    def resume_compaction(self, *, major: bool, minor: bool) -> None: ...

    def compaction_suspended(self) -> tuple[bool, bool]:
        """``(major_suspended, minor_suspended)``."""


@runtime_checkable
class OffloadControl(Protocol):
    """Offload on request (``POST /api/v1/ledgers/{id}/offload``)."""

    def request_offload(self, ledger_id: int) -> OffloadInfo:
        """Queue the ledger for offload and return its offload state.

        Raises ``NoSuchLedger``, or ``NotSealed`` for a ledger that is not CLOSED.
        """
