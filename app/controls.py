"""Admin seams the routes use for services that run beside the engine.

Garbage collection/compaction and offload are separate components (STYLE 2: admin
controls are not part of the data path).  ``create_app`` takes an object for each;
``None`` means the service is not running here, and its admin routes answer 503.
Implementations conform structurally; they need not import this module.  Blocking
methods are called from a worker thread, never on the event loop.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from ledger import OffloadInfo


@runtime_checkable
class GcControl(Protocol):
    """Force-GC and compaction suspension (BookKeeper's ``/api/v1/bookie/gc*``)."""

    def trigger_gc(self, *, force_major: bool, force_minor: bool) -> None:
        """Start a GC run now (returns at once; the run is in the background)."""

    def is_in_force_gc(self) -> bool: ...

    def gc_details(self) -> Mapping[str, object]:
        """Counters, last run times, progress (the fields of ``models.GcDetails``)."""

    def suspend_compaction(self, *, major: bool, minor: bool) -> None: ...

    def resume_compaction(self, *, major: bool, minor: bool) -> None: ...

    def compaction_suspended(self) -> tuple[bool, bool]:
        """``(major_suspended, minor_suspended)``."""

    def statistics(self) -> Mapping[str, float]:
        """Gauges for Prometheus (``ledgerd_gc_*``)."""


@runtime_checkable
class OffloadControl(Protocol):
    """Offload to S3 (``POST /api/v1/ledgers/{id}/offload`` and the hooks around it)."""

    def request_offload(self, ledger_id: int) -> OffloadInfo:
        """Queue the ledger for offload and return its offload state.

        Raises ``NoSuchLedger``, or ``NotSealed`` for a ledger that is not CLOSED.
        """

    def progress(self, ledger_id: int) -> tuple[int, int] | None:
        """``(bytes_done, bytes_total)`` while the ledger's offload runs, else None."""

    def on_ledger_closed(self, ledger_id: int) -> None:
        """Offload it when ``OFFLOAD_AFTER_CLOSE`` is set (returns at once)."""

    def delete_objects(self, ledger_id: int) -> int:
        """Delete a deleted ledger's objects; returns how many."""

    def offload_by_disk_usage(self, fraction_used: float) -> list[int]:
        """Queue the oldest closed ledgers while the data disk is too full."""

    def statistics(self) -> Mapping[str, float]:
        """Gauges for Prometheus (``ledgerd_offload_*``)."""
