"""The services that run beside the engine, built from the settings.

The lifespan owns them (STYLE 11): started after the bookie opens, stopped
before it closes.  Each returns the control object the admin routes call.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from .controls import OffloadControl
from .deps import Services, blocking
from .disk import used_fraction
from .settings import ServiceSettings

if TYPE_CHECKING:
    from compaction import GarbageCollector
    from ledger import Bookie
    from offload import OffloadService

log = logging.getLogger("ledgerd.background")


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


def start_offload(settings: ServiceSettings, bookie: Bookie) -> OffloadService:
    """The offload worker (resumes unfinished offloads and sweeps orphans at
    start); its reader serves ledgers whose local copy is gone."""
    from offload import OffloadService

    service = OffloadService.from_settings(bookie, settings.to_offload())
    service.start()
    bookie.attach_remote_reader(service.reader)
    return service


def spawn(services: Services, work: Coroutine[Any, Any, None]) -> None:
    """Run ``work`` beside the request; the lifespan cancels what is left at shutdown."""
    task = asyncio.create_task(work)
    services.background.append(task)
    task.add_done_callback(services.background.remove)


async def delete_offloaded(control: OffloadControl, ledger_id: int) -> None:
    try:
        count = await blocking(control.delete_objects, ledger_id)
    except Exception:
        log.exception("deleting the S3 objects of deleted ledger %d failed; the orphan "
                      "sweep at the next start retries", ledger_id,
                      extra={"ledger_id": ledger_id})
    else:
        log.info("S3 objects of deleted ledger deleted", extra={"ledger_id": ledger_id,
                                                               "objects": count})
