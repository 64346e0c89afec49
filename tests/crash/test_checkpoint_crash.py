"""SIGKILL at every named step of a checkpoint (ledger/_checkpoint.py) while
adds run on 16 threads: after a restart every acknowledged entry reads back
byte for byte, closed ledgers stay closed at their LAC, and nothing past an
acknowledged LAC is garbage.  The step hook is the engine's own seam; the
process kills itself from inside the checkpoint, so the kill lands exactly there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ledger import CheckpointStep
from tests.crash.test_engine_crash import ROOT, Acked, verify


def run_until_killed_at(data_dir: Path, step: CheckpointStep, occurrence: int,
                        acked: Acked) -> None:
    cmd = [sys.executable, str(ROOT / "tests/crash/engine_writer.py"), str(data_dir),
           "--seed", str(occurrence), "--kill-at", f"{step.value}:{occurrence}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT,
                          timeout=120, check=False)
    lines = proc.stdout.splitlines()
    for line in lines:
        acked.take(line)
    assert f"KILLED {step.value} {occurrence}" in lines, proc.stdout[-2000:]
    assert proc.returncode == -9


@pytest.mark.slow
@pytest.mark.parametrize("step", list(CheckpointStep), ids=lambda s: s.value)
def test_sigkill_at_each_checkpoint_step(tmp_path: Path, step: CheckpointStep) -> None:
    data_dir = tmp_path / "data"
    acked = Acked()
    # The first checkpoint runs at open (after replay); later ones under load.
    for occurrence in (1, 25):
        run_until_killed_at(data_dir, step, occurrence, acked)
        verify(data_dir, None, acked)
    assert acked.entries, "the writers acknowledged nothing before the kills"
