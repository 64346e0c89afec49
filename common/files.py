"""Directories made durable: a new name survives a power cut only once its
parent directory is fsynced (fsync(2)), so every directory ledgerd creates is
created one level at a time, each parent fsynced after it got a new entry.

These are system calls: they raise ``OSError``, which the package that owns the
file turns into the error tree (``DeviceBroken``, ``DiskFull``)."""

from __future__ import annotations

import os
from pathlib import Path


def sync_directory(directory: Path) -> None:
    """Make creations, renames and unlinks in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_directory(path: Path) -> None:
    """``mkdir -p path``, durably: each directory it creates is durable in its
    parent before this returns (an existing path is left as it is)."""
    missing: list[Path] = []
    at = path.absolute()
    while not at.exists():
        missing.append(at)
        at = at.parent
    for directory in reversed(missing):
        directory.mkdir(exist_ok=True)
        sync_directory(directory.parent)
