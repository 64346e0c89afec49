"""SIGKILL the engine while it stores replica entries and fences (cluster mode's
bookie side) from many threads, again and again; after every restart each
acknowledged entry reads back byte for byte at its epoch (or at a later epoch that
replaced it), no fence went back and no LAC went back."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from common.errors import ReplicaFenced
from ledger import Bookie, ReplicaEntry
from tests.crash.engine_writer import crash_settings
from tests.crash.workload import token_of

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 6


@dataclass
class Acked:
    # (ledger, entry) -> (epoch, token) of the newest acknowledged add
    entries: dict[tuple[int, int], tuple[int, str]] = field(default_factory=dict)
    fences: dict[int, int] = field(default_factory=dict)
    lacs: dict[int, int] = field(default_factory=dict)

    def take(self, line: str) -> None:
        parts = line.split()
        if not parts:
            return
        if parts[0] == "ADD":
            key, epoch = (int(parts[1]), int(parts[2])), int(parts[3])
            if epoch >= self.entries.get(key, (-1, ""))[0]:
                self.entries[key] = (epoch, parts[4])
        elif parts[0] == "FENCE":
            lid = int(parts[1])
            self.fences[lid] = max(self.fences.get(lid, 0), int(parts[2]))
        elif parts[0] == "LAC":
            lid = int(parts[1])
            self.lacs[lid] = max(self.lacs.get(lid, -1), int(parts[2]))


def run_child_until(data_dir: Path, device: Path | None, seed: int, acks: int,
                    acked: Acked) -> None:
    cmd = [sys.executable, str(ROOT / "tests/crash/replica_writer.py"), str(data_dir),
           "--seed", str(seed)]
    if device is not None:
        cmd += ["--device", str(device)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    assert proc.stdout is not None
    try:
        seen = 0
        for line in proc.stdout:
            acked.take(line)
            seen += line.startswith(("ADD", "FENCE"))
            if seen >= acks:
                break
        else:
            pytest.fail(f"replica writer exited early with {proc.wait()}")
    finally:
        proc.send_signal(signal.SIGKILL)
        for line in proc.stdout:  # written before it died: acknowledged too
            acked.take(line)
        proc.wait()


def verify(data_dir: Path, device: Path | None, acked: Acked) -> None:
    bookie = Bookie.open(crash_settings(data_dir, device))
    try:
        for (lid, eid), (epoch, token) in acked.entries.items():
            stored = bookie.replicas.read(lid, eid)
            assert stored.epoch >= epoch, (lid, eid, stored.epoch, epoch)
            if stored.epoch == epoch:
                assert token_of(stored.payload) == token, (lid, eid)
            else:
                token_of(stored.payload)  # a later add that replaced it: well formed
        for lid, epoch in acked.fences.items():
            assert bookie.replicas.state(lid).fenced_epoch >= epoch, f"fence of {lid} lost"
            with pytest.raises(ReplicaFenced):
                bookie.replicas.add(lid, [ReplicaEntry(2**40, epoch - 1, b"late", 0)],
                                    epoch=epoch - 1, lac=-1).result(30)
        for lid, lac in acked.lacs.items():
            assert bookie.replicas.state(lid).lac >= lac, f"LAC of {lid} went back"
    finally:
        bookie.close()


@pytest.mark.slow
def test_sigkill_under_concurrent_replica_adds_and_fences(tmp_path: Path,
                                                          journal_device: Path | None):
    rng = random.Random(20261124)
    data_dir = tmp_path / "data"
    acked = Acked()
    for round_no in range(ROUNDS):
        run_child_until(data_dir, journal_device, seed=round_no,
                        acks=rng.randint(20, 1500), acked=acked)
        verify(data_dir, journal_device, acked)
    assert len(acked.entries) > ROUNDS * 20
    assert acked.fences, "no fence was acknowledged"
