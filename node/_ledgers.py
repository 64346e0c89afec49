"""The ledger operations a node offers, with the node's policies around the engine.

Routes call these, never the engine: in standalone mode they run on the local
bookie; closing queues the offload (``OFFLOAD_AFTER_CLOSE``) and deleting
removes the ledger's S3 objects in the background, so code that embeds the node
gets the same behaviour as HTTP clients.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Executor, Future
from typing import Any

from common.errors import NotConfigured
from ledger import (
    AddResult,
    BatchAddResult,
    Bookie,
    Entry,
    LedgerInfo,
    LedgerState,
    OffloadInfo,
    OffloadState,
    Pending,
)
from offload import OffloadService

log = logging.getLogger("ledgerd.node")


class Ledgers:
    def __init__(self, bookie: Bookie, *, offload: OffloadService | None,
                 background: Executor) -> None:
        self._bookie = bookie
        self._offload = offload
        self._background = background

    # --- ledgers ---------------------------------------------------------

    def create(self, *, password: str, metadata: Mapping[str, str]) -> Pending[LedgerInfo]:
        return self._bookie.create_ledger(password=password, metadata=metadata)

    def get(self, ledger_id: int) -> LedgerInfo:
        return self._bookie.get_ledger(ledger_id)

    def list(self, *, state: LedgerState | None, after: int | None,
             limit: int) -> tuple[list[LedgerInfo], int | None]:
        return self._bookie.list_ledgers(state=state, after=after, limit=limit)

    def fence(self, ledger_id: int, *, password: str) -> Pending[LedgerInfo]:
        return self._bookie.fence(ledger_id, password=password)

    def close(self, ledger_id: int, *, password: str) -> Pending[LedgerInfo]:
        """Seal the ledger; once that is durable, offload it if OFFLOAD_AFTER_CLOSE."""
        closed = self._bookie.close_ledger(ledger_id, password=password)
        if self._offload is not None:
            self._once_durable(closed, self._offload.on_ledger_closed, ledger_id)
        return closed

    def delete(self, ledger_id: int, *, password: str) -> Pending[None]:
        """Delete the ledger: 404 from now on; its S3 objects go in the background
        (S3 being slow or down must not fail a delete: what this misses, the
        orphan sweep at the next start deletes)."""
        offloaded = self._bookie.get_ledger(ledger_id).offload.state != OffloadState.NONE
        deleted = self._bookie.delete_ledger(ledger_id, password=password)
        if self._offload is not None and offloaded:
            self._once_durable(deleted, _delete_objects, self._offload, ledger_id)
        return deleted

    def _once_durable(self, pending: Pending[Any], action: Callable[..., object],
                      *args: Any) -> None:
        """Run ``action(*args)`` on the node's background thread once ``pending``
        is durable (whether or not anyone waits for it); never on the journal's
        acker thread, which must not wait for S3 or a checkpoint."""

        def submit(future: Future[Any]) -> None:
            if future.exception() is not None:
                return
            try:
                self._background.submit(_logged, action, *args)
            except RuntimeError:  # the node is shutting down
                log.warning("node stopping: %s skipped", getattr(action, "__name__", action),
                            extra={"args": repr(args)})

        pending.future.add_done_callback(submit)

    # --- entries ---------------------------------------------------------

    def add_entry(self, ledger_id: int, payload: bytes, *, password: str,
                  expected_entry_id: int | None = None,
                  block: bool = True) -> Pending[AddResult]:
        return self._bookie.add_entry(ledger_id, payload, password=password,
                                      expected_entry_id=expected_entry_id, block=block)

    def add_entries(self, ledger_id: int, payloads: Sequence[bytes], *, password: str,
                    block: bool = True) -> Pending[BatchAddResult]:
        return self._bookie.add_entries(ledger_id, payloads, password=password, block=block)

    def read_entry(self, ledger_id: int, entry_id: int) -> Entry:
        return self._bookie.read_entry(ledger_id, entry_id)

    def read_entries(self, ledger_id: int, start: int = 0, end: int | None = None,
                     limit: int | None = None) -> Iterator[Entry]:
        return self._bookie.read_entries(ledger_id, start, end, limit)

    # --- offload ---------------------------------------------------------

    def request_offload(self, ledger_id: int) -> OffloadInfo:
        """Queue a CLOSED ledger for offload; NotConfigured without S3."""
        if self._offload is None:
            self._bookie.get_ledger(ledger_id)  # an unknown ledger is 404 first
            raise NotConfigured("offload is not configured (set S3_BUCKET)")
        return self._offload.request_offload(ledger_id)

    def offload_status(self, ledger_id: int) -> tuple[OffloadInfo, tuple[int, int] | None]:
        """The ledger's offload state and, while it runs, (bytes done, bytes total)."""
        info = self._bookie.get_ledger(ledger_id).offload
        progress = None if self._offload is None else self._offload.progress(ledger_id)
        return info, progress


def _logged(action: Callable[..., object], *args: Any) -> None:
    try:
        action(*args)
    except Exception:
        log.exception("background action %s%r failed", getattr(action, "__name__", action),
                      args)


def _delete_objects(offload: OffloadService, ledger_id: int) -> None:
    try:
        count = offload.delete_objects(ledger_id)
    except Exception:
        log.exception("deleting the S3 objects of deleted ledger %d failed; the orphan "
                      "sweep at the next start retries", ledger_id,
                      extra={"ledger_id": ledger_id})
    else:
        log.info("S3 objects of deleted ledger deleted",
                 extra={"ledger_id": ledger_id, "objects": count})
