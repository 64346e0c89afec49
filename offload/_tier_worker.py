"""The thread that tiers open ledgers as they fill (``TIER_OPEN_LEDGERS``).

Each round looks at the OPEN and FENCED ledgers: one holding a full chunk of
acknowledged bytes beyond its tier position gets one step of the
:class:`~offload._tiering.Tierer` (up to ``upload_concurrency`` chunks).
Rounds follow each other at once while there is a backlog, and every
``tier_interval_s`` otherwise.  The first round looks at every CLOSED ledger,
and each later round at those open in the round before and closed since (a
round costs the open ledgers, not every ledger held): one that was tiered
and whose offload has not begun (closed while a step ran, or while the
service was down) is handed to the offload service, whose run consolidates
its chunks.  (The close itself hands it over at once: ``on_ledger_closed``.)

A step that fails (S3 refusing, its retries spent) leaves the position where
it was; that ledger is tried again after the same capped, jittered backoff as
a FAILED offload (``failed_retry_delay_s_initial`` doubling up to
``failed_retry_delay_s_max``), while the other ledgers go on.

The steps of one ledger never overlap with each other nor with that
ledger's offload (consolidation at close): both hold its :class:`LedgerGuard`
(in cluster mode, the ledger's offload lock in etcd: a guard that cannot be
taken now raises ``Backpressure``, and the ledger waits for the next round).
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from contextlib import AbstractContextManager
from typing import Protocol

from common.errors import Backpressure, NoSuchLedger
from ledger import LedgerInfo, LedgerState, OffloadState, TierPosition

from ._errors import OffloadCancelled
from ._retry import failed_retry_delay_s
from ._source import LedgerSource
from ._store import ObjectStore
from ._tiering import Tierer, TierHook, TierStep, pending_bytes
from .settings import OffloadSettings

log = logging.getLogger("ledgerd.offload.tiering")

_PAGE = 100


class StepGuard(Protocol):
    def hold(self, ledger_id: int) -> AbstractContextManager[None]:
        """Held across one step of the ledger; ``Backpressure``: not now."""


class LedgerGuard:
    """One lock per ledger, made on demand and dropped when nobody holds it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[int, tuple[threading.Lock, int]] = {}

    @contextlib.contextmanager
    def hold(self, ledger_id: int) -> Iterator[None]:
        with self._lock:
            lock, users = self._held.get(ledger_id, (threading.Lock(), 0))
            self._held[ledger_id] = (lock, users + 1)
        try:
            with lock:
                yield
        finally:
            with self._lock:
                lock, users = self._held[ledger_id]
                if users == 1:
                    del self._held[ledger_id]
                else:
                    self._held[ledger_id] = (lock, users - 1)


class TierWorker:
    def __init__(self, source: LedgerSource, store: ObjectStore, settings: OffloadSettings, *,
                 executor: Executor, guard: StepGuard,
                 on_closed: Callable[[int], object], on_deleted: Callable[[int], object],
                 on_tiered: Callable[[int], None],
                 step_hook: TierHook | None = None,
                 clock: Callable[[], float] = time.time,
                 rng: random.Random | None = None) -> None:
        self._source, self._settings = source, settings
        self._guard = guard
        self._on_closed, self._on_deleted = on_closed, on_deleted
        self._user_hook = step_hook
        self._clock = clock
        self._rng = rng or random.Random()
        self._tierer = Tierer(source, store, settings, executor=executor,
                              step_hook=self._hook, on_tiered=on_tiered)
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._failures: dict[int, int] = {}
        self._retry_at: dict[int, float] = {}
        self._backlog_bytes = 0
        self._rounds = 0
        # The OPEN and FENCED ledgers the last whole round saw.
        self._unclosed: set[int] = set()

    # --- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        self._stopping.clear()
        self._thread = threading.Thread(target=self._run, name="offload-tier", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float | None = None) -> None:
        """Stop after the step under way (its position is recorded or not:
        either way the next start goes on from the recorded one)."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def wake(self) -> None:
        """Look at the ledgers now rather than at the next interval."""
        self._wake.set()

    # --- rounds ------------------------------------------------------------------------

    def run_once(self) -> int:
        """One round over the open (and fenced) ledgers; the chunks uploaded."""
        chunks = backlog = 0
        unclosed: set[int] = set()
        for state in (LedgerState.OPEN, LedgerState.FENCED):
            for ledger in self._ledgers(state):
                unclosed.add(ledger.ledger_id)
                backlog += max(0, pending_bytes(ledger))
                if self._tierer.has_work(ledger) and self._due(ledger.ledger_id):
                    chunks += self._step(ledger.ledger_id)
        if self._rounds == 0:
            for ledger in self._ledgers(LedgerState.CLOSED):
                self._closed(ledger)
        elif not self._stopping.is_set():
            # Only the ledgers open last round and not now: closed (or deleted)
            # since, which is how a closed ledger comes to need this thread.
            # Walking every closed ledger every minute cost every ledger held.
            for ledger_id in sorted(self._unclosed - unclosed):
                try:
                    ledger = self._source.get_ledger(ledger_id)
                except NoSuchLedger:
                    self._tierer.forget(ledger_id)
                    self._clear_failures(ledger_id)
                    continue
                if ledger.state is LedgerState.CLOSED:
                    self._closed(ledger)
        if not self._stopping.is_set():
            self._unclosed = unclosed
        self._rounds += 1
        with self._lock:
            self._backlog_bytes = backlog
        return chunks

    def _ledgers(self, state: LedgerState) -> Iterator[LedgerInfo]:
        after: int | None = None
        while not self._stopping.is_set():
            page, after = self._source.list_ledgers(state=state, after=after, limit=_PAGE)
            yield from page
            if after is None:
                return

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                uploaded = self.run_once()
            except OffloadCancelled:
                return
            except Exception:
                log.exception("tiering round failed")
                uploaded = 0
            if not uploaded:
                self._wake.wait(self._settings.tier_interval_s)
                self._wake.clear()

    def _closed(self, ledger: LedgerInfo) -> None:
        self._tierer.forget(ledger.ledger_id)
        self._clear_failures(ledger.ledger_id)
        if ledger.tier != TierPosition() and ledger.offload.state is OffloadState.NONE:
            # Closed while a step ran, or while the service was down: the
            # offload consolidates its chunks.
            self._on_closed(ledger.ledger_id)

    def _step(self, ledger_id: int) -> int:
        try:
            with self._guard.hold(ledger_id):
                uploaded = self._tierer.tier(ledger_id)
        except NoSuchLedger:
            self._tierer.forget(ledger_id)
            self._clear_failures(ledger_id)
            self._on_deleted(ledger_id)  # what it uploaded is an orphan now
            return 0
        except OffloadCancelled:
            raise
        except Backpressure as exc:
            log.debug("tiering step deferred", extra={"ledger_id": ledger_id, "why": str(exc)})
            return 0
        except Exception as exc:
            self._failed(ledger_id, exc)
            return 0
        self._clear_failures(ledger_id)
        with self._lock:
            self._counts["tier_steps"] += 1
            self._counts["tier_chunks_uploaded"] += uploaded
        return uploaded

    # --- failures ----------------------------------------------------------------------

    def _due(self, ledger_id: int) -> bool:
        with self._lock:
            return self._retry_at.get(ledger_id, 0.0) <= self._clock()

    def _failed(self, ledger_id: int, exc: Exception) -> None:
        with self._lock:
            failures = self._failures[ledger_id] = self._failures.get(ledger_id, 0) + 1
            delay = failed_retry_delay_s(failures,
                                         initial_s=self._settings.failed_retry_delay_s_initial,
                                         max_s=self._settings.failed_retry_delay_s_max,
                                         rng=self._rng)
            self._retry_at[ledger_id] = self._clock() + delay
            self._counts["tier_failures"] += 1
        log.error("tiering step failed", exc_info=exc, extra={
            "ledger_id": ledger_id, "failures": failures, "retry_in_s": round(delay, 3),
            "error": f"{type(exc).__name__}: {exc}"})

    def _clear_failures(self, ledger_id: int) -> None:
        with self._lock:
            self._failures.pop(ledger_id, None)
            self._retry_at.pop(ledger_id, None)

    def _hook(self, step: TierStep, ledger_id: int) -> None:
        if self._user_hook is not None:
            self._user_hook(step, ledger_id)
        if self._stopping.is_set():
            raise OffloadCancelled(f"stopping after {step} of ledger {ledger_id}")

    # --- observation -------------------------------------------------------------------

    def statistics(self) -> dict[str, int | float]:
        with self._lock:
            return {
                "tier_steps": self._counts["tier_steps"],
                "tier_chunks_uploaded": self._counts["tier_chunks_uploaded"],
                "tier_failures": self._counts["tier_failures"],
                # Ledgers waiting out a failed step's backoff.
                "tier_ledgers_retrying": len(self._retry_at),
                # Acknowledged bytes of open ledgers not in chunks yet (last round).
                "tier_backlog_bytes": self._backlog_bytes,
            }
