"""One style for state machines (``common.states``): an enum, a table of moves,
and every change of state checked against the table."""

from __future__ import annotations

import ast
import enum
from pathlib import Path

import pytest

from common.errors import InvariantViolation
from common.states import Moves, transition

REPO = Path(__file__).resolve().parents[1]
MACHINES = ["journal/_journal.py", "cluster/_writer.py", "cluster/_recovery.py",
            "cluster/_rereplication.py"]


class Door(enum.Enum):
    OPEN = "open"
    SHUT = "shut"
    LOCKED = "locked"


DOOR: Moves[Door] = {Door.OPEN: {Door.SHUT}, Door.SHUT: {Door.OPEN, Door.LOCKED}}


def test_a_move_in_the_table_returns_its_target() -> None:
    assert transition(Door.OPEN, Door.SHUT, DOOR) is Door.SHUT
    assert transition(Door.SHUT, Door.LOCKED, DOOR) is Door.LOCKED


@pytest.mark.parametrize(("current", "target"), [
    (Door.OPEN, Door.LOCKED),   # not among OPEN's moves
    (Door.OPEN, Door.OPEN),     # staying put is a move like any other
    (Door.LOCKED, Door.OPEN),   # a state missing from the table has no moves
])
def test_a_move_missing_from_the_table_is_a_bug(current: Door, target: Door) -> None:
    with pytest.raises(InvariantViolation, match=f"Door: no move from {current.name} "
                                                 f"to {target.name}"):
        transition(current, target, DOOR)


def _machine_enum(tree: ast.Module) -> str:
    """The enum named in the module's ``_MOVES: Moves[...]`` table."""
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                and node.target.id == "_MOVES" and isinstance(node.annotation, ast.Subscript):
            return ast.unparse(node.annotation.slice)
    raise AssertionError("no _MOVES table")


@pytest.mark.parametrize("path", MACHINES)
def test_each_machine_changes_state_only_through_its_table(path: str) -> None:
    tree = ast.parse((REPO / path).read_text())
    states = _machine_enum(tree)
    unchecked = []
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef) or function.name == "__init__":
            continue  # the constructor sets the initial state
        for node in ast.walk(function):
            # ``self._phase = _Phase.DONE``: a state set without its check.
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Attribute) \
                    and isinstance(node.value.value, ast.Name) \
                    and node.value.value.id == states:
                unchecked.append(f"{function.name}:{node.lineno} {ast.unparse(node)}")
    assert unchecked == []


def test_the_style_check_sees_a_direct_assignment(tmp_path: Path) -> None:
    probe = ("_MOVES: Moves[_Phase] = {}\n"
             "class M:\n"
             "    def __init__(self):\n        self._phase = _Phase.A\n"
             "    def go(self):\n        self._phase = _Phase.B\n")
    tree = ast.parse(probe)
    assert _machine_enum(tree) == "_Phase"
    (tmp_path / "m.py").write_text(probe)
    global REPO
    saved, REPO = REPO, tmp_path
    try:
        with pytest.raises(AssertionError):
            test_each_machine_changes_state_only_through_its_table("m.py")
    finally:
        REPO = saved
