"""Node-to-node messages of the replication protocol (docs/cluster.md §5).

Plain values: the simulation passes them over its network as they are, the node
carries them on ``/internal/v1/`` routes.  Every answer about a ledger carries the
bookie's piggybacked LAC.
"""

from __future__ import annotations

from dataclasses import dataclass

# --- requests --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NewEntry:
    """One entry of an :class:`AddEntries`: its id, its bytes, and the ledger's
    length in bytes once it is added."""

    entry_id: int
    payload: bytes
    length_after: int


@dataclass(frozen=True, slots=True)
class AddEntries:
    """Store ``entries`` at ``epoch``, all or none (one journal record on a node);
    ``lac`` is the writer's LAC when sent.  A writer sends each bookie what it
    needs of the adds made since its last send as one of these (a single add is a
    run of one), so a batch or a stream message costs one call per bookie."""

    ledger_id: int
    epoch: int
    lac: int
    entries: tuple[NewEntry, ...]


@dataclass(frozen=True, slots=True)
class ReadEntry:
    ledger_id: int
    entry_id: int


@dataclass(frozen=True, slots=True)
class ReadLac:
    ledger_id: int


@dataclass(frozen=True, slots=True)
class WriteLac:
    """The writer's LAC, sent when it idles (BookKeeper's explicit LAC): adds carry
    the LAC only as of when they were sent, so without it a reader asking the
    bookies would see the last acknowledged entry only after the next add.  A hint
    kept in memory; a bookie that holds no replica of the ledger ignores it."""

    ledger_id: int
    lac: int


@dataclass(frozen=True, slots=True)
class Fence:
    """Durably refuse adds of epochs below ``epoch`` from now on."""

    ledger_id: int
    epoch: int


@dataclass(frozen=True, slots=True)
class RecoveryRead:
    """Fence at ``epoch`` (durably), then read ``entry_id``."""

    ledger_id: int
    entry_id: int
    epoch: int


@dataclass(frozen=True, slots=True)
class CopyEntry:
    """A committed entry copied by re-replication; not fence-checked."""

    ledger_id: int
    entry_id: int
    epoch: int
    payload: bytes
    length_after: int


@dataclass(frozen=True, slots=True)
class ReadEntries:
    """Re-replication's range read: the entries ``entry_ids`` (ascending) the bookie
    holds, whatever their epochs, in one call; the answer stops once it holds
    ``bytes_max`` bytes of payload (at least one entry)."""

    ledger_id: int
    entry_ids: tuple[int, ...]
    bytes_max: int


@dataclass(frozen=True, slots=True)
class CopyEntries:
    """Several ``CopyEntry`` of one ledger as one call (one journal record)."""

    ledger_id: int
    entries: tuple[CopyEntry, ...]


@dataclass(frozen=True, slots=True)
class ListEntries:
    """Which entries of ``first … last`` (inclusive) the bookie holds, with epochs."""

    ledger_id: int
    first: int
    last: int


@dataclass(frozen=True, slots=True)
class DeleteReplica:
    ledger_id: int


BookieRequest = (AddEntries | ReadEntry | ReadLac | WriteLac | Fence | RecoveryRead | CopyEntry
                 | ReadEntries | CopyEntries | ListEntries | DeleteReplica)

# --- answers ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AddsOk:
    """The answer to :class:`AddEntries`: every one of ``entry_ids`` is stored at
    ``epoch``."""

    ledger_id: int
    epoch: int
    lac: int
    entry_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Fenced:
    """Refused: the replica is fenced at ``fenced_epoch``, above the request's."""

    ledger_id: int
    fenced_epoch: int
    lac: int


@dataclass(frozen=True, slots=True)
class FenceOk:
    ledger_id: int
    epoch: int
    lac: int


@dataclass(frozen=True, slots=True)
class EntryFound:
    ledger_id: int
    entry_id: int
    epoch: int
    payload: bytes
    length_after: int
    lac: int


@dataclass(frozen=True, slots=True)
class NoEntry:
    ledger_id: int
    entry_id: int
    lac: int


@dataclass(frozen=True, slots=True)
class LacIs:
    ledger_id: int
    lac: int
    # The epoch the replica is fenced at: above the reader's metadata epoch, a
    # takeover (and maybe a close) happened that its metadata does not show yet.
    fenced_epoch: int = 0


@dataclass(frozen=True, slots=True)
class CopyOk:
    ledger_id: int
    entry_id: int


@dataclass(frozen=True, slots=True)
class EntriesRead:
    """The answer to ``ReadEntries``: the entries found (ascending ids), the ids the
    bookie does not hold; an id in neither was left out by ``bytes_max``."""

    ledger_id: int
    found: tuple[EntryFound, ...]
    absent: tuple[int, ...]
    lac: int


@dataclass(frozen=True, slots=True)
class CopiesOk:
    ledger_id: int
    entry_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class EntriesHeld:
    ledger_id: int
    entries: tuple[tuple[int, int], ...]  # (entry_id, epoch), ascending ids


@dataclass(frozen=True, slots=True)
class Deleted:
    ledger_id: int


@dataclass(frozen=True, slots=True)
class Unavailable:
    """The bookie cannot serve the request (read-only for adds, disk error, …)."""

    ledger_id: int
    reason: str


BookieReply = (AddsOk | Fenced | FenceOk | EntryFound | NoEntry | LacIs | CopyOk
               | EntriesRead | CopiesOk | EntriesHeld | Deleted | Unavailable)
