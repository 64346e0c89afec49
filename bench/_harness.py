"""Benchmark plumbing: timing, percentiles, a scratch device, tables and JSON.

Every benchmark reports its figure next to a limit measured in the same run,
as a ratio; results go to ``bench/results/<name>.json`` and to stdout.
"""

from __future__ import annotations

import json
import mmap
import os
import platform
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"


@dataclass
class Row:
    name: str
    params: dict[str, Any]
    value: float
    unit: str
    limit: float | None = None
    limit_name: str | None = None
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        return self.value / self.limit if self.limit else None


def tree_at(ref: str, into: Path, *, todays: Sequence[str]) -> Path:
    """The repository at commit ``ref``, extracted into ``into`` (a bench's "before"
    code), with today's copy of each file named in ``todays``, paths from the
    repository's root: the bench and the harness it drives (the measurement is
    today's; only the code measured is ``ref``'s)."""
    root = Path(__file__).resolve().parent.parent
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(root), "archive", ref],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    for name in todays:
        shutil.copy(root / name, into / name)
    return into


def percentile(samples: Sequence[float], q: float) -> float:
    if not samples:
        return 0.0
    ordered = sorted(samples)
    idx = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[idx]


def machine() -> dict[str, Any]:
    return {"host": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(),
            "kernel": platform.release(), "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "scratch": scratch_description()}


def scratch_description() -> str:
    """Where scratch devices and directories live, and what the journal runs on."""
    where = os.environ.get("BENCH_DIR") or tempfile.gettempdir()
    # findmnt names the disk and says ext4 where `stat -f` can only say "ext2/ext3".
    mount = subprocess.run(["findmnt", "-n", "-o", "SOURCE,FSTYPE", "--target", where],
                           capture_output=True, text=True, check=False).stdout.split()
    fs = " ".join(mount) if len(mount) == 2 else "?"
    device = ("loop device (losetup --direct-io=on) over a zero-filled file"
              if os.geteuid() == 0 and shutil.which("losetup") else "preallocated file")
    return (f"{where} ({fs}); journal on a {device} there, data dirs beside it "
            "(one disk for both)")


def print_table(title: str, rows: Sequence[Row]) -> None:
    print(f"\n== {title} ==")
    header = f"{'benchmark':<28} {'params':<34} {'value':>12} {'unit':<10} {'ratio':>7} vs"
    print(header)
    print("-" * len(header))
    for r in rows:
        params = " ".join(f"{k}={v}" for k, v in r.params.items())
        ratio = f"{r.ratio:.2f}" if r.ratio is not None else "-"
        extra = " ".join(f"{k}={v:.3g}" for k, v in r.extra.items())
        print(f"{r.name:<28} {params:<34} {r.value:>12.1f} {r.unit:<10} {ratio:>7} "
              f"{r.limit_name or ''} {extra}")


def write_json(name: str, rows: Sequence[Row], command: str,
               notes: dict[str, str] | None = None, results_dir: Path = RESULTS_DIR) -> Path:
    """``bench/results/<name>.json``: the machine, the date, the exact command,
    free-text ``notes`` (e.g. the peer's version and settings) and the rows."""
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / f"{name}.json"
    doc = {"machine": machine(), "command": command, "notes": notes or {},
           "rows": [{**asdict(r), "ratio": r.ratio} for r in rows]}
    path.write_text(json.dumps(doc, indent=2, sort_keys=True))
    return path


@contextmanager
def scratch_device(size_bytes: int) -> Iterator[Path]:
    """A loop device with direct I/O over a file when root, else the plain file;
    the journal and the raw-limit benchmark share it.  Every block is written
    once first: a write into a hole of the backing file allocates blocks, so its
    fdatasync commits file-system metadata too, which a raw partition (or the
    journal's ring after its first lap) never pays; limit and journal alike are
    measured in that steady state."""
    workdir = Path(tempfile.mkdtemp(prefix="ledgerd-bench-", dir=os.environ.get("BENCH_DIR")))
    backing = workdir / "device.img"
    with open(backing, "wb") as f:
        f.truncate(size_bytes)
    loop: str | None = None
    try:
        if os.geteuid() == 0 and shutil.which("losetup"):
            loop = subprocess.run(["losetup", "--direct-io=on", "--find", "--show",
                                   str(backing)], check=True, capture_output=True,
                                  text=True).stdout.strip()
            device = Path(loop)
        else:
            device = backing
        zero_fill(device, size_bytes)
        yield device
    finally:
        if loop:
            subprocess.run(["losetup", "--detach", loop], check=False)
        shutil.rmtree(workdir, ignore_errors=True)


def zero_fill(device: Path, size_bytes: int) -> None:
    """Write zeros over the first ``size_bytes`` (O_DIRECT, 4 MiB at a time), synced."""
    fd = os.open(device, os.O_RDWR | getattr(os, "O_DIRECT", 0))
    buf = mmap.mmap(-1, 4 << 20)
    try:
        for offset in range(0, size_bytes, len(buf)):
            os.pwrite(fd, memoryview(buf)[:min(len(buf), size_bytes - offset)], offset)
        os.fdatasync(fd)
    finally:
        os.close(fd)
        buf.close()


@contextmanager
def scratch_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="ledgerd-bench-", dir=os.environ.get("BENCH_DIR")))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextmanager
def threads_on_cpus(cpus: set[int]) -> Iterator[None]:
    """The calling thread, and every thread it starts meanwhile (they inherit
    its affinity), runs on ``cpus`` only; restored after."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def last_cpu() -> int | None:
    """One CPU this process may use, the last, leaving the others to the rest
    of the machine (None: it has only one)."""
    cpus = os.sched_getaffinity(0)
    return max(cpus) if len(cpus) > 1 else None


def peak_rss_bytes() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
