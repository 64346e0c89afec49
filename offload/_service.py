"""The offload service the app owns: one worker thread, a queue, the triggers.

Ledgers are offloaded one at a time by the worker (each offload uploads its
parts in parallel itself), which is also what makes aborting a ledger's
pending multipart uploads at the start of its run safe: no other attempt for
that ledger can be running.  At start the worker resumes every ledger left
PENDING or IN_PROGRESS, schedules the retry of every FAILED one, and deletes
the objects of ledgers that no longer exist.

With ``pack`` (OFFLOAD_PACK) the worker gathers small sealed ledgers and packs
them (:mod:`offload._packer`) once ``pack_size_bytes`` are waiting, or once
the queue is empty and the first has waited ``pack_wait_s``.  It keeps each
pack's live bytes (:class:`~offload._packer.PackTable`, rebuilt from the
offload records at start); a deleted member lowers them, and a pack whose
live fraction falls below ``pack_live_fraction_min`` is rewritten by the
worker, the old one deleted ``pack_delete_delay_s`` later.  At start the
worker also resolves packs a crash left half done and deletes packs no
ledger points at.

With ``tier_open_ledgers`` a second thread (:class:`~offload._tier_worker.TierWorker`)
uploads chunks of open ledgers as they fill; a tiered ledger is offloaded at
close, which consolidates its chunks.  The two never work on the same ledger
at once (:class:`~offload._tier_worker.LedgerGuard`).

A failed offload is recorded FAILED with the error, the failures in a row and
the time of its automatic retry (``retry_at``, persisted with the ledger, so
a restart keeps the schedule): the delay doubles per failure up to
``failed_retry_delay_s_max``, jittered.  A request (the API, the CLI) retries
at once.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import cast

from common.errors import InvalidSetting, NoSuchLedger, NotSealed
from ledger import LedgerInfo, LedgerState, OffloadInfo, OffloadState, TierPosition

from ._errors import OffloadCancelled
from ._offloader import Offloader, Step, StepHook, frame_bytes_of
from ._packer import Packer, PackHook, PackStep, PackTable, packable
from ._progress import Progress
from ._reader import RemoteLedgerReader
from ._retry import failed_retry_delay_s
from ._s3 import S3ObjectStore, make_s3_client
from ._source import LedgerSource, PackSource
from ._store import ObjectStore
from ._tier_worker import LedgerGuard, TierWorker
from ._tiering import TierHook
from .settings import OffloadSettings

log = logging.getLogger("ledgerd.offload")

_PAGE = 100
# Put on the queue to wake the worker (a pack to rewrite); never a ledger id.
_WAKE = -1
# Pages of closed ledgers one disk-usage check looks at, at most.
_DISK_SCAN_PAGES = 10


def open_object_store(settings: OffloadSettings) -> S3ObjectStore:
    """The S3 object store offload and its reads use (credentials: boto3's chain)."""
    client = make_s3_client(settings, pool_size=max(16, 4 * settings.upload_concurrency))
    return S3ObjectStore(client, settings)


class OffloadService:
    def __init__(self, source: LedgerSource, store: ObjectStore, settings: OffloadSettings, *,
                 reader: RemoteLedgerReader | None = None,
                 step_hook: StepHook | None = None,
                 tier_hook: TierHook | None = None,
                 pack_hook: PackHook | None = None,
                 clock: Callable[[], float] = time.time,
                 rng: random.Random | None = None) -> None:
        """``clock`` (epoch seconds) and ``rng`` (retry jitter) are injected for tests."""
        settings.check()
        self._source, self._store, self._settings = source, store, settings
        self._clock = clock
        self._rng = rng or random.Random()
        self._user_hook = step_hook
        self._executor = ThreadPoolExecutor(settings.upload_thread_count,
                                            thread_name_prefix="offload-upload")
        self._offloader = Offloader(source, store, settings, executor=self._executor,
                                    step_hook=self._hook, clock=clock)
        self._user_pack_hook = pack_hook
        # Packs are rewritten and deleted whenever the engine can record several
        # ledgers at once, even with OFFLOAD_PACK off (ledgers packed before).
        self._packer = Packer(cast(PackSource, source), store, settings,
                              executor=self._executor, step_hook=self._pack_hook,
                              clock=clock, delete_ledger_objects=self._offloader.delete_objects
                              ) if hasattr(source, "set_offloads") else None
        if settings.pack and self._packer is None:
            raise InvalidSetting("invalid setting OFFLOAD_PACK: the ledger source cannot "
                                 "record several ledgers at once")
        self._packs = PackTable()
        # Ledgers waiting to be packed (id -> frame bytes), since when; packs
        # to rewrite; old packs to delete, and when.
        self._pack_batch: dict[int, int] = {}
        self._pack_batch_since: float | None = None
        self._rewrites: set[str] = set()
        self._pack_deletes: list[tuple[float, str]] = []
        # The engine reads offloaded ledgers through this reader, so whoever builds
        # the engine first builds the reader on the same store and passes it here.
        self.reader = reader or RemoteLedgerReader(store, settings)
        self._lock = threading.Lock()
        self._queue: queue.Queue[int | None] = queue.Queue()
        self._queued: set[int] = set()
        # Where the next disk-usage walk goes on (see offload_by_disk_usage).
        self._disk_cursor: int | None = None
        self._progress: dict[int, Progress] = {}
        # FAILED ledgers and when the worker retries each (epoch seconds).
        self._retries: dict[int, float] = {}
        self._counts: Counter[str] = Counter()
        self._stopping = threading.Event()
        # Set once the worker has resumed what a previous run left (wait_idle).
        self._started = threading.Event()
        self._thread: threading.Thread | None = None
        self._guard = LedgerGuard()
        self._tiering = None if not settings.tier_open_ledgers else TierWorker(
            source, store, settings, executor=self._executor, guard=self._guard,
            on_closed=self._offload_tiered, on_deleted=self._forget_deleted,
            on_tiered=self.reader.refresh, step_hook=tier_hook, clock=clock, rng=self._rng)

    @classmethod
    def from_settings(cls, source: LedgerSource, settings: OffloadSettings, *,
                      reader: RemoteLedgerReader | None = None) -> OffloadService:
        """The service on a boto3 client for ``settings`` (credentials: boto3's chain);
        ``reader`` is the one built by :func:`open_object_store`'s caller, if any."""
        store = reader.store if reader is not None else open_object_store(settings)
        return cls(source, store, settings, reader=reader)

    @property
    def store(self) -> ObjectStore:
        return self._store

    # --- lifecycle -----------------------------------------------------------------

    def start(self) -> None:
        self._stopping.clear()
        self._started.clear()
        self._thread = threading.Thread(target=self._run, name="offload-worker", daemon=True)
        self._thread.start()
        if self._tiering is not None:
            self._tiering.start()

    def stop(self, timeout_s: float | None = None) -> None:
        """Stop the worker; an offload under way stops at its next step and stays
        IN_PROGRESS, to be resumed by the next ``start()``."""
        self._stopping.set()
        self._queue.put(None)
        if self._tiering is not None:
            self._tiering.stop(timeout_s)
        if self._thread is not None:
            self._thread.join(timeout_s)
        self._executor.shutdown(wait=True, cancel_futures=True)
        self.reader.close()

    def wait_idle(self, timeout_s: float) -> bool:
        """True once nothing is queued or running (tests and graceful shutdown)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                started = self._thread is None or self._started.is_set()
                if started and not self._queued and not self._rewrites:
                    return True
            time.sleep(0.01)
        return False

    # --- triggers ------------------------------------------------------------------

    def request_offload(self, ledger_id: int) -> OffloadInfo:
        """Queue a CLOSED ledger (idempotent); raises NoSuchLedger / NotSealed."""
        ledger = self._source.get_ledger(ledger_id)
        if ledger.state is not LedgerState.CLOSED:
            raise NotSealed(f"ledger {ledger_id} is {ledger.state}; only CLOSED ledgers "
                            "can be offloaded")
        state = ledger.offload.state
        with self._lock:
            if state is OffloadState.OFFLOADED or ledger_id in self._queued:
                return ledger.offload
            self._queued.add(ledger_id)
            self._retries.pop(ledger_id, None)  # retried now, not when scheduled
        try:
            if state in (OffloadState.NONE, OffloadState.FAILED):
                # The failures in a row carry over: if this attempt fails too,
                # the next automatic retry waits longer.
                ledger = self._source.set_offload(ledger_id, OffloadInfo(
                    state=OffloadState.PENDING, bucket=self._store.bucket,
                    key_prefix=self._offloader.layout.ledger_prefix(ledger_id),
                    failures=ledger.offload.failures))
        except BaseException:
            with self._lock:
                self._queued.discard(ledger_id)
            raise
        self._queue.put(ledger_id)
        log.info("offload queued", extra={"ledger_id": ledger_id, "previous_state": str(state)})
        return ledger.offload

    @property
    def tiering(self) -> TierWorker | None:
        """The thread tiering open ledgers (None unless TIER_OPEN_LEDGERS)."""
        return self._tiering

    def on_ledger_closed(self, ledger_id: int) -> None:
        """Offload a ledger as soon as it is closed, when OFFLOAD_AFTER_CLOSE is set,
        or when it was tiered while open (its chunks are consolidated)."""
        if not self._settings.after_close:
            self._offload_tiered(ledger_id)
            return
        try:
            self.request_offload(ledger_id)
        except (NoSuchLedger, NotSealed) as exc:
            log.info("not offloading after close", extra={"ledger_id": ledger_id,
                                                          "reason": str(exc)})

    def _offload_tiered(self, ledger_id: int) -> None:
        try:
            ledger = self._source.get_ledger(ledger_id)
            if ledger.state is LedgerState.CLOSED and ledger.tier != TierPosition() and (
                    ledger.offload.state is OffloadState.NONE):
                self.request_offload(ledger_id)
        except NoSuchLedger:
            return

    def offload_by_disk_usage(self, fraction_used: float, *,
                              ledger_count_max: int = 16) -> list[int]:
        """Above the disk-usage threshold, queue the oldest (lowest id) CLOSED
        ledgers never offloaded, at most ``ledger_count_max`` per call.

        The disk watcher calls this every few seconds while the disk stays
        full, so each call goes on from where the last one stopped (ledgers
        below were queued, or were offloaded already) and looks at no more than
        ``_DISK_SCAN_PAGES`` pages: a bookie holding a million ledgers, most of
        them offloaded, no longer lists them all on every check.  A ledger
        closed since below that point is found when the walk wraps round."""
        if fraction_used < self._settings.disk_usage_threshold:
            return []
        queued: list[int] = []
        after = self._disk_cursor
        wrapped = after is None
        for _ in range(_DISK_SCAN_PAGES):
            page, more = self._source.list_ledgers(state=LedgerState.CLOSED, after=after,
                                                   limit=_PAGE)
            for ledger in page:
                if len(queued) >= ledger_count_max:
                    break
                after = ledger.ledger_id
                if ledger.offload.state is OffloadState.NONE:
                    self.request_offload(ledger.ledger_id)
                    queued.append(ledger.ledger_id)
            if len(queued) >= ledger_count_max:
                break
            if more is None:
                if wrapped:
                    after = None  # every closed ledger looked at: start over next time
                    break
                after, wrapped = None, True
        self._disk_cursor = after
        if queued:
            log.info("offload by disk usage", extra={"fraction_used": fraction_used,
                                                     "ledger_ids": queued})
        return queued

    def delete_objects(self, ledger_id: int, info: OffloadInfo | None = None) -> int:
        """Delete a deleted ledger's objects (the app calls this after a DELETE,
        with the offload record the ledger had).  A packed ledger's bytes stay
        in its pack, which is rewritten once too little of it is live."""
        self.reader.forget(ledger_id)
        if info is not None and info.pack_key is not None:
            self._forget_member(info)
            return 0
        deleted = self._offloader.delete_objects(ledger_id)
        with self._lock:
            self._counts["ledgers_deleted_from_s3"] += 1
        return deleted

    def _forget_member(self, info: OffloadInfo) -> None:
        if info.state is not OffloadState.OFFLOADED or info.pack_key is None:
            return  # still being packed: marking leaves out deleted ledgers
        with self._lock:
            self._packs.remove(info)
            self._counts["packed_ledgers_deleted"] += 1
            wanted = (self._packs.live_fraction(info.pack_key)
                      < self._settings.pack_live_fraction_min)
            if wanted:
                self._rewrites.add(info.pack_key)
        if wanted:
            self._queue.put(_WAKE)

    def sweep_orphans(self) -> list[int]:
        """Delete objects, and abort multipart uploads, of ledger ids that were
        issued and no longer exist."""
        layout = self._offloader.layout
        swept: list[int] = []
        for prefix in self._store.list_prefixes(layout.bookie_prefix):
            ledger_id = layout.parse_ledger_prefix(prefix)
            if ledger_id is not None and self._is_deleted(ledger_id):
                self.delete_objects(ledger_id)
                swept.append(ledger_id)
        # An upload holds no object yet, so the listing above does not show it.
        for upload in self._store.list_multipart_uploads(layout.bookie_prefix):
            parsed = layout.parse(upload.key)
            if (parsed is not None and parsed.ledger_id not in swept
                    and self._is_deleted(parsed.ledger_id)):
                self.delete_objects(parsed.ledger_id)
                swept.append(parsed.ledger_id)
        return swept

    def _is_deleted(self, ledger_id: int) -> bool:
        if ledger_id >= self._source.next_ledger_id:
            # Not issued by this bookie's index: another bookie configured with
            # the same id, or a restored backup.  Deleting would be a guess.
            log.warning("objects of a ledger id never issued here", extra={
                "ledger_id": ledger_id, "next_ledger_id": self._source.next_ledger_id})
            return False
        try:
            self._source.get_ledger(ledger_id)
        except NoSuchLedger:
            return True
        return False

    # --- observation ----------------------------------------------------------------

    def progress(self, ledger_id: int) -> tuple[int, int] | None:
        """``(bytes_done, bytes_total)`` of an offload running now, else None."""
        with self._lock:
            running = self._progress.get(ledger_id)
        return None if running is None else running.snapshot()

    def next_retry_at(self, ledger_id: int) -> float | None:
        """When the worker retries this FAILED ledger by itself (epoch seconds)."""
        with self._lock:
            return self._retries.get(ledger_id)

    def statistics(self) -> dict[str, int | float]:
        with self._lock:
            stats: dict[str, int | float] = {
                "offloads_completed": self._counts["offloads_completed"],
                "offloads_failed": self._counts["offloads_failed"],
                "offloads_in_progress": len(self._progress),
                "offloads_queued": len(self._queued),
                "offloads_retried": self._counts["offloads_retried"],
                # FAILED ledgers waiting for their automatic retry, and the
                # earliest such retry (epoch seconds; 0: none scheduled).
                "offloads_retry_scheduled": len(self._retries),
                "offloads_next_retry_at": min(self._retries.values(), default=0.0),
                "ledgers_deleted_from_s3": self._counts["ledgers_deleted_from_s3"],
                "packs_written": self._counts["packs_written"],
                "packs_rewritten": self._counts["packs_rewritten"],
                "packs_deleted": self._counts["packs_deleted"],
                "packs_live": len(self._packs.live_bytes),
                "ledgers_packed": self._counts["ledgers_packed"],
                "packed_ledgers_deleted": self._counts["packed_ledgers_deleted"],
                "pack_batch_ledgers": len(self._pack_batch),
            }
        if self._tiering is not None:
            stats.update(self._tiering.statistics())
        stats.update(self._store.statistics())
        stats.update({f"read_{k}": v for k, v in self.reader.statistics().items()})
        return stats

    # --- the worker ---------------------------------------------------------------

    def _pack_hook(self, step: PackStep, pack_key: str) -> None:
        if self._user_pack_hook is not None:
            self._user_pack_hook(step, pack_key)
        if self._stopping.is_set():
            raise OffloadCancelled(f"stopping after {step} of pack {pack_key}")

    def _hook(self, step: Step, ledger_id: int) -> None:
        if self._user_hook is not None:
            self._user_hook(step, ledger_id)
        if self._stopping.is_set():
            raise OffloadCancelled(f"stopping after {step} of ledger {ledger_id}")

    def _run(self) -> None:
        try:
            self._resume()
            self.sweep_orphans()
        except OffloadCancelled:
            log.info("offload start-up interrupted by stop")
        except Exception:
            log.exception("offload start-up (resume and orphan sweep) failed")
        finally:
            self._started.set()
        while not self._stopping.is_set():
            try:
                ledger_id = self._queue.get(timeout=self._until_next_wake_s())
            except queue.Empty:
                self._due_work()
                continue
            if ledger_id is None:
                break
            if ledger_id != _WAKE and not self._batch_for_pack(ledger_id):
                self._offload_one(ledger_id)
            self._due_work()

    def _due_work(self) -> None:
        self._retry_due()
        if self._packer is None or self._stopping.is_set():
            return
        try:
            self._pack_due()
            self._rewrite_due()
            self._delete_packs_due()
        except OffloadCancelled:
            log.info("pack work interrupted by stop")

    def _until_next_wake_s(self) -> float | None:
        waits = [self._until_next_retry_s()]
        now = self._clock()
        with self._lock:
            if self._rewrites:
                return 0.0
            if self._pack_batch_since is not None:
                waits.append(self._pack_batch_since + self._settings.pack_wait_s - now)
            if self._pack_deletes:
                waits.append(min(at for at, _ in self._pack_deletes) - now)
        known = [wait for wait in waits if wait is not None]
        return None if not known else min(1.0, max(0.0, min(known)))

    # --- packs --------------------------------------------------------------------------

    def _batch_for_pack(self, ledger_id: int) -> bool:
        """Gather a small sealed ledger for the next pack; False: offload it alone."""
        if self._packer is None or not self._settings.pack:
            return False
        try:
            ledger = self._source.get_ledger(ledger_id)
        except NoSuchLedger:
            return False  # _offload_one forgets it
        if not packable(ledger, self._settings) or ledger.offload.state is OffloadState.OFFLOADED:
            return False
        with self._lock:
            self._pack_batch[ledger_id] = frame_bytes_of(ledger)
            if self._pack_batch_since is None:
                self._pack_batch_since = self._clock()
        return True

    def _pack_due(self) -> None:
        with self._lock:
            if self._pack_batch_since is None:
                return
            full = sum(self._pack_batch.values()) >= self._settings.pack_size_bytes
            waited = self._clock() - self._pack_batch_since >= self._settings.pack_wait_s
            if not full and not (waited and self._queue.empty()):
                return
            batch, self._pack_batch, self._pack_batch_since = self._pack_batch, {}, None
        self._flush_pack(sorted(batch))

    def _flush_pack(self, ledger_ids: list[int]) -> None:
        assert self._packer is not None
        try:
            result = self._packer.pack(ledger_ids)
            if result is not None:
                with self._lock:
                    for info in result.packed.values():
                        self._packs.add(info)
                    self._counts["packs_written"] += 1
                    self._counts["ledgers_packed"] += len(result.packed)
                    self._counts["offloads_completed"] += len(result.packed)
        except OffloadCancelled:
            log.info("packing interrupted by stop", extra={"ledgers": len(ledger_ids)})
        except Exception as exc:
            log.error("packing failed", extra={"ledgers": len(ledger_ids), "error": str(exc)})
            for ledger_id in ledger_ids:
                self._record_failure(ledger_id, exc)
        finally:
            with self._lock:
                self._queued.difference_update(ledger_ids)

    def _rewrite_due(self) -> None:
        assert self._packer is not None
        while True:
            with self._lock:
                if not self._rewrites:
                    return
                # Left in the set until done, so wait_idle() waits for it.
                key = next(iter(self._rewrites))
                if self._packs.live_fraction(key) >= self._settings.pack_live_fraction_min:
                    self._rewrites.discard(key)
                    continue
            try:
                result = self._packer.rewrite(key)
            except OffloadCancelled:
                raise
            except Exception as exc:
                # Left as it is: the next start looks at its live fraction again.
                log.error("pack rewrite failed", extra={"pack_key": key, "error": str(exc)})
                with self._lock:
                    self._rewrites.discard(key)
                continue
            with self._lock:
                self._rewrites.discard(key)
                self._packs.drop(key)
                if result is not None:
                    for info in result.packed.values():
                        self._packs.add(info)
                    self._counts["packs_rewritten"] += 1
                self._pack_deletes.append((self._clock() + self._settings.pack_delete_delay_s,
                                           key))
            if result is not None:
                for ledger_id in result.packed:
                    self.reader.refresh(ledger_id)

    def _delete_packs_due(self) -> None:
        assert self._packer is not None
        now = self._clock()
        with self._lock:
            due = [key for at, key in self._pack_deletes if at <= now]
            self._pack_deletes = [(at, key) for at, key in self._pack_deletes if at > now]
        for key in due:
            try:
                self._packer.delete_pack(key)
                self._count("packs_deleted")
            except OffloadCancelled:
                raise
            except Exception as exc:
                # Nothing points at it: the next start's sweep deletes it.
                log.warning("could not delete an old pack", extra={"pack_key": key,
                                                                   "error": str(exc)})

    def _resume_packs(self, packing: dict[str, list[LedgerInfo]]) -> None:
        """At start: resolve packs left half done, delete packs nothing points at,
        queue the rewrite of packs mostly dead."""
        if self._packer is None:
            return
        again = self._packer.recover(packing) if packing else []
        redone = set(again)
        for ledger in (ledger for ledgers in packing.values() for ledger in ledgers):
            if ledger.ledger_id not in redone:
                with contextlib.suppress(NoSuchLedger):  # adopted: now OFFLOADED
                    self._packs.add(self._source.get_ledger(ledger.ledger_id).offload)
        if self._settings.pack or self._packs.live_bytes:
            for data_key in self._packer.packs_in_bucket() - set(self._packs.live_bytes):
                self._packer.delete_pack(data_key)
                self._count("packs_deleted")
        with self._lock:
            self._rewrites.update(
                key for key in self._packs.live_bytes
                if self._packs.live_fraction(key) < self._settings.pack_live_fraction_min)
        for ledger_id in again:
            try:
                self.request_offload(ledger_id)
            except NoSuchLedger:
                continue

    def _resume(self) -> None:
        after: int | None = None
        packing: dict[str, list[LedgerInfo]] = {}
        while True:
            page, after = self._source.list_ledgers(after=after, limit=_PAGE)
            for ledger in page:
                state = ledger.offload.state
                if ledger.offload.pack_key is not None and state is OffloadState.OFFLOADED:
                    self._packs.add(ledger.offload)
                elif ledger.offload.pack_key is not None and state is OffloadState.IN_PROGRESS:
                    packing.setdefault(ledger.offload.pack_key, []).append(ledger)
                elif state is OffloadState.FAILED:
                    self._schedule_retry(ledger.ledger_id, ledger.offload)
                elif state in (OffloadState.PENDING, OffloadState.IN_PROGRESS):
                    try:
                        self.request_offload(ledger.ledger_id)
                    except NoSuchLedger:
                        continue  # deleted since the listing; the sweep handles its objects
            if after is None:
                break
        self._resume_packs(packing)

    # --- automatic retries of FAILED offloads ----------------------------------------

    def _schedule_retry(self, ledger_id: int, info: OffloadInfo) -> None:
        """Remember when to retry a FAILED ledger: its persisted ``retry_at``, or
        (recorded before retries were automatic) one delay from now."""
        retry_at = info.retry_at
        if retry_at is None:
            retry_at = self._clock() + self._retry_delay_s(max(1, info.failures))
        with self._lock:
            self._retries[ledger_id] = retry_at

    def _retry_delay_s(self, failures: int) -> float:
        return failed_retry_delay_s(failures,
                                    initial_s=self._settings.failed_retry_delay_s_initial,
                                    max_s=self._settings.failed_retry_delay_s_max,
                                    rng=self._rng)

    def _until_next_retry_s(self) -> float | None:
        """How long the worker may wait for work before a retry is due (None:
        nothing scheduled).  At most a second, so a clock that jumps (or a
        test's clock) is looked at again soon."""
        with self._lock:
            earliest = min(self._retries.values(), default=None)
        if earliest is None:
            return None
        return min(1.0, max(0.0, earliest - self._clock()))

    def _retry_due(self) -> None:
        now = self._clock()
        with self._lock:
            due = sorted(lid for lid, at in self._retries.items() if at <= now)
        for ledger_id in due:
            with self._lock:
                self._retries.pop(ledger_id, None)
            try:
                if self._source.get_ledger(ledger_id).offload.state is not OffloadState.FAILED:
                    continue  # retried on request meanwhile, or the ledger is gone
                self.request_offload(ledger_id)
            except NoSuchLedger:
                continue
            except Exception:
                # The engine refused (broken, shutting down): the next start retries.
                log.exception("automatic offload retry could not be queued",
                              extra={"ledger_id": ledger_id})
                continue
            self._count("offloads_retried")
            log.info("offload retried automatically", extra={"ledger_id": ledger_id})

    def _offload_one(self, ledger_id: int) -> None:
        try:
            ledger = self._source.get_ledger(ledger_id)
            with self._lock:
                self._progress[ledger_id] = progress = Progress(frame_bytes_of(ledger))
            with self._guard.hold(ledger_id):
                self._offloader.offload(ledger_id, progress)
            self._count("offloads_completed")
            # Reads of it no longer go to chunks (deleted) but to its segments.
            self.reader.refresh(ledger_id)
        except OffloadCancelled:
            log.info("offload interrupted by stop", extra={"ledger_id": ledger_id})
        except NoSuchLedger:
            self._forget_deleted(ledger_id)
        except Exception as exc:
            self._record_failure(ledger_id, exc)
        finally:
            with self._lock:
                self._progress.pop(ledger_id, None)
                self._queued.discard(ledger_id)

    def _record_failure(self, ledger_id: int, exc: Exception) -> None:
        self._count("offloads_failed")
        try:
            failures = self._source.get_ledger(ledger_id).offload.failures + 1
            retry_at = self._clock() + self._retry_delay_s(failures)
            log.error("offload failed", extra={"ledger_id": ledger_id, "error": str(exc),
                                               "failures": failures, "retry_at": retry_at},
                      exc_info=exc)
            # Scheduled before FAILED is persisted, so whoever sees the FAILED
            # record also sees its retry scheduled.  Only this thread runs due
            # retries, and the ledger stays queued until this attempt ends, so
            # nothing acts on the schedule before the record is written.
            with self._lock:
                self._retries[ledger_id] = retry_at
            self._source.set_offload(ledger_id, OffloadInfo(
                state=OffloadState.FAILED, bucket=self._store.bucket,
                key_prefix=self._offloader.layout.ledger_prefix(ledger_id),
                error=f"{type(exc).__name__}: {exc}", failures=failures,
                retry_at=retry_at))
        except NoSuchLedger:
            with self._lock:
                self._retries.pop(ledger_id, None)
            self._forget_deleted(ledger_id)

    def _forget_deleted(self, ledger_id: int) -> None:
        # Deleted while it was being offloaded: what was uploaded is an orphan.
        try:
            self.delete_objects(ledger_id)
        except Exception as exc:
            log.warning("could not delete objects of a deleted ledger; the next start "
                        "sweeps them", extra={"ledger_id": ledger_id, "error": str(exc)})

    def _count(self, name: str) -> None:
        with self._lock:
            self._counts[name] += 1

