"""Seeded crash simulation on a FaultyDevice (STYLE 13).

Each seed drives one journal deterministically (``start(background=False)``: the
test decides when blocks are written and synced), crashes the device at random
points (unsynced sectors kept, dropped or torn), reopens and replays.  Checked
after every reopen: every acked, untrimmed record is returned in order byte for
byte, nothing is invented, and writing continues.  A failing seed replays exactly:
``pytest tests/journal/test_journal_simulation.py -k 'seed-123'``.
"""

from __future__ import annotations

import contextlib
import random
import threading
from pathlib import Path

import pytest

from common.errors import DeviceBroken, JournalFull
from common.units import KiB
from journal import Journal, JournalSettings
from journal.testing import FaultyDevice
from tests.journal.conftest import ONE_PART_RECORD_OVERHEAD_BYTES

SEEDS = range(200)


def settings_for(rng: random.Random) -> JournalSettings:
    capacity = rng.choice([256, 384, 512]) * KiB
    window = rng.choice([32, 64, 128]) * KiB
    return JournalSettings(
        device_path=Path("sim"), capacity_bytes=capacity, sliding_window_bytes_max=window,
        block_size_bytes_soft_limit=rng.choice([4, 8, 16]) * KiB)


class Model:
    """What the journal promised: acked records (offset -> body) and the trim."""

    def __init__(self) -> None:
        self.acked: dict[int, bytes] = {}
        self.appended: dict[int, bytes] = {}
        self.trim = 0

    def check_replay(self, records, *, clean: bool, seed: int) -> None:
        got = [(r.offset, r.body) for r in records]
        assert [o for o, _ in got] == sorted({o for o, _ in got}), f"seed {seed}: order"
        assert all(o >= self.trim for o, _ in got), f"seed {seed}: trimmed record returned"
        for offset, body in got:
            assert self.appended.get(offset) == body, f"seed {seed}: invented {offset}"
        returned = dict(got)
        for offset, body in self.acked.items():
            if offset >= self.trim:
                assert returned.get(offset) == body, f"seed {seed}: lost acked {offset}"
        if clean:
            live = sorted((o, b) for o, b in self.appended.items() if o >= self.trim)
            assert got == live, f"seed {seed}: clean replay differs"
        # What came back is now the whole journal; lost unacked offsets get reused.
        self.acked = dict(got)
        self.appended = dict(got)


def open_and_check(settings: JournalSettings, device: FaultyDevice, model: Model, *,
                   clean: bool, seed: int) -> Journal:
    journal = Journal.open(settings, device=device)
    records = list(journal.replay())
    report = journal.recovery_report
    assert report.clean_shutdown == clean, f"seed {seed}"
    model.check_replay(records, clean=clean, seed=seed)
    journal.start(background=False)
    return journal


def crash_close(journal: Journal) -> None:
    """Abandon a journal whose device crashed (its CLEAN header cannot land)."""
    with contextlib.suppress(DeviceBroken):
        journal.close()


def run_seed(seed: int) -> None:
    rng = random.Random(seed)
    settings = settings_for(rng)
    device = FaultyDevice(8192 + settings.capacity_bytes)
    model = Model()
    journal = open_and_check(settings, device, model, clean=True, seed=seed)

    def acked(offset: int, body: bytes):
        def done(future):
            if future.exception() is None:
                # The end of its block's last record: its own end, or past it.
                assert future.result() >= offset + ONE_PART_RECORD_OVERHEAD_BYTES + len(body)
                model.acked[offset] = body
        return done

    for _ in range(rng.randrange(150, 450)):
        op = rng.random()
        if op < 0.5:
            body = rng.randbytes(rng.choice([0, 1, 100, 1000, 3000, 4064, 5000, 9000, 15000]))
            try:
                append = journal.append_nowait(body)
            except JournalFull:
                synced = [o + ONE_PART_RECORD_OVERHEAD_BYTES + len(b)
                          for o, b in model.acked.items()]
                if synced:
                    target = rng.choice(synced)
                    if target >= model.trim:
                        journal.trim(target)
                        model.trim = target
                continue
            model.appended[append.offset] = body
            append.future.add_done_callback(acked(append.offset, body))
        elif op < 0.7:
            journal.pump_write()
        elif op < 0.85:
            journal.pump_sync()
        elif op < 0.9:
            candidates = [o for o in model.acked if model.trim <= o <= journal.synced_offset]
            if candidates:
                model.trim = rng.choice(candidates)
                journal.trim(model.trim)
        elif op < 0.96:
            device.crash(rng)
            crash_close(journal)
            device.restart()
            journal = open_and_check(settings, device, model, clean=False, seed=seed)
        else:
            journal.close()
            journal = open_and_check(settings, device, model, clean=True, seed=seed)
    device.crash(rng)
    crash_close(journal)
    device.restart()
    journal = open_and_check(settings, device, model, clean=False, seed=seed)
    journal.close()
    open_and_check(settings, device, model, clean=True, seed=seed).close()


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"seed-{s}")
def test_crash_simulation(seed: int) -> None:
    run_seed(seed)


@pytest.mark.parametrize("seed", range(5), ids=lambda s: f"seed-{s}")
def test_crash_under_background_threads(seed: int) -> None:
    """Real commit threads and many writers; the crash lands wherever it lands
    (thread timing is not seeded, the property holds for every timing)."""
    rng = random.Random(seed)
    settings = JournalSettings(device_path=Path("sim"), capacity_bytes=2048 * KiB,
                               sliding_window_bytes_max=256 * KiB,
                               block_size_bytes_soft_limit=16 * KiB)
    device = FaultyDevice(8192 + settings.capacity_bytes)
    journal = Journal.open(settings, device=device)
    list(journal.replay())
    journal.start()
    acked: dict[int, bytes] = {}
    appended: dict[int, bytes] = {}
    lock = threading.Lock()
    stop = threading.Event()

    def writer(n: int) -> None:
        wrng = random.Random(seed * 100 + n)
        while not stop.is_set():
            body = wrng.randbytes(wrng.randrange(0, 3000))
            try:
                with lock:
                    append = journal.append_nowait(body)
                    appended[append.offset] = body
            except Exception:
                return
            try:
                append.future.result(timeout=30)
            except Exception:
                return
            with lock:
                acked[append.offset] = body
            if len(acked) > 300:
                return

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    with lock:
        pass
    while len(acked) < rng.randrange(50, 250) and any(t.is_alive() for t in threads):
        journal.wait_synced(journal.synced_offset + 1, timeout_s=30)
    device.crash(rng)
    stop.set()
    for thread in threads:
        thread.join()
    crash_close(journal)
    device.restart()
    journal = Journal.open(settings, device=device)
    records = {r.offset: r.body for r in journal.replay()}
    for offset, body in acked.items():
        assert records.get(offset) == body, f"seed {seed}: lost acked record at {offset}"
    for offset, body in records.items():
        assert appended.get(offset) == body, f"seed {seed}: invented record at {offset}"
    journal.start()
    journal.append_nowait(b"after the crash").future.result(timeout=30)
    journal.close()
