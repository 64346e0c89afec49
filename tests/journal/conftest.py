"""Journal fixtures: a real loop block device and a preallocated file."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from common.units import KiB, MiB
from journal import JournalAppend, JournalSettings, SyncMode
from tests.conftest import require

DEVICE_BYTES = 16 * MiB
# Framing of a one-part record: the 32-byte header and a part table of 4 + 8 bytes.
ONE_PART_RECORD_OVERHEAD_BYTES = 32 + 12


def _loop_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "loop devices need root (losetup); run as root to test the raw-device path"
    if shutil.which("losetup") is None:
        return "losetup is not installed (apt-get install util-linux)"
    return None


@pytest.fixture(params=["file", "loop"])
def device_path(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    """A journal device path: a file the journal preallocates on first open, or a
    real block device (``losetup --direct-io=on``) over a sparse file."""
    if request.param == "file":
        yield tmp_path / "journal.dev"
        return
    require(_loop_unavailable())
    backing = tmp_path / "loop-backing.img"
    with open(backing, "wb") as f:
        f.truncate(DEVICE_BYTES)
    out = subprocess.run(["losetup", "--direct-io=on", "--find", "--show", str(backing)],
                         check=True, capture_output=True, text=True)
    loop = Path(out.stdout.strip())
    try:
        yield loop
    finally:
        subprocess.run(["losetup", "--detach", str(loop)], check=False)


SettingsFactory = Callable[..., JournalSettings]


@pytest.fixture(params=list(SyncMode), ids=lambda mode: mode.value)
def sync_mode(request: pytest.FixtureRequest) -> SyncMode:
    """Every way of making a write durable runs the same device tests."""
    mode: SyncMode = request.param
    return mode


@pytest.fixture
def journal_settings(device_path: Path, sync_mode: SyncMode) -> SettingsFactory:
    """Small journal settings on the parametrized device and sync mode; keyword
    overrides."""

    def make(**overrides: object) -> JournalSettings:
        values: dict[str, object] = {
            "device_path": device_path, "capacity_bytes": 4 * MiB, "sync_mode": sync_mode,
            "block_size_bytes_soft_limit": 64 * KiB, "sliding_window_bytes_max": 512 * KiB,
        }
        values.update(overrides)
        return JournalSettings(**values)  # type: ignore[arg-type]

    return make


def assert_acked_per_block(appends: list[JournalAppend]) -> list[int]:
    """Every append resolved, appends of one group-commit block share one future,
    which resolves with the end of the block's last record: the largest
    ``end_offset`` among them, in offset order.  The resolved values."""
    ends = [a.future.result(timeout=0) for a in appends]
    by_future: dict[int, int] = {}
    for append in appends:
        key = id(append.future)
        by_future[key] = max(by_future.get(key, 0), append.end_offset)
    assert ends == [by_future[id(a.future)] for a in appends]
    assert ends == sorted(ends)
    return ends
