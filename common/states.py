"""State machines: one enum of states and one table of the moves between them.

Every machine that holds a state (the journal's lifecycle, the cluster writer,
recovery and re-replication) keeps it as one member of its enum and changes it
only through :func:`transition`, which checks the move against the machine's
table, written next to the enum::

    class _Phase(enum.Enum):
        WRITING = "writing"
        DONE = "done"

    _MOVES: Moves[_Phase] = {_Phase.WRITING: {_Phase.DONE}, _Phase.DONE: set()}

    self._phase = transition(self._phase, _Phase.DONE, _MOVES)

The table is the machine's documentation (which moves exist, read in one place)
and its check: a move it lacks raises InvariantViolation where it happens (with
``invariant``, which ``python -O`` does not strip), not as a wrong answer later.
Steps that are only reported, not held (checkpoint, offload and compaction steps
given to a hook), are enums without a table.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Set
from typing import TypeVar

from .errors import invariant

S = TypeVar("S", bound=enum.Enum)

# From each state, the states it may move to (a state missing from the table has none).
Moves = Mapping[S, Set[S]]


def transition(current: S, target: S, moves: Moves[S]) -> S:
    """``target``, once the move from ``current`` to it is checked against ``moves``."""
    invariant(target in moves.get(current, ()),
              f"{type(current).__name__}: no move from {current.name} to {target.name}")
    return target
