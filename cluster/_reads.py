"""Where reads go and how far they may go (docs/cluster.md §8)."""

from __future__ import annotations

from ._metadata import LedgerMetadata, LedgerState, covers, write_set


def read_candidates(md: LedgerMetadata, entry_id: int, local: str | None = None,
                    ) -> tuple[str, ...]:
    """The bookies to try for ``entry_id``, the local one first when it holds it."""
    members = write_set(md.fragment_of(entry_id), entry_id, md.write_quorum)
    if local in members:
        return (local, *(b for b in members if b != local))
    return members


def counts_as_replica(md: LedgerMetadata, entry_id: int, epoch: int) -> bool:
    """A stored entry counts only at its fragment's epoch or later (§6.4)."""
    return epoch >= md.fragment_of(entry_id).epoch


class LacQuorum:
    """The readable end of an OPEN ledger from ``ReadLac`` answers of its last
    fragment: known once the answers cover it (max answer, at least the first id of
    the last fragment - 1); a CLOSED ledger's end is its ``last_entry_id``."""

    def __init__(self, md: LedgerMetadata) -> None:
        self._md = md
        self._answers: dict[str, int] = {}

    def add(self, bookie_id: str, lac: int) -> None:
        if bookie_id in self._md.last_fragment.bookies:
            self._answers[bookie_id] = lac

    def result(self) -> int | None:
        md = self._md
        if md.state is LedgerState.CLOSED:
            assert md.last_entry_id is not None
            return md.last_entry_id
        if not covers(md.last_fragment, set(self._answers), md.write_quorum, md.ack_quorum):
            return None
        return max(*self._answers.values(), md.last_fragment.first_entry_id - 1)
