"""Takeover and recovery of one ledger as a sans-I/O state machine (docs/cluster.md §7).

claim (CAS epoch + 1, IN_RECOVERY) → fence the last fragment until the answers
cover it → read forward from the LAC with fencing recovery reads until an entry
is absent on Qw - Qa + 1 bookies of its write set → write the recovered entries
back at the new epoch (a ``LedgerWriter`` with ``recovering=True``) → resume as
writer (new fragment at end + 1) or close at the end.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from common.errors import MetadataConflict, NoSuchLedger, WriterSuperseded
from common.states import Moves, transition

from ._effects import (
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
from ._messages import (
    BookieReply,
    BookieRequest,
    EntryFound,
    Fence,
    Fenced,
    FenceOk,
    NoEntry,
    RecoveryRead,
)
from ._metadata import LedgerMetadata, LedgerState, covers, write_set
from ._writer import ADD_TIMEOUT_S, LedgerWriter, WriterRules, claim

RETRY_S = 0.5
CLAIM_ATTEMPTS_MAX = 3


class RecoveryRules:
    """How recovery reads are sent.  A test-only subclass sends plain, non-fencing
    reads: BookKeeper's defect before 4.14 (#2614), which the simulation finds."""

    def recovery_read(self, ledger_id: int, entry_id: int, epoch: int) -> BookieRequest:
        return RecoveryRead(ledger_id, entry_id, epoch)


class _Phase(enum.Enum):
    CLAIM = "claim"
    FENCE = "fence"
    READ = "read"
    WRITE = "write"
    DONE = "done"


# A bookie's answer that another takeover fenced the ledger ends recovery from
# any phase before write-back; a second such answer, late, ends it again (DONE to
# DONE: one more Stopped effect, as before these moves were checked).
_MOVES: Moves[_Phase] = {
    _Phase.CLAIM: {_Phase.FENCE, _Phase.DONE},
    _Phase.FENCE: {_Phase.READ, _Phase.DONE},
    _Phase.READ: {_Phase.WRITE, _Phase.DONE},
    _Phase.WRITE: {_Phase.DONE},
    _Phase.DONE: {_Phase.DONE},
}


@dataclass(slots=True)
class _Round:
    """Answers gathered for one fence or one entry read, with resend times."""

    sent_at_s: dict[str, float] = field(default_factory=dict)
    answered: set[str] = field(default_factory=set)


class LedgerRecovery:
    """Take ``metadata``'s ledger over on ``node_id``; ``close`` for ``POST …/fence``."""

    def __init__(self, *, node_id: str, metadata: LedgerMetadata, revision: int,
                 clock: Clock, membership: Membership, close: bool, token: object = None,
                 rules: RecoveryRules | None = None, writer_rules: WriterRules | None = None,
                 retry_s: float = RETRY_S, add_timeout_s: float = ADD_TIMEOUT_S,
                 wall_clock: Clock | None = None) -> None:
        self.node_id = node_id
        self.ledger_id = metadata.ledger_id
        self.metadata = metadata
        self.revision = revision
        self.close = close
        self.token = token
        self.writer: LedgerWriter | None = None
        self._clock = clock
        self._wall = wall_clock
        self._membership = membership
        self._rules = rules or RecoveryRules()
        self._writer_rules = writer_rules
        self._retry_s = retry_s
        self._add_timeout_s = add_timeout_s
        self._phase = _Phase.CLAIM
        self._claims = 0
        self._proposal: LedgerMetadata | None = None
        self._round = _Round()
        self._lacs: list[int] = []
        self._lac0 = -1
        self._reading = 0
        self._negatives: set[str] = set()
        self._recovered: dict[int, tuple[bytes, int]] = {}
        self._length0 = 0
        self._effects: list[Effect] = []

    # --- driver interface ---------------------------------------------------

    @property
    def done(self) -> bool:
        return self._phase is _Phase.DONE

    @property
    def epoch(self) -> int:
        return self.metadata.epoch

    def take_effects(self) -> list[Effect]:
        effects, self._effects = self._effects, []
        if self.writer is not None:
            for effect in self.writer.take_effects():
                if isinstance(effect, Resumed | LedgerClosedDone | Stopped):
                    self._phase = transition(self._phase, _Phase.DONE, _MOVES)
                effects.append(effect)
        return effects

    def start(self) -> None:
        if self.metadata.state is LedgerState.CLOSED:
            self._finish(LedgerClosedDone(self.token, self.metadata))
            return
        self._claim()

    def on_metadata(self, result: MetadataResult) -> None:
        if self.writer is not None:
            self.writer.on_metadata(result)
            return
        if self._phase is not _Phase.CLAIM or self._proposal is None:
            return
        proposal, self._proposal = self._proposal, None
        if isinstance(result, Current) and result.metadata == proposal:
            result = Written(result.revision)
        if isinstance(result, Written):
            self.metadata, self.revision = proposal, result.revision
            self._start_fence()
            return
        current = result.metadata
        if current is None:
            self._finish(Stopped(NoSuchLedger(self.ledger_id)))
        elif current.state is LedgerState.CLOSED:
            self._finish(LedgerClosedDone(self.token, current))
        elif current.writer != self.metadata.writer:
            # Another node took the ledger over first: it is that writer's now, and a
            # claim over it would supersede a live writer (§7).
            self._finish(Stopped(WriterSuperseded(
                f"ledger {self.ledger_id}: taken over by {current.writer.node} at epoch "
                f"{current.epoch} first")))
        elif self._claims >= CLAIM_ATTEMPTS_MAX:
            self._finish(Stopped(MetadataConflict(
                f"ledger {self.ledger_id}: lost {self._claims} takeover races")))
        else:
            self.metadata, self.revision = current, result.revision
            self._claim()

    def on_reply(self, bookie_id: str, reply: BookieReply) -> None:
        if self.writer is not None:
            self.writer.on_reply(bookie_id, reply)
            return
        if isinstance(reply, Fenced) and reply.fenced_epoch > self.epoch:
            self._finish(Stopped(WriterSuperseded(
                f"ledger {self.ledger_id}: another takeover at epoch {reply.fenced_epoch}")))
        elif self._phase is _Phase.FENCE and isinstance(reply, FenceOk):
            if reply.epoch == self.epoch:
                self._on_fenced(bookie_id, reply.lac)
        elif self._phase is _Phase.READ and isinstance(reply, EntryFound | NoEntry) \
                and reply.entry_id == self._reading:
            self._on_read(bookie_id, reply)

    def tick(self) -> None:
        """Resend what is unanswered after ``retry_s`` (fences, recovery reads)."""
        if self.writer is not None:
            self.writer.tick()
            return
        now = self._clock.now()
        for bookie, sent in list(self._round.sent_at_s.items()):
            if bookie not in self._round.answered and now - sent >= self._retry_s:
                self._send_round(bookie)

    # --- steps ----------------------------------------------------------------

    def _finish(self, effect: Effect) -> None:
        self._phase = transition(self._phase, _Phase.DONE, _MOVES)
        self._effects.append(effect)

    def _claim(self) -> None:
        self._claims += 1
        self._proposal = claim(self.metadata, self.node_id)
        self._effects.append(WriteMetadata(self.revision, self._proposal))

    def _start_fence(self) -> None:
        self._phase = transition(self._phase, _Phase.FENCE, _MOVES)
        self._round = _Round()
        for bookie in self.metadata.last_fragment.bookies:
            self._send_round(bookie)

    def _send_round(self, bookie: str) -> None:
        self._round.sent_at_s[bookie] = self._clock.now()
        request: BookieRequest
        if self._phase is _Phase.FENCE:
            request = Fence(self.ledger_id, self.epoch)
        else:
            request = self._rules.recovery_read(self.ledger_id, self._reading, self.epoch)
        self._effects.append(Send(bookie, request))

    def _on_fenced(self, bookie: str, lac: int) -> None:
        self._round.answered.add(bookie)
        self._lacs.append(lac)
        md = self.metadata
        if not covers(md.last_fragment, self._round.answered, md.write_quorum, md.ack_quorum):
            return
        # Fragments before the last hold committed entries only (§6.2), so recovery
        # starts no earlier than the last one (BookKeeper #2615).
        self._lac0 = max(*self._lacs, md.last_fragment.first_entry_id - 1)
        self._phase = transition(self._phase, _Phase.READ, _MOVES)
        if self._lac0 >= 0:
            self._start_read(self._lac0)  # read the LAC entry itself for its length
        else:
            self._start_read(0)

    def _start_read(self, entry_id: int) -> None:
        self._reading = entry_id
        self._negatives = set()
        self._round = _Round()
        fragment = self.metadata.fragment_of(entry_id)
        for bookie in write_set(fragment, entry_id, self.metadata.write_quorum):
            self._send_round(bookie)

    def _on_read(self, bookie: str, reply: EntryFound | NoEntry) -> None:
        self._round.answered.add(bookie)
        fragment = self.metadata.fragment_of(self._reading)
        if isinstance(reply, EntryFound) and reply.epoch >= fragment.epoch:
            if self._reading == self._lac0:
                self._length0 = reply.length_after
            else:
                self._recovered[self._reading] = (reply.payload, reply.length_after)
            self._start_read(self._reading + 1)
            return
        # A stale replica (epoch below the fragment's) counts as absent (§6.4).
        self._negatives.add(bookie)
        md = self.metadata
        if self._reading > self._lac0 and \
                len(self._negatives) >= md.write_quorum - md.ack_quorum + 1:
            self._start_write_back(end=self._reading - 1)

    def _start_write_back(self, end: int) -> None:
        self._phase = transition(self._phase, _Phase.WRITE, _MOVES)
        self._round = _Round()
        writer = LedgerWriter(
            node_id=self.node_id, metadata=self.metadata, revision=self.revision,
            clock=self._clock, membership=self._membership, next_entry_id=self._lac0 + 1,
            lac=self._lac0, length=self._length0, recovering=True, rules=self._writer_rules,
            add_timeout_s=self._add_timeout_s, wall_clock=self._wall)
        self.writer = writer
        for entry_id in range(self._lac0 + 1, end + 1):
            payload, length_after = self._recovered[entry_id]
            writer.write_back(entry_id, payload, length_after)
        writer.finish_recovery(resume=not self.close, token=self.token)
