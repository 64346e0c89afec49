"""SIGKILL the engine under concurrent appends, again and again; after every
restart each acknowledged entry reads back byte for byte."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ledger import Bookie, LedgerState
from tests.crash.engine_writer import crash_settings
from tests.crash.workload import token_of

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 14


@dataclass
class Acked:
    entries: dict[tuple[int, int], str] = field(default_factory=dict)
    closed: dict[int, int] = field(default_factory=dict)
    lac_seen: dict[int, int] = field(default_factory=dict)

    def take(self, line: str) -> None:
        parts = line.split()
        if parts and parts[0] == "ACK":
            key = (int(parts[1]), int(parts[2]))
            assert key not in self.entries, f"entry {key} acknowledged twice"
            self.entries[key] = parts[3]
        elif parts and parts[0] == "CLOSED":
            self.closed[int(parts[1])] = int(parts[2])


def run_child_until(data_dir: Path, device: Path | None, seed: int, acks: int,
                    acked: Acked) -> None:
    cmd = [sys.executable, str(ROOT / "tests/crash/engine_writer.py"), str(data_dir),
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
            seen += line.startswith("ACK")
            if seen >= acks:
                break
        else:
            pytest.fail(f"writer exited early with {proc.wait()}")
    finally:
        proc.send_signal(signal.SIGKILL)
        # Lines the child wrote before dying were acknowledged too.
        for line in proc.stdout:
            acked.take(line)
        proc.wait()


def verify(data_dir: Path, device: Path | None, acked: Acked) -> None:
    bookie = Bookie.open(crash_settings(data_dir, device))
    try:
        for (lid, eid), token in acked.entries.items():
            assert token_of(bookie.read_entry(lid, eid).payload) == token, (lid, eid)
        infos = {i.ledger_id: i for i in bookie.list_ledgers(limit=100_000)[0]}
        for lid, info in infos.items():
            top = max((e for (owner, e) in acked.entries if owner == lid), default=-1)
            assert info.last_add_confirmed >= top, f"ledger {lid} lost acked entries"
            assert info.last_add_confirmed >= acked.lac_seen.get(lid, -1), "LAC went back"
            acked.lac_seen[lid] = info.last_add_confirmed
            # Every entry up to the LAC is a well-formed payload: no garbage.
            tokens = [token_of(e.payload) for e in bookie.read_entries(lid)]
            assert len(tokens) == info.last_add_confirmed + 1
            if lid in acked.closed:
                assert info.state == LedgerState.CLOSED
                assert info.last_add_confirmed == acked.closed[lid]
        for lid, _eid in acked.entries:
            assert lid in infos, f"ledger {lid} with acknowledged entries vanished"
    finally:
        bookie.close()


@pytest.mark.slow
def test_sigkill_under_concurrent_appends(tmp_path: Path, journal_device: Path | None):
    rng = random.Random(20261123)
    data_dir = tmp_path / "data"
    acked = Acked()
    for round_no in range(ROUNDS):
        run_child_until(data_dir, journal_device, seed=round_no,
                        acks=rng.randint(20, 1500), acked=acked)
        verify(data_dir, journal_device, acked)
    assert len(acked.entries) > ROUNDS * 20
