"""Re-replication of one ledger for the auditor, sans-I/O (docs/cluster.md §9).

``plan_rereplication`` is pure: from the metadata, what each live bookie holds of
the settled fragments (``ListEntries``), the lost bookies and the writable ones,
it decides each copy (entry, source, target) and each replacement of a lost
bookie.  ``LedgerRereplicator`` carries a plan out: list, then the copies in ranges (a
``ReadEntries`` of up to ``batch_entries_max`` entries / ``batch_bytes_max`` bytes
from a source, ``CopyEntries`` of what it answered to the target, one journal
record there; up to ``window`` ranges in flight), then one CAS replacing the lost
bookies.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from common.errors import MetadataConflict, NoSuchLedger
from common.states import Moves, transition

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
    CopiesOk,
    CopyEntries,
    CopyEntry,
    EntriesHeld,
    EntriesRead,
    EntryFound,
    ListEntries,
    ReadEntries,
)
from ._metadata import Fragment, LedgerMetadata, LedgerState, write_set

RETRY_S = 0.5
# Ranges in flight at once (each a range read from a source, then range copies to
# the target): a few keep the source's reads and the target's journal busy.
COPY_WINDOW = 4
# A range holds at most this many entries and asks for at most this many bytes of
# payload (a read answers at least one entry, so a copy may hold one entry more
# than this, up to the largest entry); both within the engine's batch limits.
COPY_BATCH_ENTRIES_MAX = 1024
COPY_BATCH_BYTES_MAX = 4 * 1024 * 1024


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
class _Batch:
    """Copies of the plan to one target, read from one source at a time as a range
    (``ReadEntries``) and written as ranges (``CopyEntries``)."""

    target: str
    sources: tuple[str, ...]          # each holds every entry of the batch validly
    todo: list[int]                   # ids not yet read at a valid epoch, ascending
    source_index: int = 0
    read: frozenset[int] | None = None   # the ids of the read in flight
    read_at_s: float = 0.0
    next_read_at_s: float = 0.0
    # The copies in flight: their ids → (sent at, payload bytes).
    copies: dict[tuple[int, ...], tuple[float, int]] = field(default_factory=dict)

    @property
    def source(self) -> str:
        return self.sources[self.source_index % len(self.sources)]

    @property
    def done(self) -> bool:
        return not self.todo and self.read is None and not self.copies


def _batches(copies: Sequence[Copy], entries_max: int, local: str | None,
             ) -> list[_Batch]:
    """The plan's copies grouped by target and source, in plan order, at most
    ``entries_max`` each.  The source is ``local`` (the re-replicating node's own
    bookie: its bytes then cross one connection, not two) when it holds the entry,
    else the first in id order of those that do, not the first of its write set:
    write sets rotate with the entry id (§4), and ranges would break at every
    entry.  A batch's other sources are those holding all of its entries (read
    from when one fails)."""
    open_: dict[tuple[str, str], _Batch] = {}
    batches: list[_Batch] = []
    for copy in copies:
        sources = tuple(sorted(copy.sources, key=lambda b: (b != local, b)))
        key = (copy.target, sources[0])
        batch = open_.get(key)
        if batch is None or len(batch.todo) >= entries_max:
            batch = _Batch(copy.target, sources, [])
            open_[key] = batch
            batches.append(batch)
        batch.todo.append(copy.entry_id)
        if batch.sources != sources:
            batch.sources = tuple(s for s in batch.sources if s in sources)
    return batches


class _Phase(enum.Enum):
    LIST = "list"
    COPY = "copy"
    CAS = "cas"
    DONE = "done"


# A plan with nothing to replace ends after the copies, without a CAS.
_MOVES: Moves[_Phase] = {
    _Phase.LIST: {_Phase.COPY},
    _Phase.COPY: {_Phase.CAS, _Phase.DONE},
    _Phase.CAS: {_Phase.DONE},
}


class LedgerRereplicator:
    """Re-replicate one ledger: list → plan → copy ranges (read a range from a
    source in one call, write it to the target in one call) → CAS."""

    def __init__(self, *, metadata: LedgerMetadata, revision: int, lost: set[str],
                 writable: Sequence[str], clock: Clock, retry_s: float = RETRY_S,
                 window: int = COPY_WINDOW, batch_entries_max: int = COPY_BATCH_ENTRIES_MAX,
                 batch_bytes_max: int = COPY_BATCH_BYTES_MAX, local: str | None = None,
                 ) -> None:
        self.ledger_id = metadata.ledger_id
        self.metadata = metadata
        self.revision = revision
        self.lost = set(lost)
        self.plan: RepairPlan | None = None
        self.planned_at_s: float | None = None   # when the listings were all in
        self.copied_at_s: float | None = None    # when the last copy was acknowledged
        self.entries_copied = 0
        self.bytes_copied = 0
        self._writable = list(writable)
        self._clock = clock
        self._retry_s = retry_s
        self._phase = _Phase.LIST
        self._holdings: dict[str, dict[int, int]] = {}
        self._listing: dict[str, tuple[float, ListEntries]] = {}
        self._window = max(1, window)
        self._batch_entries_max = max(1, batch_entries_max)
        self._batch_bytes_max = max(1, batch_bytes_max)
        self._local = local
        self._batches: list[_Batch] = []         # the plan's copies, by range
        self._next_batch = 0                     # the next one to start
        self._in_flight: list[_Batch] = []
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
            for batch in self._in_flight:
                for ids, (sent, _nbytes) in list(batch.copies.items()):
                    if now - sent >= self._retry_s:
                        # The target did not answer: read those again.
                        del batch.copies[ids]
                        batch.todo = sorted({*batch.todo, *ids})
                if batch.read is not None and now - batch.read_at_s >= self._retry_s:
                    # That source did not answer: read from the next one.
                    batch.source_index += 1
                    self._read(batch)
                elif batch.read is None and batch.todo and now >= batch.next_read_at_s:
                    self._read(batch)

    def on_reply(self, bookie_id: str, reply: BookieReply) -> None:
        if self._phase is _Phase.LIST and isinstance(reply, EntriesHeld):
            self._holdings[bookie_id] = dict(reply.entries)
            self._maybe_plan()
        elif self._phase is _Phase.COPY and isinstance(reply, EntriesRead):
            self._on_read(bookie_id, reply)
        elif self._phase is _Phase.COPY and isinstance(reply, CopiesOk):
            key = tuple(reply.entry_ids)
            for batch in self._in_flight:
                if batch.target == bookie_id and key in batch.copies:
                    _sent, nbytes = batch.copies.pop(key)
                    self.entries_copied += len(key)
                    self.bytes_copied += nbytes
                    break
            self._copy_step()

    def _on_read(self, bookie_id: str, reply: EntriesRead) -> None:
        answered = {e.entry_id for e in reply.found} | set(reply.absent)
        batch = next((b for b in self._in_flight if b.read is not None
                      and b.source == bookie_id and answered and answered <= b.read), None)
        if batch is None:
            return  # a late or duplicate answer: its read was retried
        now = self._clock.now()
        batch.read = None
        todo = set(batch.todo)
        wanted = [e for e in reply.found if e.entry_id in todo]
        valid = [e for e in wanted if e.epoch >= self.metadata.fragment_of(e.entry_id).epoch]
        missing = len(valid) < len(wanted) or not todo.isdisjoint(reply.absent)
        batch.todo = sorted(todo - {e.entry_id for e in valid})
        if missing:
            # Absent or stale there (the listing said otherwise): the next source,
            # after a pause.
            batch.source_index += 1
            batch.next_read_at_s = now + self._retry_s
        else:
            batch.next_read_at_s = now  # the rest was cut by bytes_max: go on
        chunk: list[EntryFound] = []
        size = 0
        for entry in valid:
            if chunk and (size + len(entry.payload) > self._batch_bytes_max
                          or len(chunk) >= self._batch_entries_max):
                self._copy(batch, chunk, size, now)
                chunk, size = [], 0
            chunk.append(entry)
            size += len(entry.payload)
        if chunk:
            self._copy(batch, chunk, size, now)
        if batch.todo and not missing:
            self._read(batch)

    def _copy(self, batch: _Batch, entries: list[EntryFound], nbytes: int,
              now: float) -> None:
        ids = tuple(e.entry_id for e in entries)
        batch.copies[ids] = (now, nbytes)
        self._effects.append(Send(batch.target, CopyEntries(self.ledger_id, tuple(
            CopyEntry(self.ledger_id, e.entry_id, e.epoch, e.payload, e.length_after)
            for e in entries))))

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
        self._phase = transition(self._phase, _Phase.DONE, _MOVES)
        self._effects.append(effect)

    def _maybe_plan(self) -> None:
        if any(b not in self._holdings for b in self._listing):
            return
        self.planned_at_s = self._clock.now()
        self.plan = plan_rereplication(self.metadata, self._holdings, self.lost,
                                       self._writable)
        self._batches = _batches(self.plan.copies, self._batch_entries_max, self._local)
        self._phase = transition(self._phase, _Phase.COPY, _MOVES)
        self._copy_step()

    def _copy_step(self) -> None:
        assert self.plan is not None
        self._in_flight = [b for b in self._in_flight if not b.done]
        while len(self._in_flight) < self._window and self._next_batch < len(self._batches):
            batch = self._batches[self._next_batch]
            self._next_batch += 1
            self._in_flight.append(batch)
            self._read(batch)
        if not self._in_flight and self._next_batch >= len(self._batches):
            self.copied_at_s = self._clock.now()
            if self.plan.replacements:
                self._phase = transition(self._phase, _Phase.CAS, _MOVES)
                proposal = apply_replacements(self.metadata, self.plan.replacements)
                self._effects.append(WriteMetadata(self.revision, proposal))
            else:
                self._finish(RepairDone(self.ledger_id, self.entries_copied,
                                        self.bytes_copied))

    def _read(self, batch: _Batch) -> None:
        ids = batch.todo[:self._batch_entries_max]
        batch.read = frozenset(ids)
        batch.read_at_s = self._clock.now()
        self._effects.append(Send(batch.source, ReadEntries(self.ledger_id, tuple(ids),
                                                            self._batch_bytes_max)))
