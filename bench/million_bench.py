"""What a node's costs do as the ledgers it holds grow, 1,000 to 1,000,000, in
both modes (issue 28's table), with each figure's growth exponent: the slope of
log(figure) against log(ledgers) from the smallest count to the largest (0:
flat; 1: proportional).

Standalone, for each count N:

- ``ledgerd serve`` (a child process) is loaded with N ledgers of 1 to 3 entries of
  100 B each, created, written and closed over HTTP by 32 concurrent clients
  (real ledgers, up to :data:`REAL_MAX`; beyond that the same records are
  written straight into its stores by ``tools.seed_ledgers``: at 2,000 creates/s
  a million would take 25 minutes of creates, and the state on disk is what
  those creates, adds, closes and a checkpoint leave);
- its RSS added per ledger after the load and after a restart, the restart's
  time to ready, and its CPU over an idle window;
- the engine's own figures with N held (``scaling_bench.held_point``): an idle
  checkpoint, the worst add across checkpoints, an idle GC run, and 1,000
  deletions committed with a full read cache.

Cluster mode: ``idle_bench`` (3 nodes and etcd on loopback, N ledgers
created over HTTP, or seeded past its ``REAL_MAX``): CPU of the busiest node
and of etcd over an idle window, RSS added per ledger, restart to ready.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import os
import random
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

from app.settings import ServiceSettings
from tools.local_server import ServerProcess
from tools.seed_ledgers import seed_idle_ledgers

from . import idle_bench, scaling_bench
from ._harness import Row

REAL_MAX = 100_000
CONCURRENCY = 32
IDLE_S = 10.0
ENTRY = b"e" * 100

_summary: dict[str, str] = {}


def run(standalone_counts: Sequence[int], cluster_counts: Sequence[int]) -> list[Row]:
    rows: list[Row] = []
    for count in standalone_counts:
        rows += _served_point(count)
        rows += scaling_bench.held_point(count)
    rows += idle_bench.run(tuple(cluster_counts))
    rows += marginal_rss(rows)
    rows += growth_exponents(rows)
    return rows


def describe() -> dict[str, str]:
    # The cluster's counts too: idle_bench seeds them past its own REAL_MAX.
    cluster = {f"cluster, {k}": v for k, v in idle_bench.describe().items()}
    return {**_summary, **cluster}


def growth_exponents(rows: Sequence[Row]) -> list[Row]:
    """One row per figure measured at two counts or more: the slope of
    log(value) over log(ledgers) between the smallest and the largest count."""
    by_name: dict[str, dict[int, float]] = {}
    for row in rows:
        ledgers = row.params.get("ledgers")
        if isinstance(ledgers, int) and row.params.get("code", "now") == "now":
            by_name.setdefault(row.name, {})[ledgers] = row.value
    found: list[Row] = []
    for name, points in by_name.items():
        low, high = min(points), max(points)
        if low == high or points[low] <= 0 or points[high] <= 0:
            continue
        slope = math.log(points[high] / points[low]) / math.log(high / low)
        found.append(Row("growth_exponent", {"figure": name, "from": low, "to": high},
                         round(slope, 3), "exponent",
                         extra={"at_smallest": points[low], "at_largest": points[high]}))
    return found


_RSS_FIGURES = ("standalone_rss_per_ledger_after_load", "standalone_rss_per_ledger_settled",
                "standalone_rss_per_ledger_after_restart", "cluster_rss_per_ledger")


def marginal_rss(rows: Sequence[Row]) -> list[Row]:
    """RSS per ledger as the slope between consecutive counts: what one more
    ledger costs, without the process's fixed growth under load (allocator
    arenas, buffers first touched) that a per-ledger average at small counts
    carries."""
    found: list[Row] = []
    for name in _RSS_FIGURES:
        points = sorted((row.params["ledgers"], row.value * row.params["ledgers"])
                        for row in rows if row.name == name
                        and row.params.get("code", "now") == "now")
        for (low, low_bytes), (high, high_bytes) in itertools.pairwise(points):
            found.append(Row(f"{name}_marginal", {"ledgers": high, "from": low},
                             (high_bytes - low_bytes) / (high - low), "bytes"))
    return found


def _served_point(count: int) -> list[Row]:
    work = Path(tempfile.mkdtemp(prefix="ledgerd-million-"))
    settings = {"DATA_DIR": str(work / "data"), "MAX_LEDGERS": str(count + 1000),
                "JOURNAL_CAPACITY": "256MiB"}
    log = os.environ.get("LEDGERD_BENCH_SERVER_LOG")  # where the server logs, if set
    server = ServerProcess(settings, log_path=Path(log) if log else None)
    try:
        server.start(120)
        empty = server.rss_bytes()
        started = time.monotonic()
        if count <= REAL_MAX:
            asyncio.run(_load(server.url, count))
            how = "created over HTTP"
        else:
            server.stop()
            engine = ServiceSettings.load(
                environ={f"LEDGERD_{k}": v for k, v in settings.items()})._engine()
            seed_idle_ledgers(engine, count, payload=ENTRY)
            server.start(600)
            how = "seeded into the stores (tools.seed_ledgers)"
        load_s = time.monotonic() - started
        loaded = server.rss_bytes()
        idle_cpu = _idle_cpu(server)
        settled = _settled_rss(server)
        server.stop()
        started = time.monotonic()
        server.start(600)
        restart_s = time.monotonic() - started
        restarted = server.rss_bytes()
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    _summary[f"ledgers {count:,}"] = how
    params = {"ledgers": count}
    return [
        Row("standalone_rss_per_ledger_after_load", params, (loaded - empty) / count, "bytes",
            extra={"load_s": load_s}),
        Row("standalone_rss_per_ledger_settled", params, (settled - empty) / count, "bytes"),
        Row("standalone_rss_per_ledger_after_restart", params, (restarted - empty) / count,
            "bytes"),
        Row("standalone_restart_to_ready", params, restart_s, "s"),
        Row("standalone_idle_cpu", params, idle_cpu, "% of a core"),
    ]


def _settled_rss(server: ServerProcess) -> int:
    """The RSS once the server has gone idle after the load: two background
    checkpoints after it, the second finding nothing new (the bookie gives the
    heap freed in the burst back then)."""
    def checkpoints() -> float:
        return server.metrics()["ledgerd_bookie_checkpoints_total"]
    target = checkpoints() + 2
    deadline = time.monotonic() + 120
    while checkpoints() < target:
        if time.monotonic() > deadline:
            raise RuntimeError("no checkpoint in 120 s")
        time.sleep(0.5)  # polling another process
    return server.rss_bytes()


def _idle_cpu(server: ServerProcess) -> float:
    assert server.process is not None
    pid = server.process.pid
    before = idle_bench._cpu_s(pid)
    time.sleep(IDLE_S)  # the idle window measured
    return 100 * (idle_bench._cpu_s(pid) - before) / IDLE_S


async def _load(url: str, count: int) -> None:
    """``count`` ledgers, each created, given 1 to 3 entries and closed."""
    ids = iter(range(count))
    rng = random.Random(count)

    async def post(client: httpx.AsyncClient, path: str, **kwargs: object) -> httpx.Response:
        # A keep-alive connection the server closes as the request goes out is
        # retried (adds carry their entry id, so a retry adds nothing twice).
        for attempt in range(5):
            try:
                answer = await client.post(f"{url}{path}", **kwargs)  # type: ignore[arg-type]
                return answer.raise_for_status()
            except httpx.TransportError:
                if attempt == 4:
                    raise
        raise AssertionError("unreachable")

    async def client_loop(client: httpx.AsyncClient) -> None:
        auth = {"X-Ledger-Password": "pw"}
        for _ in ids:
            created = await post(client, "/api/v1/ledgers", json={"password": "pw"})
            lid = created.json()["ledger_id"]
            for entry_id in range(rng.randint(1, 3)):
                await post(client, f"/api/v1/ledgers/{lid}/entries?entry_id={entry_id}",
                           content=ENTRY, headers=auth)
            await post(client, f"/api/v1/ledgers/{lid}/close", headers=auth)

    limits = httpx.Limits(max_connections=CONCURRENCY)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        await asyncio.gather(*(client_loop(client) for _ in range(CONCURRENCY)))


def main() -> None:
    import sys

    counts = [int(a) for a in sys.argv[1:]] or [1000, 10_000]
    for row in run(counts, ()):
        print(row.name, row.params, f"{row.value:.3f} {row.unit}", row.extra)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
