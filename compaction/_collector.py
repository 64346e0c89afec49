"""The garbage collector: a background thread that reclaims entry-log space.

One run (every ``gc_wait_time``, or forced through the admin API):

1. drop the local copy of offloaded ledgers past ``offload_deletion_lag``
   (their entries become garbage; reads go to S3), and the local entries of
   ledgers tiered while open below a tier position seen at least that long
   ago (``_TierLag``; GC runs see positions only every ``gc_wait_time``, so
   a range stays local between the lag and the lag plus one GC interval);
2. measure every flushed entry log's usage from its ledgers map (first
   sealing the current log if its usage is below ``minor_threshold``: a log
   that stops filling, little written and most of it deleted since, would
   otherwise keep that garbage until it reaches its size limit);
3. remove logs with no live data;
4. if major (or minor) compaction is due, allowed and not suspended, compact
   logs under its threshold, lowest usage first, within the rate limit and
   ``run_time_s_max``.

Before 2, logs that may hold copies an interrupted compaction never indexed
(``Relocations.suspect_logs``) are compacted whatever their usage.

Deleted ledgers' index entries and metadata are removed by the checkpoint that
follows the DELETE (one ``delete_range`` a ledger); a forced run checkpoints
first, so a ledger deleted just before it counts.  Those deletes give no space
back until RocksDB compacts them away, so after 3 every run with deletions
since the last one compacts the index's deleted ranges (BookKeeper's
``removeOffsetFromDeletedLedgers``: ``deleteRange`` then ``compactRange``),
in RocksDB's threads with no engine lock held.

Disk pressure (BookKeeper's behaviour, with its common complaint fixed): past
``disk_warn_threshold`` scheduled major compaction is suspended, past
``disk_hard_threshold`` both kinds are; a forced run ignores disk pressure, so
an operator can always dig a full disk out.  Suspension by an operator holds
for scheduled runs; a forced run with ``force_major``/``force_minor`` is the
operator overriding it explicitly.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field

from common.errors import DiskFull, LedgerdError, NoSuchLedger
from common.memory import release_free_heap
from ledger import Bookie, OffloadState, Relocations

from ._compactor import CompactionProgress, CompactionStep, EntryLogCompactor, StepHook
from ._selection import LogUsage, compaction_candidates, log_usage, removable
from ._settings import CompactionSettings
from ._throttle import ByteRateLimiter

log = logging.getLogger("ledgerd.gc")


@dataclass
class GcRunReport:
    """What one run did (also the body of the ``ledgerd gc`` CLI summary)."""

    started_at: float
    forced: bool = False
    major: bool = False
    minor: bool = False
    duration_s: float = 0.0
    local_copies_dropped: int = 0
    tiered_ranges_dropped: int = 0
    logs_removed: int = 0
    reclaimed_by_deletion_bytes: int = 0
    logs_compacted: int = 0
    reclaimed_by_compaction_bytes: int = 0
    index_reclaimed_bytes: int = 0
    moved_bytes: int = 0
    moved_entries: int = 0
    errors: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


@dataclass
class _Totals:
    runs: int = 0
    major_compaction_count: int = 0
    minor_compaction_count: int = 0
    local_copies_dropped: int = 0
    tiered_ranges_dropped: int = 0
    logs_removed: int = 0
    logs_compacted: int = 0
    reclaimed_by_deletion_bytes: int = 0
    reclaimed_by_compaction_bytes: int = 0
    index_reclaimed_bytes: int = 0
    moved_bytes: int = 0
    moved_entries: int = 0
    compaction_failures: int = 0
    run_time_s_total: float = 0.0


@dataclass
class _Progress:
    """The run in progress, for the API and the CLI's progress bar."""

    running: bool = False
    kind: str = ""
    log_id: int | None = None
    bytes_done: int = 0
    bytes_total: int = 0


class _TierLag:
    """When each ledger's tier position was first seen, so that its local
    entries below a position go only once it was tiered ``lag_s`` ago.

    Kept in memory: after a restart the clock starts again, which only keeps
    entries local longer.  A ledger holds at most one sample per GC run
    between its lag's start and end."""

    def __init__(self, lag_s: float) -> None:
        self._lag_s = lag_s
        self._seen: dict[int, list[tuple[float, int]]] = {}

    def due(self, ledger_id: int, tiered_entry_id: int, now: float) -> int:
        """The highest entry id tiered at least ``lag_s`` ago (0: none)."""
        samples = self._seen.setdefault(ledger_id, [])
        if not samples or samples[-1][1] < tiered_entry_id:
            samples.append((now, tiered_entry_id))
        due = max((entry_id for seen_at, entry_id in samples
                   if seen_at + self._lag_s <= now), default=0)
        samples[:] = [(t, e) for t, e in samples if e > due]
        return due

    def keep_only(self, ledger_ids: set[int]) -> None:
        for ledger_id in set(self._seen) - ledger_ids:
            del self._seen[ledger_id]


def entry_log_usage(relocations: Relocations, *,
                    flushed_only: bool = False) -> list[LogUsage]:
    """Each entry log's size and live bytes by its ledgers map, counting only
    ledgers whose local entries are still needed.  ``flushed_only`` (GC): only
    the logs GC may touch, neither the log being written nor one a checkpoint
    sealed before committing its locations (``Relocations.indexed_log_ids``);
    otherwise every log, such a one counted by its map alone (an upper bound)."""
    store = relocations.entry_log
    # The ids first, then what the index says: a log listed here holds no
    # record the index below misses (see indexed_log_ids).
    log_ids = store.flushed_log_ids() if flushed_only else store.log_ids()
    indexed = set(relocations.indexed_log_ids(log_ids))
    if flushed_only:
        log_ids = [i for i in log_ids if i in indexed]
    located = _Located(relocations)
    return [_measure_log(relocations, i, located, indexed=i in indexed) for i in log_ids]


class _Located:
    """Per ledger tiered while open (its older entries dropped), how many of its
    entries the index points into each log: asked once per ledger per run, and
    only for ledgers the logs measured hold."""

    def __init__(self, relocations: Relocations) -> None:
        self._relocations = relocations
        self._counts: dict[int, Counter[int]] = {}

    def in_log(self, log_id: int, usage_map: Mapping[int, object]) -> dict[int, int]:
        found: dict[int, int] = {}
        for lid in usage_map:
            if not self._relocations.local_first_entry_id(lid):
                continue
            counts = self._counts.get(lid)
            if counts is None:
                counts = self._counts[lid] = self._relocations.located_entry_counts(lid)
            found[lid] = counts[log_id]
        return found


def _measure_log(relocations: Relocations, log_id: int, located: _Located, *,
                 indexed: bool) -> LogUsage:
    store = relocations.entry_log
    usage_map = store.ledgers_map(log_id)
    # Ledgers tiered while open keep only their newer entries: the index says
    # how many of them are in each log (their maps count the dropped ones too).
    return log_usage(log_id, store.log_size_bytes(log_id), usage_map,
                     relocations.locally_stored(),
                     located.in_log(log_id, usage_map) if indexed else None)


class _UsageCache:
    """GC's measure of each flushed entry log, kept between runs.  A sealed log
    never changes; its usage changes only when one of its ledgers turns
    garbage (or needed again), or the index drops some of a ledger's entries
    (``Relocations.watch_liveness`` says which), or compaction moved entries
    out of it.  So a run measures new logs and the logs holding such a
    ledger, and an idle run touches no ledger at all: measuring every log
    each run cost every ledger held (maps copied, every id looked up)."""

    def __init__(self, relocations: Relocations) -> None:
        self._relocations = relocations
        self._changes = relocations.watch_liveness()
        self._usage: dict[int, LogUsage] = {}
        self.measured = 0  # logs measured (tests count them)

    def forget(self, log_id: int) -> None:
        self._usage.pop(log_id, None)

    def measure(self) -> list[LogUsage]:
        changed = self._changes.take()  # before anything is read (see ChangedIds)
        if changed is None:
            self._usage.clear()
        elif changed:
            for log_id, cached in list(self._usage.items()):
                if cached.holds_any(changed):
                    self.forget(log_id)
        store = self._relocations.entry_log
        log_ids = store.flushed_log_ids()
        indexed = self._relocations.indexed_log_ids(log_ids)
        for gone in set(self._usage) - set(log_ids):
            self.forget(gone)
        located = _Located(self._relocations)
        found: list[LogUsage] = []
        for log_id in indexed:
            usage = self._usage.get(log_id)
            if usage is None:
                usage = _measure_log(self._relocations, log_id, located, indexed=True)
                self._usage[log_id] = usage
                self.measured += 1
            found.append(usage)
        return found


class GarbageCollector:
    def __init__(self, bookie: Bookie, settings: CompactionSettings, *,
                 disk_usage: Callable[[], float],
                 offload_deletion_lag_s: float | None = None,
                 on_step: StepHook | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        settings.check()
        self._bookie = bookie
        self._relocations = bookie.relocations
        self._settings = settings
        self._disk_usage = disk_usage
        self._deletion_lag_s = offload_deletion_lag_s
        self._tier_lag = _TierLag(offload_deletion_lag_s or 0.0)
        self._clock = clock
        self._stop = threading.Event()
        self._wake = threading.Condition()
        self._force: tuple[bool, bool] | None = None  # (major, minor) of a pending forced run
        self._in_force_gc = False
        self._run_lock = threading.Lock()  # one run at a time (thread, CLI, tests)
        self._suspended = {"major": False, "minor": False}
        now = clock()
        # As BookKeeper: the first compaction of each kind comes one interval after start.
        self._last = {"major": now, "minor": now, "gc": 0.0}
        self._totals = _Totals()
        self._progress = _Progress()
        self._last_report: GcRunReport | None = None
        self._thread: threading.Thread | None = None
        self._usage = _UsageCache(bookie.relocations)
        self._compactor = EntryLogCompactor(
            bookie.relocations, limiter=ByteRateLimiter(settings.rate_bytes_per_s, stop=self._stop),
            commit_bytes=settings.commit_bytes, stop=self._stop, on_step=on_step)
        self._on_step = on_step or (lambda step, log_id: None)

    # --- lifecycle -------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="ledgerd-gc", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread; a compaction in progress ends at its next record."""
        self._stop.set()
        with self._wake:
            self._wake.notify_all()
        if self._thread is not None:
            self._thread.join()

    def _loop(self) -> None:
        while not self._stop.is_set():
            with self._wake:
                self._wake.wait_for(lambda: self._force is not None or self._stop.is_set(),
                                    timeout=self._settings.gc_wait_time_s)
                force, self._force = self._force, None
            if self._stop.is_set():
                return
            try:
                if force is None:
                    self.run_once()
                else:
                    self.run_once(forced=True, force_major=force[0], force_minor=force[1])
            except Exception:
                log.exception("garbage collection run failed")
            finally:
                if force is not None:
                    self._in_force_gc = self._force is not None

    # --- admin control (app.controls.GcControl) --------------------------

    def trigger_gc(self, *, force_major: bool, force_minor: bool) -> None:
        with self._wake:
            prev = self._force or (False, False)
            self._force = (prev[0] or force_major, prev[1] or force_minor)
            self._in_force_gc = True
            self._wake.notify_all()

    def is_in_force_gc(self) -> bool:
        return self._in_force_gc

    def suspend_compaction(self, *, major: bool, minor: bool) -> None:
        self._set_suspended(major, minor, True)

    def resume_compaction(self, *, major: bool, minor: bool) -> None:
        self._set_suspended(major, minor, False)

    def _set_suspended(self, major: bool, minor: bool, value: bool) -> None:
        for kind, chosen in (("major", major), ("minor", minor)):
            if chosen and self._suspended[kind] != value:
                self._suspended[kind] = value
                log.info("%s compaction %s", kind, "suspended" if value else "resumed",
                         extra={"compaction": kind, "suspended": value})

    def compaction_suspended(self) -> tuple[bool, bool]:
        return self._suspended["major"], self._suspended["minor"]

    def gc_details(self) -> dict[str, object]:
        p = self._progress
        details: dict[str, object] = {
            "force_compacting": self._in_force_gc,
            "major_compacting": p.running and p.kind == "major",
            "minor_compacting": p.running and p.kind == "minor",
            "last_major_compaction_time": self._last["major"],
            "last_minor_compaction_time": self._last["minor"],
            "last_gc_time": self._last["gc"] or None,
            "is_major_gc_suspended": self._suspended["major"],
            "is_minor_gc_suspended": self._suspended["minor"],
            "progress": asdict(p),
            "last_run": asdict(self._last_report) if self._last_report else None,
        }
        details.update(asdict(self._totals))
        return details

    def statistics(self) -> dict[str, float]:
        """Counters and gauges for Prometheus (``ledgerd_gc_*``)."""
        stats: dict[str, float] = {k: float(v) for k, v in asdict(self._totals).items()}
        stats["compacting"] = float(self._progress.running)
        stats["progress_bytes_done"] = float(self._progress.bytes_done)
        stats["progress_bytes_total"] = float(self._progress.bytes_total)
        stats["major_suspended"] = float(self._suspended["major"])
        stats["minor_suspended"] = float(self._suspended["minor"])
        return stats

    # --- one run ---------------------------------------------------------

    def run_once(self, *, forced: bool = False, force_major: bool = False,
                 force_minor: bool = False) -> GcRunReport:
        with self._run_lock:
            report = GcRunReport(started_at=self._clock(), forced=forced)
            began = time.monotonic()
            try:
                self._run(report, force_major=force_major, force_minor=force_minor)
            finally:
                report.duration_s = time.monotonic() - began
                self._finish(report)
            return report

    def _run(self, report: GcRunReport, *, force_major: bool, force_minor: bool) -> None:
        if report.forced:
            # Ledgers deleted just before an operator forces a run are garbage to
            # this very run: their deletion reaches the index with a checkpoint.
            try:
                self._bookie.checkpoint()
            except DiskFull as exc:
                # The way out of a full disk: deletions committed on their own make
                # the entry logs of deleted ledgers garbage this run removes.
                report.errors.append(f"checkpoint before the forced run: {exc}")
                self._bookie.commit_deletions()
            except LedgerdError as exc:
                report.errors.append(f"checkpoint before the forced run: {exc}")
        self._drop_offloaded_local_copies(report)
        self._drop_tiered_local_entries(report)
        self._compact_suspects(report)
        self._roll_mostly_garbage_log(report)
        logs = self._remove_empty(self._measure(), report)
        self._compact_index(report)
        kind, threshold = self._compaction_due(report, force_major, force_minor)
        if kind is None:
            return
        self._compact(kind, compaction_candidates(logs, threshold), report)

    def _compact_suspects(self, report: GcRunReport) -> None:
        """Compact logs an interrupted compaction may have left unindexed copies
        in, whatever their usage: their maps overstate it, so the thresholds
        could keep them forever.  Bounded: the logs that existed at the
        restart from the interrupted batch's log on (usually one or two)."""
        store = self._relocations.entry_log
        existing = set(store.log_ids())
        for log_id in self._relocations.suspect_logs():
            if log_id in existing:
                done = self._compactor.compact(log_id, deadline=float("inf"))
                self._usage.forget(log_id)  # entries moved out: measured again
                self._account(done, report)
                if not done.finished:
                    continue
            self._relocations.clear_suspect_log(log_id)

    def _drop_offloaded_local_copies(self, report: GcRunReport) -> None:
        lag = self._deletion_lag_s
        if lag is None:
            return
        now = self._clock()
        # The bookie keeps the offloaded ledgers whose local copy is here: a run
        # looks at those, not at every ledger held.
        for ledger_id in self._bookie.offloaded_with_local_copy():
            try:
                off = self._bookie.get_ledger(ledger_id).offload
            except NoSuchLedger:
                continue  # deleted since
            if (off.state == OffloadState.OFFLOADED and not off.local_deleted
                    and off.offloaded_at is not None and off.offloaded_at + lag <= now
                    and self._bookie.drop_local_copy(ledger_id)):
                report.local_copies_dropped += 1

    def _drop_tiered_local_entries(self, report: GcRunReport) -> None:
        """Ledgers tiered while open (or not yet offloaded since): local entries
        below a tier position seen ``offload_deletion_lag`` ago become garbage
        (one checkpoint for all of them); their logs are then removed or
        compacted below like any other."""
        if self._deletion_lag_s is None:
            return
        now = self._clock()
        tiered: set[int] = set()
        due: dict[int, int] = {}
        for ledger_id in self._bookie.tiered_beyond_local():
            try:
                info = self._bookie.get_ledger(ledger_id)
            except NoSuchLedger:
                continue
            if info.offload.local_deleted or info.tier.entry_id <= info.local_first_entry_id:
                continue
            tiered.add(info.ledger_id)
            below = self._tier_lag.due(info.ledger_id, info.tier.entry_id, now)
            if below > info.local_first_entry_id:
                due[info.ledger_id] = below
        self._tier_lag.keep_only(tiered)
        if due:
            report.tiered_ranges_dropped += len(self._bookie.drop_local_entries(due))

    def _roll_mostly_garbage_log(self, report: GcRunReport) -> None:
        store = self._relocations.entry_log
        log_id = store.current_log_id
        if self._settings.minor_threshold <= 0.0 or log_id not in store.log_ids():
            return  # minor compaction off, or no current log (a full disk kept it)
        # An upper bound (partially local ledgers counted whole), which only
        # makes a roll rarer.
        usage = log_usage(log_id, store.log_size_bytes(log_id), store.ledgers_map(log_id),
                          self._relocations.locally_stored())
        if usage.usage >= self._settings.minor_threshold:
            return
        try:
            rolled = self._relocations.roll_entry_log(log_id)
        except LedgerdError as exc:
            report.errors.append(f"sealing the current entry log {log_id}: {exc}")
            return
        if rolled:
            log.info("current entry log sealed for GC log_id=%d usage=%.3f", log_id,
                     usage.usage, extra={"log_id": log_id, "usage": usage.usage})

    def _measure(self) -> list[LogUsage]:
        return self._usage.measure()

    def _remove_empty(self, logs: list[LogUsage], report: GcRunReport) -> list[LogUsage]:
        """Remove logs with no live data; returns the others."""
        store = self._relocations.entry_log
        empty = removable(logs)
        for usage in empty:
            store.remove(usage.log_id)
            report.logs_removed += 1
            report.reclaimed_by_deletion_bytes += usage.size_bytes
            log.info("entry log with no live data removed log_id=%d bytes=%d", usage.log_id,
                     usage.size_bytes, extra={"log_id": usage.log_id, "bytes": usage.size_bytes})
        return [u for u in logs if u not in empty]

    def _compact_index(self, report: GcRunReport) -> None:
        """Give back the index space of ledgers deleted since the last run."""
        if not self._relocations.index_deletes_uncompacted():
            return
        self._on_step(CompactionStep.INDEX_COMPACTING, 0)
        try:
            reclaimed = self._relocations.compact_deleted_index()
        except LedgerdError as exc:
            # The deletes stand and their spans stay recorded: the next run retries.
            report.errors.append(f"index compaction: {exc}")
            return
        self._on_step(CompactionStep.INDEX_COMPACTED, 0)
        # The flushed memtables (and the deleted ledgers' records in the
        # table) were freed, but glibc keeps freed memory in the process.
        release_free_heap()
        if reclaimed is not None:
            report.index_reclaimed_bytes += reclaimed
            log.info("index compacted after deletions bytes_reclaimed=%d", reclaimed,
                     extra={"bytes": reclaimed})

    def _compaction_due(self, report: GcRunReport, force_major: bool,
                        force_minor: bool) -> tuple[str | None, float]:
        s, now = self._settings, self._clock()
        disk = self._disk_usage()
        for kind, force, threshold, interval in (
            ("major", force_major, s.major_threshold, s.major_interval_s),
            ("minor", force_minor, s.minor_threshold, s.minor_interval_s),
        ):
            if threshold <= 0.0:
                continue  # a threshold of 0 turns that kind off, as in BookKeeper
            if force:
                return kind, threshold
            if now - self._last[kind] < interval:
                continue
            blocked = self._blocked(kind, disk)
            if blocked:
                report.skipped.append(f"{kind}: {blocked}")
                continue
            return kind, threshold
        return None, 0.0

    def _blocked(self, kind: str, disk: float) -> str | None:
        s = self._settings
        if self._suspended[kind]:
            return "suspended by an operator"
        if disk >= s.disk_hard_threshold:
            return f"disk {disk:.0%} full, past the hard threshold {s.disk_hard_threshold:.0%}"
        if kind == "major" and disk >= s.disk_warn_threshold:
            return f"disk {disk:.0%} full, past the warn threshold {s.disk_warn_threshold:.0%}"
        return None

    def _compact(self, kind: str, candidates: list[LogUsage], report: GcRunReport) -> None:
        setattr(report, kind, True)
        p = self._progress
        p.running, p.kind, p.bytes_done = True, kind, 0
        p.bytes_total = sum(u.size_bytes for u in candidates)
        deadline = time.monotonic() + self._settings.run_time_s_max
        log.info("%s compaction started logs=%d bytes=%d", kind, len(candidates), p.bytes_total,
                 extra={"compaction": kind, "logs": len(candidates), "bytes": p.bytes_total})
        try:
            for usage in candidates:
                if self._stop.is_set() or time.monotonic() >= deadline:
                    report.skipped.append(f"{kind}: stopped or out of time before log "
                                          f"{usage.log_id}")
                    break
                p.log_id = usage.log_id
                try:
                    done = self._compactor.compact(usage.log_id, deadline=deadline)
                except DiskFull as exc:
                    self._usage.forget(usage.log_id)
                    # Copies need room; the entry log voided the unsynced ones and
                    # nothing pointed at them yet.  Removing emptied logs still ran.
                    report.errors.append(f"{kind} compaction of log {usage.log_id} stopped: "
                                         f"the disk is full ({exc})")
                    break
                self._usage.forget(usage.log_id)  # entries moved out: measured again
                p.bytes_done += usage.size_bytes
                self._account(done, report)
        finally:
            p.running, p.log_id = False, None
        now = self._clock()
        self._last[kind] = now
        if kind == "major":
            self._last["minor"] = now  # a major run covers everything a minor one would

    @staticmethod
    def _account(done: CompactionProgress, report: GcRunReport) -> None:
        report.moved_bytes += done.copied_bytes
        report.moved_entries += done.copied_entries
        if done.error is not None:
            report.errors.append(done.error)
        elif done.finished:
            report.logs_compacted += 1
            report.reclaimed_by_compaction_bytes += max(0, done.size_bytes - done.copied_bytes)

    def _finish(self, report: GcRunReport) -> None:
        t = self._totals
        t.runs += 1
        t.major_compaction_count += int(report.major)
        t.minor_compaction_count += int(report.minor)
        t.local_copies_dropped += report.local_copies_dropped
        t.tiered_ranges_dropped += report.tiered_ranges_dropped
        t.logs_removed += report.logs_removed
        t.logs_compacted += report.logs_compacted
        t.reclaimed_by_deletion_bytes += report.reclaimed_by_deletion_bytes
        t.reclaimed_by_compaction_bytes += report.reclaimed_by_compaction_bytes
        t.index_reclaimed_bytes += report.index_reclaimed_bytes
        t.moved_bytes += report.moved_bytes
        t.moved_entries += report.moved_entries
        t.compaction_failures += len(report.errors)
        t.run_time_s_total += report.duration_s
        self._last["gc"] = report.started_at
        self._last_report = report
        log.info("gc run done", extra={k: v for k, v in asdict(report).items()
                                       if k not in ("errors", "skipped")})
