"""Power loss under load: a real ``ledgerd serve`` with DATA_DIR (journal, entry
logs, RocksDB) on a powercut mount, cut at 54 points, restarted after each.

Each chain starts from an empty disk and runs ``CUTS_PER_CHAIN`` power epochs:
mount, start the server (its recovery is part of the test), verify everything
acknowledged so far, drive concurrent single and batch adds on three ledgers
plus creates, closes, deletes (and, for GC moments, a forced major GC), then
cut the power at the epoch's moment (``_moments.py``): after a random number of
acks, at a random file-system operation, or at a named step of a checkpoint,
an entry-log rotation, GC/compaction or start-up.  Cuts are STRICT (nothing
unsynced survives) or PARTIAL (a random half of it does).  A final epoch
verifies the last cut.  Method and fault model: docs/powerloss.md.

Replay a failure: ``LEDGERD_POWERLOSS_SEED=<seed> pytest
'tests/powerloss/test_powerloss_http.py::test_power_cuts[<chain>]'`` runs the same
plans (moments, triggers, modes, workload seeds); the disk left by the failing
cut stays under the test's ``tmp_path`` (``disk/``, with ``server.log`` and
``powercut.log``).
"""

from __future__ import annotations

import fnmatch
import itertools
import os
import random
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.crash.http_workload import Ledger, Round, worker
from tests.powerloss._ledgerd import (
    History,
    churn,
    create_ledger,
    force_major_gc,
    ledgerd_on,
    verify_history,
    wait_checkpointed,
)
from tests.powerloss._moments import Moment, moment_for
from tools.local_server import ServerProcess
from tools.powercut import CutMode, PowercutMount, Trigger

SEED = int(os.environ.get("LEDGERD_POWERLOSS_SEED", "20261123"))
CHAINS = 6
CUTS_PER_CHAIN = 9
LEDGERS = 3
EPOCH_TIMEOUT_S = 8.0
GC_DELETES_TIMEOUT_S = 5.0


@dataclass
class Plan:
    """One power epoch, fully determined by the seed."""

    cut_index: int
    moment: Moment
    trigger: Trigger | None
    mode: CutMode
    fs_seed: int
    acks: int
    workload_seed: int


def plan_for(rng: random.Random, cut_index: int) -> Plan:
    moment = moment_for(cut_index)
    return Plan(cut_index=cut_index, moment=moment,
                trigger=None if moment.trigger is None else moment.trigger(rng),
                mode=rng.choice([CutMode.STRICT, CutMode.PARTIAL]),
                fs_seed=rng.randrange(2**32), acks=rng.randint(20, 300),
                workload_seed=rng.randrange(2**32))


class Rig:
    """The disk, the mount point and the server whose DATA_DIR is on the mount."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.disk = tmp_path / "disk"
        self.mnt = tmp_path / "mnt"
        self.server = ledgerd_on(self.mnt / "data", tmp_path / "server.log")

    def mount(self, mode: CutMode = CutMode.STRICT, seed: int = 0) -> PowercutMount:
        return PowercutMount(self.disk, self.mnt, mode=mode, seed=seed,
                             log_path=self.tmp_path / "powercut.log").start()

    def start_server(self, mount: PowercutMount,
                     overrides: dict[str, str] | None = None) -> bool:
        """Start and wait until ready; False when the armed cut killed it first."""
        self.server = ledgerd_on(self.mnt / "data", self.tmp_path / "server.log", overrides)
        try:
            self.server.start()
        except RuntimeError:
            if mount.status()["fired"] is None:
                raise  # it died on its own: a recovery failure
            return False
        return True

    def context(self) -> str:
        return f"disk: {self.disk}\nserver log tail:\n{self.server.logs()[-3000:]}"


def run_epoch(rig: Rig, history: History, plan: Plan) -> dict[str, Any]:
    """Mount, start (recovering), verify, load, cut; the cut report."""
    times = [time.monotonic()]
    acks = 0
    mount = rig.mount(plan.mode, plan.fs_seed)
    try:
        if plan.moment.at_startup:
            assert plan.trigger is not None
            mount.arm(plan.trigger)
        started = rig.start_server(mount, plan.moment.server_settings)
        if started and plan.moment.at_startup:
            mount.disarm()  # did not fire during recovery: cut under load instead
            started = mount.status()["fired"] is None
        times.append(time.monotonic())
        if started:
            stats = mount.status()["stats"]
            assert stats.get("direct_opens", 0) >= 1, "the journal did not open with O_DIRECT"
            verify_history(rig.server.url, history)
            times.append(time.monotonic())
            acks = _load_until_cut(rig, history, plan, mount)
        times.append(time.monotonic())
        report = mount.cut(pids=[_pid(rig.server)])
        _wait_dead(rig.server)
        return {"plan": plan, "report": report, "fired_at_startup": not started, "acks": acks,
                "seconds": [round(b - a, 2) for a, b in itertools.pairwise(times)]}
    finally:
        rig.server.kill()
        mount.unmount()


def _load_until_cut(rig: Rig, history: History, plan: Plan, mount: PowercutMount) -> int:
    """Run the workload until the cut; the number of acknowledged adds."""
    server = rig.server
    rng = random.Random(plan.workload_seed)
    manual = plan.trigger is None or plan.moment.at_startup
    rnd = Round(server.url, kill_after_acks=plan.acks if manual else 10**9)
    deletes_done = threading.Event()
    ledgers = open_ledgers(server.url, history)
    threads = [threading.Thread(target=worker, args=(rnd, ledger, rng.randrange(2**32), batch))
               for ledger in ledgers for batch in (False, True)]
    threads.append(threading.Thread(target=churn, args=(rnd, history, rng.randrange(2**32),
                                                        deletes_done)))
    # The power cut kills the server: that ends the epoch as the ack target does.
    threads.append(threading.Thread(target=_set_when_dead, args=(server, rnd.target_reached)))
    for thread in threads:
        thread.start()
    try:
        if not manual and plan.moment.gc:
            deletes_done.wait(GC_DELETES_TIMEOUT_S)
            rnd.stop.set()
            for thread in threads[:-1]:
                thread.join(60)
            if wait_checkpointed(server.url, EPOCH_TIMEOUT_S):
                mount.arm(plan.trigger)  # type: ignore[arg-type]
                force_major_gc(server.url)
        elif not manual:
            mount.arm(plan.trigger)  # type: ignore[arg-type]
        rnd.target_reached.wait(EPOCH_TIMEOUT_S)
    finally:
        mount.cut(pids=[_pid(server)])
        rnd.stop.set()
        for thread in threads:
            thread.join(60)
    assert not rnd.errors, rnd.errors
    return rnd.acks


def _pid(server: ServerProcess) -> int:
    assert server.process is not None
    return server.process.pid


def _set_when_dead(server: ServerProcess, event: threading.Event) -> None:
    assert server.process is not None
    server.process.wait()
    event.set()


def _wait_dead(server: ServerProcess) -> None:
    if server.process is not None:
        server.process.wait(30)


def start_chain(rig: Rig) -> None:
    """An operator's set-up: the data directory exists and is durable.  The first
    server start creates everything in it, already under the power cuts."""
    mount = rig.mount()
    (rig.mnt / "data").mkdir()
    mount.sync()
    mount.unmount()


def open_ledgers(url: str, history: History) -> list[Ledger]:
    """The workload's ledgers: the open ones of earlier epochs, topped up to LEDGERS."""
    ledgers = [history.ledgers[i] for i in sorted(history.ledgers)
               if i not in history.closed and i not in history.closing][:LEDGERS]
    with httpx.Client(base_url=url, timeout=10.0) as client:
        while len(ledgers) < LEDGERS:
            ledger_id = create_ledger(client)
            if ledger_id is not None:
                ledgers.append(Ledger(ledger_id))
                history.ledgers[ledger_id] = ledgers[-1]
    return ledgers


def final_epoch(rig: Rig, history: History) -> None:
    mount = rig.mount()
    try:
        assert rig.start_server(mount)
        verify_history(rig.server.url, history)
        rig.server.stop()
    finally:
        rig.server.kill()
        mount.unmount()


@pytest.mark.slow
@pytest.mark.parametrize("chain", range(CHAINS))
def test_power_cuts(fuse_ready: None, tmp_path: Path, chain: int):
    rng = random.Random(f"{SEED}/{chain}")
    rig = Rig(tmp_path)
    history = History()
    start_chain(rig)
    outcomes = []
    for cut_no in range(CUTS_PER_CHAIN):
        plan = plan_for(rng, chain * CUTS_PER_CHAIN + cut_no)
        try:
            outcomes.append(run_epoch(rig, history, plan))
        except AssertionError as exc:
            raise AssertionError(f"seed {SEED} chain {chain} cut {cut_no} "
                                 f"({plan}): {exc}\n{rig.context()}") from exc
    try:
        final_epoch(rig, history)
    except AssertionError as exc:
        raise AssertionError(f"seed {SEED} chain {chain} after the last cut "
                             f"({outcomes[-1]}): {exc}\n{rig.context()}") from exc
    for outcome in outcomes:
        plan, report = outcome["plan"], outcome["report"]
        print(f"cut {plan.cut_index:2d} {plan.moment.name:26s} {plan.mode.value:7s} "
              f"fired={report['fired']} startup={outcome['fired_at_startup']} "
              f"acks={outcome['acks']} seconds={outcome['seconds']} "
              f"unsynced={report['unsynced_paths']}")
        if plan.trigger is not None:
            assert report["fired"] is not None, f"{plan.moment.name} never happened: {plan}"
        expected = plan.moment.expect_unsynced
        if expected is not None and not outcome["fired_at_startup"]:
            assert any(fnmatch.fnmatchcase(p, expected) for p in report["unsynced_paths"]), (
                f"{plan.moment.name}: nothing unsynced in {expected} at the cut: {report}")
    assert sum(len(led.acked) for led in history.ledgers.values()) > 0
