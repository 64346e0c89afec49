"""Journal appends at 1/16/64 concurrent writers and 100 B / 1 KiB / 16 KiB
entries, against the raw O_DIRECT+fdatasync limit of the same device.

Then, in the same run: each sync mode (:class:`journal.SyncMode`) at one writer
(latency, next to the raw device's own durable 4 KiB write in that mode and to
Redis's XADD on one connection with ``appendfsync always`` on the same disk)
and at 64 writers (appends/s); and, with ``before`` (LEDGERD_BENCH_BEFORE, a git
ref), 1 KiB x 64 writers on the code at that ref, extracted with ``git archive``
and run in a child process on the same device, next to the code now.

``python -m bench.journal_bench --child DEVICE WRITERS SIZE DURATION_S`` is that
child: one ``journal_appends`` point, its figures as JSON on the last line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from common.errors import JournalFull
from common.units import MiB
from journal import Journal, JournalSettings

from ._harness import Row, percentile, scratch_dir, tree_at
from ._load import open_loop, threaded_closed_loop
from .raw_device import raw_group_commit

REPO_ROOT = Path(__file__).resolve().parent.parent
CAPACITY_BYTES = 256 * MiB

WRITERS = (1, 16, 64)
SIZES = (100, 1024, 16384)


def _trimmer(journal: Journal, stop: threading.Event) -> None:
    """Stands in for checkpoints: trim to what is synced once half the ring is
    used.  Like the bookie's checkpoints, that is rare next to the syncs; a trim
    every few milliseconds would add its header write and fdatasync to the
    device's load and measure something no deployment does."""
    half = journal.capacity_bytes // 2
    while not stop.wait(0.01):
        if journal.appended_offset - journal.trim_offset > half:
            journal.trim(journal.synced_offset)


def _settings(device: Path, capacity: int, sync_mode: str | None) -> JournalSettings:
    if sync_mode is None:  # the code before the change may have no sync modes
        return JournalSettings(device_path=device, capacity_bytes=capacity)
    from journal import SyncMode

    return JournalSettings(device_path=device, capacity_bytes=capacity,
                           sync_mode=SyncMode(sync_mode))


def journal_appends(device: Path, *, capacity: int, writers: int, size: int,
                    duration_s: float, sync_mode: str | None = None) -> Row:
    """Closed loop: each writer appends one record and waits for its future.
    ``cpu_us_per_entry`` is this process's CPU time (user + system, every
    thread) over the entries acknowledged."""
    journal = Journal.open(_settings(device, capacity, sync_mode))
    for _ in journal.replay():
        pass
    journal.start()
    stop = threading.Event()
    body = b"x" * size

    def append(_n: int, _turn: int) -> bool:
        try:
            journal.append_nowait(body).future.result()
        except JournalFull:
            journal.wait_for_space(size + 8192, 1.0)
            return False
        return True

    trim = threading.Thread(target=_trimmer, args=(journal, stop))
    trim.start()
    cpu_before = time.process_time()
    load = threaded_closed_loop(append, writers=writers, duration_s=duration_s)
    cpu_s = time.process_time() - cpu_before
    stop.set()
    trim.join()
    journal.close()
    row = load.row("journal_append", {"writers": writers, "entry": size}, size)
    row.extra["cpu_us_per_entry"] = cpu_s / max(1, load.ops) * 1e6
    return row


def journal_paced(device: Path, *, capacity: int, size: int, rate_per_s: float,
                  duration_s: float) -> Row:
    """Open-loop appends at a fixed rate, latency counted from the scheduled
    time; its limit is the raw device's simplest group commit at the same rate
    (same pacing, same threads, no journal), measured past the ring."""
    journal = Journal.open(JournalSettings(device_path=device, capacity_bytes=capacity))
    for _ in journal.replay():
        pass
    journal.start()
    stop = threading.Event()
    trim = threading.Thread(target=_trimmer, args=(journal, stop))
    trim.start()
    body = b"x" * size
    latencies: list[float] = []
    lock = threading.Lock()

    def submit(scheduled: float) -> None:
        def done(_f: object) -> None:
            with lock:
                latencies.append(time.perf_counter() - scheduled)

        journal.append_nowait(body).future.add_done_callback(done)

    open_loop(submit, rate_per_s=rate_per_s, duration_s=duration_s)
    stop.set()  # the trimmer goes first: trimming a closed journal fails
    trim.join()
    journal.close()
    floor = raw_group_commit(
        device, size=size, rate_per_s=rate_per_s, duration_s=duration_s,
        region=(capacity + 8192, capacity + 8192 + 128 * MiB))
    floor_p99_ms = percentile(floor.latencies_s, 99) * 1e3
    return Row("journal_paced", {"entry": size, "rate": int(rate_per_s)},
               percentile(latencies, 99) * 1e3, "p99 ms", limit=floor_p99_ms,
               limit_name="raw group commit p99 at the same rate",
               extra={"p50_ms": percentile(latencies, 50) * 1e3, "acks": len(latencies),
                      "raw_p50_ms": percentile(floor.latencies_s, 50) * 1e3,
                      # The device alone: no ack can beat its slowest fdatasyncs.
                      "raw_commit_p99_ms": percentile(floor.commits_s, 99) * 1e3,
                      "raw_commit_max_ms": max(floor.commits_s) * 1e3, "target_ms": 2.0})


def redis_one_connection(*, size: int, duration_s: float) -> list[float] | None:
    """Latencies of XADDs of ``size`` bytes, one after another on one connection,
    to a redis-server with ``appendfsync always`` in a scratch directory (the
    same disk as the journal's scratch device); None without redis-server."""
    if shutil.which("redis-server") is None:
        return None
    import redis

    from .redis_bench import redis_server

    with scratch_dir() as work, redis_server(work) as port:
        client = redis.Redis(host="127.0.0.1", port=port)
        body = b"x" * size

        def xadd(_n: int, _turn: int) -> bool:
            client.xadd("bench", {"d": body})
            return True

        load = threaded_closed_loop(xadd, writers=1, duration_s=duration_s)
        client.close()
    return load.latencies_s


def sync_modes(device: Path, *, duration_s: float, size: int = 1024) -> list[Row]:
    """Each sync mode on the same device: the raw device's durable 4 KiB write in
    that mode (the floor), the journal at one writer (latency) and at 64
    writers (appends/s); Redis's one-connection XADD as the peer's latency."""
    from .raw_device import SYNC_MODES, raw_durable_writes

    rows: list[Row] = []
    redis_latencies = redis_one_connection(size=size, duration_s=duration_s)
    redis_extra: dict[str, float] = {}
    if redis_latencies is not None:
        redis_extra = {"redis_p50_ms": percentile(redis_latencies, 50) * 1e3,
                       "redis_p99_ms": percentile(redis_latencies, 99) * 1e3}
        rows.append(Row("redis_xadd_one_connection", {"entry": size},
                        redis_extra["redis_p50_ms"], "p50 ms",
                        extra={"p99_ms": redis_extra["redis_p99_ms"],
                               "ops_per_s": len(redis_latencies) / duration_s}))
    region = (CAPACITY_BYTES + 8192, CAPACITY_BYTES + 8192 + 64 * MiB)
    for mode in SYNC_MODES:
        raw = raw_durable_writes(device, mode, block_size=4096, count=2000, region=region)
        raw_p50_ms = percentile(raw, 50) * 1e3
        rows.append(Row("raw_durable_write", {"mode": mode, "block": 4096}, raw_p50_ms,
                        "p50 ms", extra={"p99_ms": percentile(raw, 99) * 1e3}))
        one = journal_appends(device, capacity=CAPACITY_BYTES, writers=1, size=size,
                              duration_s=duration_s, sync_mode=mode)
        rows.append(Row("journal_sync_latency", {"mode": mode, "writers": 1, "entry": size},
                        one.extra["p50_ms"], "p50 ms", limit=raw_p50_ms,
                        limit_name="raw durable 4 KiB write p50, same mode",
                        extra={**one.extra, **redis_extra}))
        many = journal_appends(device, capacity=CAPACITY_BYTES, writers=64, size=size,
                               duration_s=duration_s, sync_mode=mode)
        rows.append(Row("journal_sync_throughput", {"mode": mode, "writers": 64,
                                                    "entry": size},
                        many.extra["entries_per_s"], "entries/s", extra=many.extra))
    return rows


def cost_breakdown(device: Path, *, size: int = 1024, count: int = 20_000,
                   group: int = 64) -> list[Row]:
    """Where an append's CPU goes, one thread, no waiting: ``count`` appends of
    ``size`` bytes, then their blocks written ``group`` records at a time (the
    64-writer groups) and synced, then the same number of futures resolved and
    read.  What the 64-writer row's ``cpu_us_per_entry`` adds on top is thread
    wake-ups and GIL hand-overs."""
    from concurrent.futures import Future

    journal = Journal.open(_settings(device, CAPACITY_BYTES, None))
    for _ in journal.replay():
        pass
    journal.start(background=False)
    body = b"x" * size
    appended_s = written_s = 0.0
    for _ in range(count // group):
        started = time.process_time()
        for _ in range(group):
            journal.append_nowait(body)
        mid = time.process_time()
        while journal.pump_write():
            pass
        journal.pump_sync()
        appended_s += mid - started
        written_s += time.process_time() - mid
    journal.close()
    started = time.process_time()
    for _ in range(count):
        future: Future[int] = Future()
        future.set_result(0)
        future.result()
    future_s = time.process_time() - started
    parts = {"append_nowait (frame, CRC32C, lock, queue)": appended_s,
             "write + fdatasync + resolve, per entry of a 64-record group": written_s,
             "a Future made, resolved and read (what each append paid before)": future_s}
    return [Row("journal_cost", {"part": name, "entry": size}, spent / count * 1e6,
                "CPU us/entry") for name, spent in parts.items()]


def before_and_now(device: Path, ref: str, *, duration_s: float, writers: int = 64,
                   size: int = 1024, rounds: int = 3) -> list[Row]:
    """``writers`` x ``size`` appends/s on the code at git ref ``ref`` (a child
    process on an extracted tree) and on the code now, same device, same run:
    ``rounds`` times each, alternating, so a change in the machine's load falls
    on both; each row is the round with the median rate."""
    runs: dict[str, list[dict[str, float]]] = {"before": [], "now": []}
    work = Path(tempfile.mkdtemp(prefix="ledgerd-journal-before-"))
    try:
        # The bench (this file and its raw limits) is today's; only the journal differs.
        tree = tree_at(ref, work / "tree", todays=("bench/journal_bench.py", "bench/raw_device.py"))
        for _ in range(rounds):
            for code, path in (("before", tree), ("now", REPO_ROOT)):
                runs[code].append(_child(path, device, writers=writers, size=size,
                                         duration_s=duration_s))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    median = {code: sorted(found, key=lambda f: f["entries_per_s"])[len(found) // 2]
              for code, found in runs.items()}
    rows: list[Row] = []
    for code, extra in median.items():
        rates = [f["entries_per_s"] for f in runs[code]]
        rows.append(Row("journal_append_vs_before",
                        {"code": code, "writers": writers, "entry": size},
                        extra["entries_per_s"], "entries/s",
                        limit=median["before"]["entries_per_s"] if code == "now" else None,
                        limit_name=f"before ({ref}, same run)" if code == "now" else None,
                        extra={**extra, "rate_min": min(rates), "rate_max": max(rates)}))
    return rows


def _child(tree: Path, device: Path, *, writers: int, size: int,
           duration_s: float) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-m", "bench.journal_bench", "--child", str(device),
                           str(writers), str(size), str(duration_s)], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"journal bench child failed:\n{done.stderr[-4000:]}")
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def describe() -> dict[str, str]:
    """The machine's load when the suite ended: these are thread hand-over and
    GIL figures, which other processes on the same cores move a lot."""
    one, five, fifteen = os.getloadavg()
    return {"load": f"load average {one:.1f} / {five:.1f} / {fifteen:.1f} (1 / 5 / 15 min) "
                    f"on {os.cpu_count()} CPUs when the suite ended"}


def run(device: Path, *, raw_limit_mb_s: float, duration_s: float,
        before: str | None = None) -> list[Row]:
    rows = []
    for size in SIZES:
        for writers in WRITERS:
            row = journal_appends(device, capacity=CAPACITY_BYTES, writers=writers, size=size,
                                  duration_s=duration_s)
            row.limit, row.limit_name = raw_limit_mb_s, "raw 256KiB O_DIRECT+fdatasync"
            rows.append(row)
    saturation = rows[-1].extra["entries_per_s"]  # 16 KiB at 64 writers
    rows.append(journal_paced(device, capacity=CAPACITY_BYTES, size=SIZES[-1],
                              rate_per_s=saturation / 2, duration_s=duration_s))
    rows.extend(sync_modes(device, duration_s=duration_s))
    rows.extend(cost_breakdown(device))
    if before is not None:
        rows.extend(before_and_now(device, before, duration_s=duration_s))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.journal_bench")
    parser.add_argument("--child", nargs=4, metavar=("DEVICE", "WRITERS", "SIZE", "DURATION_S"),
                        required=True)
    args = parser.parse_args()
    device, writers, size, duration_s = args.child
    row = journal_appends(Path(device), capacity=CAPACITY_BYTES, writers=int(writers),
                          size=int(size), duration_s=float(duration_s))
    figures: dict[str, Any] = dict(row.extra)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
