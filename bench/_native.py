"""Native load generators (redis-benchmark, wrk, Node.js ``ws``) and CPU accounting.

Each generator runs as a child process; its CPU seconds come from
``/proc/self/stat`` (``cutime + cstime``: the CPU of the children this process
waited for, all their threads included), a server's from ``/proc/<pid>/stat``
(``utime + stime``) before and after the point.  Installed by
``scripts/install-bench.sh``.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NODE_DIR = Path(__file__).resolve().parent / "node"
WRK_SCRIPT = Path(__file__).resolve().parent / "wrk" / "post.lua"
_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def _stat_fields(path: str) -> list[str]:
    text = Path(path).read_text()
    return text[text.rindex(")") + 2:].split()  # fields from 3 (state) on


def children_cpu_s() -> float:
    """CPU seconds of this process's waited-for children so far (/proc/self/stat)."""
    fields = _stat_fields("/proc/self/stat")
    return (int(fields[13]) + int(fields[14])) * _TICK_S  # cutime, cstime


def process_cpu_s(pid: int) -> float:
    """CPU seconds a running process has used so far, every thread included."""
    fields = _stat_fields(f"/proc/{pid}/stat")
    return (int(fields[11]) + int(fields[12])) * _TICK_S  # utime, stime


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of a running process and of its live descendants (a server
    whose workers are child processes, e.g. granian's)."""
    total = process_cpu_s(pid)
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # a thread or a child that just exited
            for child in (task / "children").read_text().split():
                total += tree_cpu_s(int(child))
    return total


@dataclass(frozen=True)
class Load:
    """One point of load, as the generator saw it."""

    entries_per_s: float
    ops_per_s: float
    p50_ms: float
    p99_ms: float
    client_cpu_s: float
    duration_s: float
    errors: int = 0

    def extra(self, server_cpu_s: float | None) -> dict[str, float]:
        out = {"entries_per_s": self.entries_per_s, "ops_per_s": self.ops_per_s,
               "p50_ms": self.p50_ms, "p99_ms": self.p99_ms,
               "client_cpu_s": self.client_cpu_s, "seconds": self.duration_s}
        if server_cpu_s is not None:
            out["server_cpu_s"] = server_cpu_s
            entries = self.entries_per_s * self.duration_s
            if entries:  # the server's CPU per entry: what a busy machine distorts least
                out["server_us_per_entry"] = server_cpu_s / entries * 1e6
        if self.errors:
            out["errors"] = self.errors
        return out


def _run(argv: list[str], env: dict[str, str] | None = None,
         timeout_s: float = 600) -> tuple[str, float]:
    """(stdout, CPU seconds) of one generator run."""
    before = children_cpu_s()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout_s,
                          check=False)
    cpu = children_cpu_s() - before
    if done.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed ({done.returncode}): "
                           f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return done.stdout, cpu


def missing_tools() -> list[str]:
    """Generators (or their packages) not installed here."""
    missing = [tool for tool in ("redis-server", "redis-benchmark", "redis-cli", "wrk", "node")
               if shutil.which(tool) is None]
    if not (NODE_DIR / "node_modules" / "ws").is_dir():
        missing.append("bench/node/node_modules/ws (npm ci)")
    return missing


def redis_benchmark(port: int, *, key: str, size: int, clients: int, pipeline: int,
                    requests: int) -> Load:
    """``XADD key * d <size bytes>`` ``requests`` times from ``clients``
    connections, ``pipeline`` commands in flight on each."""
    argv = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", str(clients),
            "-n", str(requests), "-P", str(pipeline), "--csv",
            "XADD", key, "*", "d", "r" * size]
    out, cpu = _run(argv)
    rows = list(csv.DictReader(io.StringIO(out)))
    if not rows:
        raise RuntimeError(f"redis-benchmark printed no result: {out[-500:]}")
    row = rows[-1]
    rps = float(row["rps"])
    return Load(entries_per_s=rps, ops_per_s=rps / pipeline,
                p50_ms=float(row["p50_latency_ms"]), p99_ms=float(row["p99_latency_ms"]),
                client_cpu_s=cpu, duration_s=requests / rps if rps else 0.0)


def redis_cli(port: int, *args: str) -> str:
    return subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(port), *args],
                          capture_output=True, text=True, check=True).stdout


def wrk_post(url: str, *, body: bytes, content_type: str, connections: int,
             duration_s: float, entries_per_request: int) -> Load:
    """wrk POSTing ``body`` from ``connections`` connections (one thread: it is
    far from busy at these rates, and leaves the CPU to the server)."""
    with tempfile.NamedTemporaryFile(prefix="wrk-body-") as body_file:
        body_file.write(body)
        body_file.flush()
        env = {**os.environ, "WRK_BODY": body_file.name, "WRK_CONTENT_TYPE": content_type}
        argv = ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(duration_s))}s",
                "--timeout", "30s", "-s", str(WRK_SCRIPT), url]
        out, cpu = _run(argv, env=env)
    summary = json.loads(next(line for line in reversed(out.splitlines())
                              if line.startswith("{")))
    seconds = summary["duration_us"] / 1e6
    errors = sum(summary[k] for k in summary if k.startswith("errors_"))
    ok = summary["requests"] - summary["errors_status"]
    return Load(entries_per_s=ok * entries_per_request / seconds, ops_per_s=ok / seconds,
                p50_ms=summary["p50_us"] / 1e3, p99_ms=summary["p99_us"] / 1e3,
                client_cpu_s=cpu, duration_s=seconds, errors=errors)


def node_streams(url: str, *, ledgers: list[int], in_flight: int, entries: int,
                 entry_bytes: int, duration_s: float, rate_per_s: float | None = None,
                 path: str | None = None) -> Load:
    """``bench/node/stream_load.mjs``: one append stream per ledger (or, with
    ``path``, as many streams to that route)."""
    config: dict[str, Any] = {
        "url": url.replace("http://", "ws://"), "ledgers": ledgers, "password": "",
        "in_flight": in_flight, "entries": entries, "entry_bytes": entry_bytes,
        "duration_s": duration_s, "rate_per_s": rate_per_s, "path": path}
    out, cpu = _run(["node", str(NODE_DIR / "stream_load.mjs"), json.dumps(config)])
    result = json.loads(out.strip().splitlines()[-1])
    if result.get("errors"):
        raise RuntimeError(f"stream load failed: {result['errors']}")
    seconds = result["duration_s"]
    return Load(entries_per_s=result["acked_entries"] / seconds,
                ops_per_s=result["acked_messages"] / seconds, p50_ms=result["p50_ms"],
                p99_ms=result["p99_ms"], client_cpu_s=cpu, duration_s=seconds)
