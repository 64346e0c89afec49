"""The harness catches a missing fsync, which a SIGKILL test cannot.

The same check runs against a correct writer and against one that acknowledges
without fdatasync: the correct one keeps every acknowledged record, the buggy
one loses acknowledged records at a cut.  Once with ``record_writer.py`` (a
plain file), once with the real journal (O_DIRECT on a preallocated file, group
commit) given a device whose ``sync()`` is skipped through the journal's
constructor seam; recovery then runs the real journal replay.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from journal import DirectDevice, Journal, SyncMode
from tests.powerloss._records import REPO, durable_records, run_writer_until
from tests.powerloss.conftest import MountFactory
from tests.powerloss.journal_writer import journal_settings
from tools.powercut import PowercutMount

JOURNAL_WRITER = Path(__file__).with_name("journal_writer.py")


def lost(acked: list[str] | list[int], durable: set[str] | set[int]) -> list[object]:
    """Acknowledged but gone after the power cut: must be empty."""
    return [a for a in acked if a not in durable]


@pytest.mark.parametrize("sync", [True, False], ids=["fdatasync", "no-fdatasync"])
def test_record_writer(mount: MountFactory, tmp_path: Path, sync: bool):
    m = mount()
    acked, _ = run_writer_until(m, tmp_path / "mnt/log", 100,
                                "--sync" if sync else "--no-sync")
    m.unmount()
    missing = lost(acked, durable_records(tmp_path / "disk/log"))
    if sync:
        assert missing == []
    else:
        assert len(missing) == len(acked) >= 100, "the harness kept unsynced writes"


def run_journal_until(mount: PowercutMount, path: Path, acks: int, *args: str) -> list[str]:
    proc = subprocess.Popen([sys.executable, str(JOURNAL_WRITER), str(path), *args],
                            stdout=subprocess.PIPE, text=True, cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.stdout is not None
    acked: list[str] = []
    try:
        assert proc.stdout.readline().strip() == "READY"
        for line in proc.stdout:
            acked.append(line.split()[1])
            if len(acked) >= acks:
                break
    finally:
        mount.cut(pids=[proc.pid])
        acked.extend(line.split()[1] for line in proc.stdout)
        proc.wait()
    return acked


def replayed_tokens(path: Path) -> set[str]:
    settings = journal_settings(path)
    device = DirectDevice(path)
    journal = Journal.open(settings, device=device)
    try:
        tokens = {":".join(r.body.decode(errors="replace").split(":")[:2])
                  for r in journal.replay()}
    finally:
        journal.close()
        device.close()
    return tokens


@pytest.mark.parametrize("sync_mode", list(SyncMode), ids=lambda mode: mode.value)
@pytest.mark.parametrize("skip_sync", [False, True], ids=["journal", "journal-skipping-sync"])
def test_journal(mount: MountFactory, tmp_path: Path, skip_sync: bool, sync_mode: SyncMode):
    """Every sync mode keeps every acknowledged record; skipping its sync loses
    some (with RWF_DSYNC, whose writes are durable on return, the skipping
    device writes without the flag)."""
    m = mount()
    acked = run_journal_until(m, tmp_path / "mnt/journal.dev", 300,
                              *(["--skip-sync"] if skip_sync else []),
                              "--sync-mode", sync_mode.value)
    m.unmount()
    m = mount()
    missing = lost(acked, replayed_tokens(tmp_path / "mnt/journal.dev"))
    m.unmount()
    print(f"{len(missing)} of {len(acked)} acknowledged records lost")
    if skip_sync:
        assert len(missing) >= 100, f"only {len(missing)} of {len(acked)} acks lost"
    else:
        assert missing == [], f"{len(missing)} of {len(acked)} acknowledged records lost"
