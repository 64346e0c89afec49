"""Drive ``record_writer.py`` under a powercut mount and read what survived."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.powerloss.record_writer import RECORD_BYTES, record
from tools.powercut import PowercutMount

WRITER = Path(__file__).with_name("record_writer.py")
REPO = Path(__file__).resolve().parents[2]


def run_writer_until(mount: PowercutMount, path: Path, acks: int,
                     *args: str) -> tuple[list[int], dict[str, Any]]:
    """Start the writer on ``path`` (in the mount), cut the power (killing it)
    once it printed ``acks`` acknowledgements; (acknowledged records, cut report)."""
    proc = subprocess.Popen([sys.executable, str(WRITER), str(path), *args],
                            stdout=subprocess.PIPE, text=True, cwd=REPO)
    assert proc.stdout is not None
    acked: list[int] = []
    try:
        assert proc.stdout.readline().strip() == "READY"
        for line in proc.stdout:
            acked.append(int(line.split()[1]))
            if len(acked) >= acks:
                break
    finally:
        report = mount.cut(pids=[proc.pid])
        # Lines written before the kill were acknowledged too.
        acked.extend(int(line.split()[1]) for line in proc.stdout)
        proc.wait()
    return acked, report


def durable_records(backing_file: Path) -> set[int]:
    """Record numbers whose slot in the disk file holds exactly that record."""
    data = backing_file.read_bytes() if backing_file.exists() else b""
    return {n for n in range(len(data) // RECORD_BYTES)
            if data[n * RECORD_BYTES:(n + 1) * RECORD_BYTES] == record(n)}
