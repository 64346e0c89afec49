"""Automatic read-only mode when the data disk fills up.

Every ``DISK_CHECK_INTERVAL`` seconds the used fraction of the data directory's file
system is compared with ``READONLY_DISK_USAGE_THRESHOLD``: at or above it the bookie
turns read-only (adds answer 507 ``EREADONLY``, reads keep working); once usage drops
below the threshold again, read-only mode entered this way is left.  With offload
configured, the same check also queues the oldest closed ledgers for offload while
usage is at or above ``OFFLOAD_DISK_USAGE_THRESHOLD``.  Read-only mode
set by an operator (``PUT /api/v1/bookie/state/readonly``) is never undone here.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path

import anyio

from .deps import Services, blocking

log = logging.getLogger("ledgerd.disk")


def used_fraction(path: Path) -> float:
    usage = shutil.disk_usage(path)
    return usage.used / usage.total if usage.total else 0.0


async def check_once(services: Services, usage: Callable[[Path], float] = used_fraction) -> float:
    """One comparison of disk usage with the threshold; returns the usage seen."""
    settings = services.settings
    fraction = await blocking(usage, settings.data_dir)
    bookie = services.bookie
    if services.offload is not None:
        # Offload is how a tiered bookie makes room before it has to refuse adds.
        await blocking(services.offload.offload_by_disk_usage, fraction)
    if fraction >= settings.readonly_disk_usage_threshold:
        if not bookie.read_only:
            log.warning(
                "data disk %.1f%% full (threshold %.1f%%): entering read-only mode",
                fraction * 100,
                settings.readonly_disk_usage_threshold * 100,
                extra={"disk_usage": fraction},
            )
            await blocking(bookie.set_read_only, True)
            services.auto_read_only = True
    elif services.auto_read_only:
        log.warning(
            "data disk %.1f%% full: leaving read-only mode",
            fraction * 100,
            extra={"disk_usage": fraction},
        )
        await blocking(bookie.set_read_only, False)
        services.auto_read_only = False
    return fraction


async def watch(services: Services, usage: Callable[[Path], float] = used_fraction) -> None:
    """Run :func:`check_once` forever (cancelled by the lifespan on shutdown)."""
    while True:
        try:
            await check_once(services, usage)
        except Exception:
            log.exception("disk usage check failed")
        await anyio.sleep(services.settings.disk_check_interval)
