"""The writer of one ledger as a sans-I/O state machine (docs/cluster.md §6).

It assigns entry ids, sends each entry to its write set in the last fragment,
counts acks only from bookies of the committed metadata, advances the LAC when an
entry and all before it reached Qa, answers clients in id order, replaces failed
bookies with a CAS'd ensemble change and resends, and closes.  The same machine
writes back recovered entries for ``LedgerRecovery`` (``recovering=True``) and
then finishes the recovery, resuming or closing the ledger.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

from common.errors import (
    EntryConflict,
    InvariantViolation,
    LedgerClosed,
    LedgerdError,
    MetadataConflict,
    NoSuchLedger,
    WriterSuperseded,
    invariant,
)
from common.states import Moves, transition

from ._effects import (
    AddDone,
    AddFailed,
    Clock,
    Current,
    Effect,
    LedgerClosedDone,
    Membership,
    MetadataResult,
    Resumed,
    Send,
    Stopped,
    WriteMetadata,
    Written,
)
from ._messages import AddEntries, AddsOk, BookieReply, Fenced, NewEntry, Unavailable, WriteLac
from ._metadata import Fragment, LedgerMetadata, LedgerState, WriterRef, in_write_set, write_set
from ._packed import pack_metadata, packed_ledger_id, packed_revision, unpack_recent

ADD_TIMEOUT_S = 2.0
# With no bookie to replace one whose call failed, what is pending goes to it again
# no more often than this.
RESEND_PACE_S = 0.2
# Shared by every writer that has no failed bookie (most): ``frozenset()`` makes a
# new empty set each time.
_NONE_FAILED: frozenset[str] = frozenset()


class WriterRules:
    """The one quorum rule a writer applies; a test-only subclass breaks it to prove
    the simulation notices (injected through the constructor, never patched)."""

    def reached_ack_quorum(self, ack_count: int, ack_quorum: int) -> bool:
        return ack_count >= ack_quorum


_RULES = WriterRules()


class AddOutcome(enum.Enum):
    APPENDED = "appended"        # a new entry, answered by an AddDone effect
    JOINED = "joined"            # a retry of a pending entry with the same bytes
    NEEDS_COMPARE = "compare"    # entry_id ≤ LAC: read it and compare (§6.5)


class _Phase(enum.Enum):
    WRITING = "writing"
    FINISHING = "finishing"      # close / end of recovery: waiting for pending adds
    DONE = "done"                # closed, or handed over (superseded, deleted)


# FINISHING ends in DONE (closed) or back in WRITING (a recovery that resumes).
_MOVES: Moves[_Phase] = {
    _Phase.WRITING: {_Phase.FINISHING, _Phase.DONE},
    _Phase.FINISHING: {_Phase.WRITING, _Phase.DONE},
}


class _Cas(enum.Enum):
    CHANGE = "change"
    FINISH = "finish"


@dataclass(slots=True)
class _Pending:
    """An entry not yet at Qa.  Every send goes to all the bookies of its write set
    that have not acknowledged it, at once: one time says when they were sent."""

    entry: NewEntry
    tokens: list[object]
    acked: set[str] = field(default_factory=set)
    sent_at_s: float | None = None  # None: not sent yet (in ``_unsent``)


@dataclass(frozen=True, slots=True)
class IdleWriter:
    """The whole state of a writer with nothing in flight (``LedgerWriter.retire``):
    a node keeps this for each open ledger it writes that is idle, and wakes a
    writer from it (``LedgerWriter.wake``) when the ledger is next written.  It
    answers what a reader asks of a writer.  Its metadata and revision are kept
    packed (cluster/_packed.py), the very bytes the node's metadata cache holds:
    about a tenth of a writer's size, and nothing of its own beside the cache."""

    packed: bytes  # the metadata and its revision (pack_metadata)
    lac: int
    length: int

    @property
    def metadata(self) -> LedgerMetadata:
        return unpack_recent(self.packed)[0]

    @property
    def revision(self) -> int:
        return packed_revision(self.packed)

    @property
    def ledger_id(self) -> int:
        return packed_ledger_id(self.packed)

    @property
    def lac_length(self) -> int:
        return self.length  # nothing is pending


@dataclass(frozen=True, slots=True)
class _Finish:
    token: object
    resume: bool                 # recovery: resume as writer; else close


class LedgerWriter:
    """One ledger's writer on one node; ``metadata.writer`` must name this node.

    A node holds one per open ledger it writes, most of them idle: slots, and an
    idle writer's containers are empty shared ones (``_failed``) or emptied
    (``_pending``), about 400 B less per writer."""

    __slots__ = (
        "_cas",
        "_clock",
        "_effects",
        "_failed",
        "_finish",
        "_lac_carried",
        "_membership",
        "_pending",
        "_phase",
        "_proposal",
        "_rules",
        "_timeout_s",
        "_unsent",
        "_wall",
        "epoch",
        "lac",
        "ledger_id",
        "length",
        "metadata",
        "next_entry_id",
        "node_id",
        "recovering",
        "revision",
    )

    def __init__(self, *, node_id: str, metadata: LedgerMetadata, revision: int,
                 clock: Clock, membership: Membership, next_entry_id: int,
                 lac: int, length: int, recovering: bool = False,
                 rules: WriterRules | None = None, add_timeout_s: float = ADD_TIMEOUT_S,
                 wall_clock: Clock | None = None) -> None:
        invariant(metadata.writer.node == node_id, f"ledger {metadata.ledger_id}: writer is "
                  f"{metadata.writer.node}, not {node_id}")
        invariant(next_entry_id == lac + 1, "a writer starts with nothing pending")
        self.node_id = node_id
        self.ledger_id = metadata.ledger_id
        self.metadata = metadata
        self.revision = revision
        self.epoch = metadata.epoch
        self.next_entry_id = next_entry_id
        self.lac = lac
        self.length = length
        self.recovering = recovering
        self._clock = clock
        # closed_at is wall time; ``clock`` may be monotonic (the node's is).
        self._wall = wall_clock or clock
        self._membership = membership
        self._rules = rules or _RULES
        self._timeout_s = add_timeout_s
        self._phase = _Phase.WRITING
        self._pending: dict[int, _Pending] = {}
        # Appended since the last ``take_effects``: sent then, one call per bookie.
        self._unsent: list[_Pending] = []
        self._cas: _Cas | None = None
        self._proposal: LedgerMetadata | None = None
        self._failed = _NONE_FAILED
        self._finish: _Finish | None = None
        self._effects: list[Effect] = []
        self._lac_carried = lac  # the highest LAC the bookies were sent

    @classmethod
    def wake(cls, idle: IdleWriter, *, node_id: str, clock: Clock, membership: Membership,
             add_timeout_s: float = ADD_TIMEOUT_S, wall_clock: Clock | None = None,
             ) -> LedgerWriter:
        """The writer ``idle`` was retired from, as it was (its next entry follows
        its LAC, the bookies were sent that LAC, nothing failed)."""
        return cls(node_id=node_id, metadata=idle.metadata, revision=idle.revision,
                   clock=clock, membership=membership, next_entry_id=idle.lac + 1,
                   lac=idle.lac, length=idle.length, add_timeout_s=add_timeout_s,
                   wall_clock=wall_clock)

    def retire(self, pack: Callable[[LedgerMetadata, int], bytes] = pack_metadata,
               ) -> IdleWriter | None:
        """When nothing is in flight (no add, metadata write, close, failed bookie or
        LAC the bookies were not sent, no effect untaken), this writer's state as an
        :class:`IdleWriter`, and this writer takes nothing more (DONE, with no
        effect: nothing waits on it).  None, and nothing changes, otherwise.
        ``pack`` packs the metadata (a node's shares its cache's bytes)."""
        if (self._phase is not _Phase.WRITING or self.recovering or self._pending
                or self._cas is not None or self._finish is not None or self._failed
                or self._effects or self.lac != self._lac_carried):
            return None
        invariant(self.next_entry_id == self.lac + 1, "an idle writer has nothing pending")
        self._phase = transition(self._phase, _Phase.DONE, _MOVES)
        return IdleWriter(pack(self.metadata, self.revision), self.lac, self.length)

    def adopt(self, metadata: LedgerMetadata, revision: int, *, base_revision: int) -> bool:
        """Take ``metadata`` at ``revision``, written over this writer's own
        ``base_revision`` by someone else changing only what the writer does not
        own (a tier position): its next metadata write then starts from it rather
        than failing once on a stale revision.  False, and nothing changes, if
        this writer moved on meanwhile or has a write of its own in flight (that
        write fails and is redone on the fresh value, as after the auditor's)."""
        if (self._phase is not _Phase.WRITING or self.recovering or self._cas is not None
                or self.revision != base_revision or revision <= base_revision
                or replace(metadata, tier=self.metadata.tier) != self.metadata):
            return False
        self.metadata, self.revision = metadata, revision
        return True

    # --- driver interface ---------------------------------------------------

    def take_effects(self) -> list[Effect]:
        if self._unsent:
            unsent, self._unsent = self._unsent, []
            self._send(unsent)
        effects, self._effects = self._effects, []
        return effects

    @property
    def done(self) -> bool:
        return self._phase is _Phase.DONE

    @property
    def wants_tick(self) -> bool:
        """Whether ``tick`` has anything to do: adds waiting for bookies, a metadata
        write, a close, a LAC the bookies were not sent.  An idle writer needs no
        ticks, so a node holding many open ledgers ticks only the busy ones."""
        return self._phase is not _Phase.DONE and (
            bool(self._pending) or self._cas is not None or self._finish is not None
            or self.lac > self._lac_carried)

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    @property
    def lac_length(self) -> int:
        """The ledger's length in bytes up to and including the LAC (``length`` also
        counts the adds still pending)."""
        return self.length - sum(len(p.entry.payload) for p in self._pending.values())

    def add(self, payload: bytes, token: object, entry_id: int | None = None) -> AddOutcome:
        """Append ``payload``; with ``entry_id`` the add is idempotent (§6.5)."""
        self._check_accepting()
        invariant(not self.recovering, "a recovering writer takes no client adds")
        if entry_id is not None and entry_id != self.next_entry_id:
            if entry_id > self.next_entry_id or entry_id < 0:
                raise EntryConflict(f"ledger {self.ledger_id}: entry {entry_id} is not the "
                                    f"next one ({self.next_entry_id})")
            pending = self._pending.get(entry_id)
            if pending is None:
                return AddOutcome.NEEDS_COMPARE
            if pending.entry.payload != payload:
                raise EntryConflict(f"ledger {self.ledger_id}: entry {entry_id} holds "
                                    "other bytes")
            pending.tokens.append(token)
            return AddOutcome.JOINED
        self._append(payload, self.length + len(payload), [token])
        return AddOutcome.APPENDED

    def add_many(self, payloads: Sequence[bytes], token: object) -> int:
        """Append ``payloads`` as the next entries; the one ``token`` is answered
        with the last entry's ``AddDone`` (the LAC reaches it only once it has
        reached every entry before it), or fails with the first failure.  The id
        of the first entry."""
        self._check_accepting()
        invariant(not self.recovering, "a recovering writer takes no client adds")
        invariant(len(payloads) > 0, "an empty add")
        first = self.next_entry_id
        last = len(payloads) - 1
        for i, payload in enumerate(payloads):
            self._append(payload, self.length + len(payload), [token] if i == last else [])
        return first

    def write_back(self, entry_id: int, payload: bytes, length_after: int) -> None:
        """Recovery: write a recovered entry at this writer's epoch (§7 step 4)."""
        invariant(self.recovering and entry_id == self.next_entry_id,
                  f"write-back of {entry_id} out of order (next {self.next_entry_id})")
        self._check_accepting()
        self._append(payload, length_after, [])

    def close(self, token: object) -> None:
        """Refuse new adds, wait for the pending ones, CAS the ledger CLOSED (§6.7)."""
        self._check_accepting()
        self._start_finish(_Finish(token, resume=False))

    def finish_recovery(self, *, resume: bool, token: object = None) -> None:
        invariant(self.recovering, "finish_recovery on a writer that is not recovering")
        self._start_finish(_Finish(token, resume=resume))

    def stop(self, error: LedgerdError) -> None:
        """Drop the ledger: every pending add fails with ``error`` (lease expired,
        superseded, deleted).  Its adds may or may not be in the ledger."""
        if self._phase is _Phase.DONE:
            return
        self._phase = transition(self._phase, _Phase.DONE, _MOVES)
        for pending in self._pending.values():
            self._effects.extend(AddFailed(t, error) for t in pending.tokens)
        self._pending.clear()
        self._unsent = []
        if self._finish is not None and self._finish.token is not None:
            self._effects.append(AddFailed(self._finish.token, error))
        self._effects.append(Stopped(error))

    def on_reply(self, bookie_id: str, reply: BookieReply) -> None:
        if self._phase is _Phase.DONE:
            return
        if isinstance(reply, AddsOk):
            self._on_adds_ok(bookie_id, reply)
        elif isinstance(reply, Fenced):
            if reply.fenced_epoch > self.epoch:
                self.stop(WriterSuperseded(
                    f"ledger {self.ledger_id}: taken over at epoch {reply.fenced_epoch}"))
        elif isinstance(reply, Unavailable):
            self._bookie_failed(bookie_id)

    def tick(self) -> None:
        """Notice bookies that did not answer within the add timeout."""
        if self._phase is _Phase.DONE or self._cas is not None:
            return
        self._write_lac_when_idle()
        now = self._clock.now()
        fragment, qw = self.metadata.last_fragment, self.metadata.write_quorum
        late = {b for p in self._pending.values()
                if p.sent_at_s is not None and now - p.sent_at_s >= self._timeout_s
                for b in write_set(fragment, p.entry.entry_id, qw) if b not in p.acked}
        if late:
            self._failed |= late
            self._change_ensemble()

    def _write_lac_when_idle(self) -> None:
        """Adds carry the LAC as of when they were sent, so once the writer idles the
        bookies lag its last ack; tell them (§8.1), so that a reader that cannot
        reach this writer finds the end on the bookies."""
        if self.recovering or self._pending or self.lac <= self._lac_carried:
            return
        self._lac_carried = self.lac
        for bookie in self.metadata.last_fragment.bookies:
            self._effects.append(Send(bookie, WriteLac(self.ledger_id, self.lac)))

    def on_metadata(self, result: MetadataResult) -> None:
        if self._phase is _Phase.DONE:
            return
        invariant(self._cas is not None and self._proposal is not None,
                  f"ledger {self.ledger_id}: a metadata result with no write in flight")
        proposal = self._proposal
        assert proposal is not None
        if isinstance(result, Current) and result.metadata == proposal:
            result = Written(result.revision)  # our write landed; its answer was lost
        if isinstance(result, Written):
            self._written(proposal, result.revision)
            return
        current = result.metadata
        if current is None:
            self.stop(NoSuchLedger(self.ledger_id))
            return
        if current.writer != self.metadata.writer or current.state is not self._own_state():
            self.stop(WriterSuperseded(
                f"ledger {self.ledger_id}: writer is now {current.writer.node} at epoch "
                f"{current.epoch}, state {current.state}"))
            return
        if self.recovering:
            # Our local ensemble changes are not in ``current``; the next takeover
            # starts over at a higher epoch.
            self.stop(MetadataConflict(f"ledger {self.ledger_id} changed during recovery"))
            return
        # Same writer and state: someone else (the auditor) changed an older
        # fragment.  Redo our change on the fresh value.
        self.metadata, self.revision = current, result.revision
        cas, self._cas, self._proposal = self._cas, None, None
        if cas is _Cas.CHANGE:
            self._change_ensemble()
            if self._cas is None:
                # Nothing left to replace: the acks dropped while the change was in
                # flight, and the adds made meanwhile (never sent), go out now.
                self._resend_all()
        else:
            self._maybe_finish()

    # --- adds and acks ------------------------------------------------------

    def _check_accepting(self) -> None:
        if self._phase is _Phase.DONE:
            raise WriterSuperseded(f"ledger {self.ledger_id}: this node no longer writes it")
        if self._phase is _Phase.FINISHING:
            raise LedgerClosed(f"ledger {self.ledger_id} is closing")

    def _own_state(self) -> LedgerState:
        return LedgerState.IN_RECOVERY if self.recovering else LedgerState.OPEN

    def _append(self, payload: bytes, length_after: int, tokens: list[object]) -> None:
        pending = _Pending(NewEntry(self.next_entry_id, payload, length_after), tokens)
        self._pending[self.next_entry_id] = pending
        self.next_entry_id += 1
        self.length = length_after
        if self._cas is not _Cas.CHANGE:
            self._unsent.append(pending)

    def _send(self, pendings: Iterable[_Pending]) -> None:
        """Each bookie the entries of its write sets it has not acknowledged, as one
        ``AddEntries``.  Pending entries all lie in the last fragment: an ensemble
        change starts its fragment at LAC + 1."""
        now = self._clock.now()
        fragment, qw = self.metadata.last_fragment, self.metadata.write_quorum
        everyone = fragment.bookies if qw == len(fragment.bookies) else None
        runs: dict[str, list[NewEntry]] = {}
        for pending in pendings:
            entry = pending.entry
            invariant(entry.entry_id >= fragment.first_entry_id,
                      f"ledger {self.ledger_id}: entry {entry.entry_id} pending before the "
                      "last fragment")
            pending.sent_at_s = now
            # With Qw = E (the usual shape) every entry goes to the whole ensemble.
            for bookie in everyone or write_set(fragment, entry.entry_id, qw):
                if bookie not in pending.acked:
                    runs.setdefault(bookie, []).append(entry)
        if not runs:
            return
        if not self.recovering:
            self._lac_carried = max(self._lac_carried, self.lac)
        # A recovering writer's LAC counts acks in write sets the committed metadata
        # may not have yet (its ensemble changes land with its finishing CAS, and
        # another takeover may supersede it first): its adds carry the LAC it
        # started from, never one the metadata does not back (found by the seeded
        # simulation: a bookie held LAC 19 while entry 18 had one valid replica).
        lac = self._lac_carried if self.recovering else self.lac
        for bookie, entries in runs.items():
            self._effects.append(Send(bookie, AddEntries(self.ledger_id, self.epoch, lac,
                                                         tuple(entries))))

    def _on_adds_ok(self, bookie_id: str, reply: AddsOk) -> None:
        if reply.epoch != self.epoch or self._cas is _Cas.CHANGE:
            # While an ensemble change is in flight no ack counts: the entry is
            # resent to the new write set once the change is committed (#4651).
            return
        ensemble, qw = self.metadata.last_fragment.bookies, self.metadata.write_quorum
        if bookie_id not in ensemble:
            return
        position, size = ensemble.index(bookie_id), len(ensemble)
        pending_of = self._pending
        for entry_id in reply.entry_ids:
            pending = pending_of.get(entry_id)
            if pending is not None and in_write_set(position, entry_id, size, qw):
                pending.acked.add(bookie_id)
        self._advance_lac()

    def _advance_lac(self) -> None:
        quorum = self.metadata.ack_quorum
        reached = self._rules.reached_ack_quorum
        pending_of = self._pending
        while True:
            pending = pending_of.get(self.lac + 1)
            if pending is None or not reached(len(pending.acked), quorum):
                break
            del pending_of[self.lac + 1]
            self.lac += 1
            if pending.tokens:
                self._effects.extend(AddDone(t, self.lac, self.lac) for t in pending.tokens)
        if not pending_of:
            self._pending = {}  # a dict keeps its table when emptied: drop it
        self._maybe_finish()

    # --- ensemble change ----------------------------------------------------

    def _bookie_failed(self, bookie_id: str) -> None:
        self._failed |= {bookie_id}
        if self._cas is None:
            self._change_ensemble(on_failed_call=True)

    def _change_ensemble(self, *, on_failed_call: bool = False) -> None:
        """Replace the failed bookies of the last fragment from LAC + 1 (§6.2)."""
        last = self.metadata.last_fragment
        failed = [b for b in last.bookies if b in self._failed]
        if not failed or not self._pending:
            self._failed = _NONE_FAILED
            return
        candidates = [b for b in self._membership.writable_bookies()
                      if b not in last.bookies and b not in self._failed]
        if len(candidates) < len(failed):
            # No replacement: keep the ensemble and resend; the client sees latency.
            self._failed = _NONE_FAILED
            pending: Iterable[_Pending] = self._pending.values()
            if on_failed_call:
                # Only what was not sent within the pace: every call in flight to a
                # dead bookie fails, and resending all that is pending on each
                # failure kept as many calls going as were ever made (the seeded
                # simulation, once its calls to a down node failed as HTTP's do,
                # found a writer making 40,000 calls in four simulated seconds).
                now = self._clock.now()
                pending = [p for p in pending
                           if p.sent_at_s is None or now - p.sent_at_s >= RESEND_PACE_S]
            self._unsent = []  # every unsent entry is pending with no send time
            self._send(pending)
            return
        replacements = dict(zip(failed, candidates, strict=False))
        bookies = tuple(replacements.get(b, b) for b in last.bookies)
        # The new fragment inherits the epoch of the one it splits: its entries up to
        # the change may be recovered ones written at that epoch (§6.4).
        fragment = Fragment(self.lac + 1, bookies, last.epoch)
        if self.recovering:
            # Recovered entries may have been acknowledged by the old writer, so the
            # metadata must not point at bookies that lack them: the change stays
            # local and lands with the finishing CAS, once every entry reached Qa in
            # its new write set.
            self._failed = _NONE_FAILED
            self.metadata = self.metadata.with_fragment(fragment)
            self._resend_all()
            return
        self._propose(_Cas.CHANGE, self.metadata.with_fragment(fragment))

    def _resend_all(self) -> None:
        for pending in self._pending.values():
            pending.acked.clear()
        self._unsent = []
        self._send(self._pending.values())
        self._maybe_finish()

    def _propose(self, cas: _Cas, metadata: LedgerMetadata) -> None:
        invariant(self._cas is None, f"ledger {self.ledger_id}: two metadata writes at once")
        self._cas, self._proposal = cas, metadata
        self._effects.append(WriteMetadata(self.revision, metadata))

    def _written(self, proposal: LedgerMetadata, revision: int) -> None:
        cas = self._cas
        self.metadata, self.revision = proposal, revision
        self._cas, self._proposal = None, None
        if cas is _Cas.CHANGE:
            # The failed bookies stay known until the change that replaces them is
            # committed: a CAS that met another change (the auditor's) is redone
            # from them on the fresh value.  Those still in the ensemble failed
            # while it was in flight.
            still = self._failed & set(proposal.last_fragment.bookies)
            self._failed = frozenset(still) if still else _NONE_FAILED
            self._resend_all()
            return
        finish, self._finish = self._finish, None
        assert finish is not None
        if proposal.state is LedgerState.CLOSED:
            self._phase = transition(self._phase, _Phase.DONE, _MOVES)
            self._effects.append(LedgerClosedDone(finish.token, proposal))
        else:
            self.recovering = False
            self._phase = transition(self._phase, _Phase.WRITING, _MOVES)
            self._effects.append(Resumed(proposal))

    # --- close / end of recovery ----------------------------------------------

    def _start_finish(self, finish: _Finish) -> None:
        self._phase = transition(self._phase, _Phase.FINISHING, _MOVES)
        self._finish = finish
        self._maybe_finish()

    def _maybe_finish(self) -> None:
        if self._phase is not _Phase.FINISHING or self._pending or self._cas is not None:
            return
        finish = self._finish
        assert finish is not None
        invariant(self.lac == self.next_entry_id - 1, "finishing with entries in flight")
        if finish.resume:
            # A new fragment at the recovered end, created at this epoch, makes the
            # old writer's leftovers past the end stale (§6.4).
            last = self.metadata.last_fragment
            fragment = Fragment(self.lac + 1, last.bookies, self.epoch)
            proposal = replace(self.metadata.with_fragment(fragment), state=LedgerState.OPEN)
        else:
            proposal = replace(self.metadata, state=LedgerState.CLOSED,
                               last_entry_id=self.lac, length=self.length,
                               closed_at=self._wall.now())
        self._propose(_Cas.FINISH, proposal)


def claim(metadata: LedgerMetadata, node_id: str) -> LedgerMetadata:
    """The metadata a takeover CASes: writer ``node_id`` at epoch + 1, IN_RECOVERY."""
    if metadata.state is LedgerState.CLOSED:
        raise InvariantViolation(f"ledger {metadata.ledger_id} is closed; nothing to claim")
    return replace(metadata, state=LedgerState.IN_RECOVERY,
                   writer=WriterRef(node_id, metadata.epoch + 1))
