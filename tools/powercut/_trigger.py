"""Triggers: cut the power at a chosen file-system operation."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

MUTATING_OPS = frozenset({"write", "fsync", "fsyncdir", "create", "mkdir", "rename", "link",
                          "unlink", "rmdir", "truncate", "fallocate"})


@dataclass(frozen=True)
class Trigger:
    """Cut at the ``skip + 1``-th operation matching ``op`` and ``path``.

    ``op`` is one of ``MUTATING_OPS`` or ``"any"`` (every mutating operation);
    ``path`` is an fnmatch pattern on the path in the mount (for ``rename`` the
    new path); ``offset_max`` limits ``write`` to writes starting below it.
    ``when="before"``: the operation does not happen; ``"after"``: it happens (an
    fsync's data is then durable) but its caller never learns the result.
    """

    op: str
    path: str = "*"
    offset_max: int | None = None
    skip: int = 0
    when: str = "before"

    def __post_init__(self) -> None:
        if self.op != "any" and self.op not in MUTATING_OPS:
            raise ValueError(f"unknown trigger op {self.op!r}")
        if self.when not in ("before", "after"):
            raise ValueError(f"trigger 'when' must be before or after, not {self.when!r}")

    def matches(self, op: str, path: str, offset: int | None) -> bool:
        if self.op != "any" and op != self.op:
            return False
        if self.offset_max is not None and (offset is None or offset >= self.offset_max):
            return False
        return fnmatch.fnmatchcase(path, self.path)
