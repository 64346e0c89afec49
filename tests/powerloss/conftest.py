"""Fixtures for power-loss tests: FUSE mounts of ``tools.powercut``.

A machine without FUSE (no /dev/fuse, no fuse3, no mfusepy) FAILS these tests
(``tests.conftest.require``): they are the only check that ledgerd's fsyncs are
where they must be, so a CI that cannot run them must say so loudly, not skip.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import require
from tools.powercut import CutMode, PowercutMount, fuse_unavailable


@pytest.fixture(scope="session")
def fuse_ready() -> None:
    reason = fuse_unavailable()
    require(None if reason is None else f"power-loss tests need FUSE: {reason} "
            "(run `make install` as root)")


MountFactory = Callable[..., PowercutMount]


@pytest.fixture
def mount(fuse_ready: None, tmp_path: Path) -> Iterator[MountFactory]:
    """``mount(mode=..., seed=...)``: a started mount of ``tmp_path/disk`` at
    ``tmp_path/mnt``; each call is a new power epoch (unmount the last first)."""
    mounts: list[PowercutMount] = []

    def make(*, mode: CutMode = CutMode.STRICT, seed: int = 0) -> PowercutMount:
        m = PowercutMount(tmp_path / "disk", tmp_path / "mnt", mode=mode, seed=seed,
                          log_path=tmp_path / "powercut.log")
        mounts.append(m)
        return m.start()

    yield make
    for m in mounts:
        m.unmount()
