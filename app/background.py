"""The services that run beside the engine, built from the settings.

The lifespan owns them (STYLE 11): started after the bookie opens, stopped
before it closes.  Each returns the control object the admin routes call.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from .disk import used_fraction
from .settings import ServiceSettings

if TYPE_CHECKING:
    from compaction import GarbageCollector
    from ledger import Bookie


def start_gc(settings: ServiceSettings, bookie: Bookie) -> GarbageCollector:
    """The background garbage collector (every ``GC_WAIT_TIME``)."""
    from compaction import GarbageCollector

    lag = settings.offload_deletion_lag if settings.offload_enabled else None
    collector = GarbageCollector(
        bookie,
        bookie.settings.compaction,
        disk_usage=functools.partial(used_fraction, settings.data_dir),
        offload_deletion_lag_s=lag,
    )
    collector.start()
    return collector
