"""Re-replication of one ledger for the auditor, sans-I/O (docs/cluster.md §9).

``plan_rereplication`` is pure: from the metadata, what each live bookie holds of
the settled fragments (``ListEntries``), the lost bookies and the writable ones,
it decides each copy (entry, source, target) and each replacement of a lost
bookie.  ``LedgerRereplicator`` carries a plan out: list, read from a source,
``CopyEntry`` to the target (up to ``window`` copies in flight), then one CAS
replacing the lost bookies.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from common.errors import MetadataConflict, NoSuchLedger

from ._effects import (
    Clock,
    Current,
    Effect,
    MetadataResult,
    RepairDone,
    Send,
    Stopped,
    WriteMetadata,
    Written,
)
from ._messages import (
    BookieReply,
    CopyEntry,
    CopyOk,
    EntriesHeld,
    EntryFound,
    ListEntries,
    ReadEntry,
)
from ._metadata import Fragment, LedgerMetadata, LedgerState, write_set

RETRY_S = 0.5
# Copies in flight at once: one at a time, each copy is two round trips.
COPY_WINDOW = 16


@dataclass(frozen=True, slots=True)
class SettledRange:
    """Fragment ``index`` holds committed entries ``first … last`` only."""

    index: int
    first: int
    last: int


@dataclass(frozen=True, slots=True)
class Copy:
    entry_id: int
    sources: tuple[str, ...]      # bookies holding it at a valid epoch
    target: str


@dataclass(frozen=True, slots=True)
class RepairPlan:
    copies: tuple[Copy, ...]
    replacements: Mapping[tuple[int, str], str]   # (fragment index, lost bookie) → new
    unrecoverable: tuple[int, ...]                # committed entries with no valid source

    @property
    def empty(self) -> bool:
        return not self.copies and not self.replacements


def settled_ranges(md: LedgerMetadata) -> list[SettledRange]:
    """Fragments whose entries are all committed: every fragment of a CLOSED ledger,
    every one but the last of an open ledger (the writer owns the last, §6.2)."""
    count = len(md.ensembles) if md.state is LedgerState.CLOSED else len(md.ensembles) - 1
    ranges = []
    for index in range(count):
        last = md.fragment_end(index)
        first = md.ensembles[index].first_entry_id
        if last is not None and last >= first:
            ranges.append(SettledRange(index, first, last))
    return ranges


def plan_rereplication(md: LedgerMetadata, holdings: Mapping[str, Mapping[int, int]],
                       lost: set[str], writable: Sequence[str]) -> RepairPlan:
    """Copies that bring every settled entry back to Qw valid replicas.

    ``holdings[b]`` maps the entry ids live bookie b holds to their epochs; a lost
    bookie is replaced in each fragment naming it by a writable bookie not in it.
    """
    replacements: dict[tuple[int, str], str] = {}
    copies: list[Copy] = []
    unrecoverable: list[int] = []
    for settled in settled_ranges(md):
        fragment = md.ensembles[settled.index]
        chosen: list[str] = []
        for bookie in fragment.bookies:
            if bookie in lost:
                spare = _spare(fragment, lost, writable, chosen)
                if spare is not None:
                    chosen.append(spare)
                    replacements[(settled.index, bookie)] = spare
        planned: list[Copy] = []
        for entry_id in range(settled.first, settled.last + 1):
            members = write_set(fragment, entry_id, md.write_quorum)
            sources = tuple(b for b in members if b not in lost
                            and holdings.get(b, {}).get(entry_id, -1) >= fragment.epoch)
            if not sources:
                # Only a lost bookie may hold it: never replace those, it may return.
                unrecoverable.append(entry_id)
                for b in members:
                    replacements.pop((settled.index, b), None)
                continue
            planned.extend(Copy(entry_id, sources, b) for b in members
                           if b not in sources and b not in lost)
            planned.extend(Copy(entry_id, sources, b) for b in members if b in lost)
        for copy in planned:
            if copy.target not in lost:
                copies.append(copy)
            elif (settled.index, copy.target) in replacements:
                copies.append(Copy(copy.entry_id, copy.sources,
                                   replacements[(settled.index, copy.target)]))
    return RepairPlan(tuple(copies), replacements, tuple(unrecoverable))


def _spare(fragment: Fragment, lost: set[str], writable: Sequence[str],
           chosen: Sequence[str]) -> str | None:
    for candidate in writable:
        if candidate not in fragment.bookies and candidate not in lost \
                and candidate not in chosen:
            return candidate
    return None


def apply_replacements(md: LedgerMetadata,
                       replacements: Mapping[tuple[int, str], str]) -> LedgerMetadata:
    fragments = list(md.ensembles)
    for (index, lost), spare in replacements.items():
        fragment = fragments[index]
        fragments[index] = replace(fragment, bookies=tuple(
            spare if b == lost else b for b in fragment.bookies))
    return replace(md, ensembles=tuple(fragments))


@dataclass(slots=True)
class _InFlight:
    """One copy of the plan under way: reading it from a source, then writing it."""

    copy: Copy
    source_index: int
    sent_at_s: float
    copying: bool = False
    nbytes: int = 0

    @property
    def source(self) -> str:
        return self.copy.sources[self.source_index % len(self.copy.sources)]


class _Phase(enum.Enum):
    LIST = "list"
    COPY = "copy"
    CAS = "cas"
    DONE = "done"


class LedgerRereplicator:
    """Re-replicate one ledger: list → plan → copy one entry at a time → CAS."""

    def __init__(self, *, metadata: LedgerMetadata, revision: int, lost: set[str],
                 writable: Sequence[str], clock: Clock, retry_s: float = RETRY_S,
                 window: int = COPY_WINDOW) -> None:
        self.ledger_id = metadata.ledger_id
        self.metadata = metadata
        self.revision = revision
        self.lost = set(lost)
        self.plan: RepairPlan | None = None
        self.entries_copied = 0
        self.bytes_copied = 0
        self._writable = list(writable)
        self._clock = clock
        self._retry_s = retry_s
        self._phase = _Phase.LIST
        self._holdings: dict[str, dict[int, int]] = {}
        self._listing: dict[str, tuple[float, ListEntries]] = {}
        self._window = max(1, window)
        self._next_copy = 0                      # the next copy of the plan to start
        self._in_flight: dict[int, _InFlight] = {}  # by index in plan.copies
        self._effects: list[Effect] = []

    @property
    def done(self) -> bool:
        return self._phase is _Phase.DONE

    @property
    def phase(self) -> str:
        return self._phase.value

    def take_effects(self) -> list[Effect]:
        effects, self._effects = self._effects, []
        return effects

    def start(self) -> None:
        ranges = settled_ranges(self.metadata)
        for settled in ranges:
            for bookie in self.metadata.ensembles[settled.index].bookies:
                if bookie not in self.lost and bookie not in self._listing:
                    first = min(r.first for r in ranges)
                    last = max(r.last for r in ranges)
                    request = ListEntries(self.ledger_id, first, last)
                    self._listing[bookie] = (self._clock.now(), request)
                    self._effects.append(Send(bookie, request))
        self._maybe_plan()

    def tick(self) -> None:
        now = self._clock.now()
        if self._phase is _Phase.LIST:
            for bookie, (sent, request) in list(self._listing.items()):
                if bookie not in self._holdings and now - sent >= self._retry_s:
                    self._listing[bookie] = (now, request)
                    self._effects.append(Send(bookie, request))
        elif self._phase is _Phase.COPY:
            for flight in self._in_flight.values():
                if now - flight.sent_at_s >= self._retry_s:
                    # That source or target did not answer: read again, from another.
                    flight.source_index += 1
                    self._read(flight)

    def on_reply(self, bookie_id: str, reply: BookieReply) -> None:
        if self._phase is _Phase.LIST and isinstance(reply, EntriesHeld):
            self._holdings[bookie_id] = dict(reply.entries)
            self._maybe_plan()
        elif self._phase is _Phase.COPY and isinstance(reply, EntryFound):
            fragment = self.metadata.fragment_of(reply.entry_id)
            if reply.epoch < fragment.epoch:
                return  # a stale replica: the retry reads another source
            for flight in self._in_flight.values():
                copy = flight.copy
                if copy.entry_id == reply.entry_id and not flight.copying:
                    flight.copying, flight.nbytes = True, len(reply.payload)
                    flight.sent_at_s = self._clock.now()
                    self._effects.append(Send(copy.target, CopyEntry(
                        self.ledger_id, copy.entry_id, reply.epoch, reply.payload,
                        reply.length_after)))
        elif self._phase is _Phase.COPY and isinstance(reply, CopyOk):
            for index, flight in list(self._in_flight.items()):
                if flight.copying and flight.copy.entry_id == reply.entry_id \
                        and flight.copy.target == bookie_id:
                    del self._in_flight[index]
                    self.entries_copied += 1
                    self.bytes_copied += flight.nbytes
            self._copy_step()

    def on_metadata(self, result: MetadataResult) -> None:
        if self._phase is not _Phase.CAS or self.plan is None:
            return
        proposal = apply_replacements(self.metadata, self.plan.replacements)
        if isinstance(result, Current) and result.metadata == proposal:
            result = Written(result.revision)
        if isinstance(result, Written):
            self.metadata, self.revision = proposal, result.revision
            self._finish(RepairDone(self.ledger_id, self.entries_copied, self.bytes_copied))
        elif result.metadata is None:
            self._finish(Stopped(NoSuchLedger(self.ledger_id)))
        else:
            # The ledger changed under us (ensemble change, close, takeover): the
            # copies stay useful, the plan may not; the auditor plans again.
            self._finish(Stopped(MetadataConflict(
                f"ledger {self.ledger_id} changed during re-replication")))

    # --- steps ----------------------------------------------------------------

    def _finish(self, effect: Effect) -> None:
        self._phase = _Phase.DONE
        self._effects.append(effect)

    def _maybe_plan(self) -> None:
        if any(b not in self._holdings for b in self._listing):
            return
        self.plan = plan_rereplication(self.metadata, self._holdings, self.lost,
                                       self._writable)
        self._phase = _Phase.COPY
        self._copy_step()

    def _copy_step(self) -> None:
        assert self.plan is not None
        copies = self.plan.copies
        while len(self._in_flight) < self._window and self._next_copy < len(copies):
            flight = _InFlight(copies[self._next_copy], 0, self._clock.now())
            self._in_flight[self._next_copy] = flight
            self._next_copy += 1
            self._read(flight)
        if not self._in_flight and self._next_copy >= len(copies):
            if self.plan.replacements:
                self._phase = _Phase.CAS
                proposal = apply_replacements(self.metadata, self.plan.replacements)
                self._effects.append(WriteMetadata(self.revision, proposal))
            else:
                self._finish(RepairDone(self.ledger_id, self.entries_copied,
                                        self.bytes_copied))

    def _read(self, flight: _InFlight) -> None:
        flight.copying, flight.nbytes = False, 0
        flight.sent_at_s = self._clock.now()
        self._effects.append(Send(flight.source, ReadEntry(self.ledger_id,
                                                           flight.copy.entry_id)))
