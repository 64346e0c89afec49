"""What an idle cluster costs (issue 28, item 1): etcd and three nodes on loopback
holding N ledgers (one entry of 100 B each, E = Qw = 3, Qa = 2), then left
alone.  Up to :data:`REAL_MAX` they are created and written over HTTP (and left
open); beyond that, where the creates alone would take hours (about 190 a
second), the nodes are stopped once empty and the same cluster's state for N
closed ledgers is written straight into etcd and their stores
(``tools.seed_ledgers.seed_stopped_cluster``), then they start again on it.
:func:`describe` says which, per N.  Measured over the idle window: each
node's and etcd's CPU (% of one core, from /proc utime + stime) and etcd's
requests per second (its own ``etcd_mvcc_{range,txn,put}_total``); then what
each ledger added to the busiest node's RSS (after the fill less before it,
over N) and how long one node takes from start to ready
(``/api/v1/bookie/is_ready``) when restarted.
The nodes run with production cadences (``AUDIT_INTERVAL`` 5 s,
``MEMBERSHIP_TTL`` 10 s).  Seeded, the figures also give the seeding's time
and the nodes' start on the seeded state, to ready.

``--before REF`` runs the same measurement on the tree at git ref REF as well (the
code before the change, extracted with ``git archive``; this file is copied into
it), in the same run: rows ``code=before`` and ``code=now``.  Each (code, N)
pair is a child process with its own etcd and nodes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, cast

import httpx

from ._harness import Row, tree_at

if TYPE_CHECKING:
    from tools.local_cluster import ClusterNodeProcess, LiveCluster

REPO_ROOT = Path(__file__).resolve().parent.parent
SETTLE_S = 15.0
IDLE_S = 30.0
CONCURRENCY = 32
# Above this many ledgers they are seeded, not created.
REAL_MAX = 100_000
PAYLOAD = b"x" * 100
# A node's start on a million seeded ledgers reads them all from its stores.
START_TIMEOUT_S = 1800.0
CREATED = "created over HTTP, left open"
SEEDED = "seeded (tools.seed_ledgers), closed"

# How the ledgers of each N were made, for the report (see describe).
_summary: dict[str, str] = {}


class IdleFigures(TypedDict):
    node_cpu: list[float]
    etcd_cpu: float
    etcd_requests_per_s: float
    create_s: float   # the fill: the creates, or the seeding and the start after it
    rss_per_ledger_bytes: float
    restart_s: float
    how: str          # CREATED or SEEDED
    seed_s: float     # seeded: writing etcd and the stores (0 when created)
    start_s: float    # seeded: the nodes' start on the seeded state, to ready
    load_s: float     # then until every node's metadata cache held every ledger


def run(ledger_counts: tuple[int, ...], *, before: str | None = None) -> list[Row]:
    rows: list[Row] = []
    trees = [("now", REPO_ROOT)]
    scratch = Path(tempfile.mkdtemp(prefix="ledgerd-idle-"))
    try:
        if before is not None:
            # Today's harness too: it moved from bench/ to tools/ since some befores.
            trees.insert(0, ("before", tree_at(
                before, scratch / "before",
                todays=("bench/idle_bench.py", "tools/local_cluster.py",
                        "tools/local_server.py", "tools/local_etcd.py",
                        "tools/seed_ledgers.py"))))
        for ledgers in ledger_counts:
            earlier: dict[str, float] = {}
            for code, tree in trees:
                found = _child(tree, ledgers, scratch / f"{code}-{ledgers}")
                _summary[f"ledgers {ledgers:,} ({code})"] = found["how"]
                params = {"ledgers": ledgers, "code": code}
                nodes = found["node_cpu"]
                figures = {"cluster_idle_node_cpu": (max(nodes), "% of a core"),
                           "cluster_idle_etcd_cpu": (found["etcd_cpu"], "% of a core"),
                           "cluster_idle_etcd_requests": (found["etcd_requests_per_s"],
                                                          "requests/s"),
                           "cluster_rss_per_ledger": (found["rss_per_ledger_bytes"],
                                                      "bytes"),
                           "cluster_restart_to_ready": (found["restart_s"], "s")}
                for name, (value, unit) in figures.items():
                    # Next to the code before the change, measured in the same run.
                    before_value = earlier.get(name) if code == "now" else None
                    rows.append(Row(name, params, value, unit, limit=before_value,
                                    limit_name=None if before_value is None
                                    else "before (same run)",
                                    extra={"mean_node_cpu": sum(nodes) / len(nodes),
                                           "create_s": found["create_s"],
                                           "seed_s": found["seed_s"],
                                           "start_s": found["start_s"],
                                           "load_s": found.get("load_s", 0.0)}))
                    earlier[name] = value
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return rows + marginal_rows(rows)


def describe() -> dict[str, str]:
    """How the ledgers of each N (and code) measured so far were made."""
    return dict(_summary)


def marginal_rows(rows: list[Row]) -> list[Row]:
    """What each ledger past the smallest N adds to a node's RSS, per code: the
    figure at a million ledgers, where the start-up and warm-up costs that the
    per-ledger averages carry are spread to nothing.  Next to the code before."""
    totals: dict[str, dict[int, float]] = {}
    for row in rows:
        if row.name == "cluster_rss_per_ledger":
            ledgers = int(row.params["ledgers"])
            totals.setdefault(str(row.params["code"]), {})[ledgers] = row.value * ledgers
    found: list[Row] = []
    before: float | None = None
    for code in ("before", "now"):
        by_n = totals.get(code, {})
        if len(by_n) < 2:
            continue
        low, high = min(by_n), max(by_n)
        value = (by_n[high] - by_n[low]) / (high - low)
        limit = before if code == "now" else None
        found.append(Row("cluster_rss_per_ledger_marginal",
                         {"from": low, "ledgers": high, "code": code}, value, "bytes",
                         limit=limit, limit_name=None if limit is None
                         else "before (same run)"))
        before = value
    return found


def _child(tree: Path, ledgers: int, work: Path) -> IdleFigures:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-m", "bench.idle_bench", "--child",
                           str(ledgers), str(work)], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"idle bench child failed:\n{done.stderr[-4000:]}")
    return cast(IdleFigures, json.loads(done.stdout.strip().splitlines()[-1]))


# --- the child: one tree, one N -----------------------------------------------------


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _etcd_requests(endpoint: str) -> int:
    text = httpx.get(f"{endpoint}/metrics", timeout=10).text
    return sum(int(float(v)) for v in re.findall(
        r"^etcd_mvcc_(?:range|txn|put)_total (\S+)$", text, re.M))


async def _fill(urls: list[str], ledgers: int) -> None:
    limit = asyncio.Semaphore(CONCURRENCY)

    async def one(client: httpx.AsyncClient, i: int) -> None:
        url = urls[i % len(urls)]
        async with limit:
            for _ in range(100):
                created = await client.post(f"{url}/api/v1/ledgers",
                                            json={"password": "pw"})
                if created.status_code == 201:
                    break
                await asyncio.sleep(0.1)  # a create refused under load: retry
            created.raise_for_status()
            lid = created.json()["ledger_id"]
            added = await client.post(f"{url}/api/v1/ledgers/{lid}/entries",
                                      content=PAYLOAD,
                                      headers={"X-Ledger-Password": "pw"})
            added.raise_for_status()

    async with httpx.AsyncClient(timeout=120) as client:
        await asyncio.gather(*(one(client, i) for i in range(ledgers)))


def _measure(ledgers: int, work: Path) -> IdleFigures:
    from tools.local_cluster import LiveCluster
    from tools.local_etcd import LocalEtcd

    settings = {"AUDIT_INTERVAL": "5", "MEMBERSHIP_TTL": "10", "REREPLICATION_DELAY": "60",
                "MAX_LEDGERS": str(max(ledgers * 2, 100_000))}
    with LocalEtcd(work / "etcd") as etcd, \
            LiveCluster(work / "c", etcd.metadata_url("idle"), 3, settings=settings) as cluster:
        urls = [n.url for n in cluster.nodes]
        empty_rss = max(n.rss_bytes() for n in cluster.nodes)
        started = time.monotonic()
        seed_s = start_s = 0.0
        if ledgers <= REAL_MAX:
            asyncio.run(_fill(urls, ledgers))
        else:
            seed_s, start_s = _seed(cluster, ledgers)
        create_s = time.monotonic() - started
        load_s = _wait_loaded(cluster)
        # Let the creates' last LACs (or the seeded start's first rounds), audits
        # and sweeps pass.
        time.sleep(SETTLE_S)
        pids = [n.process.pid for n in cluster.nodes if n.process is not None]
        process = etcd._process
        assert process is not None
        etcd_pid = process.pid  # the old tree's LocalEtcd names no pid
        cpu0 = [_cpu_s(p) for p in pids]
        etcd0, requests0 = _cpu_s(etcd_pid), _etcd_requests(etcd.endpoint)
        time.sleep(IDLE_S)  # the idle window measured
        node_cpu = [100 * (_cpu_s(p) - c) / IDLE_S for p, c in zip(pids, cpu0, strict=True)]
        etcd_cpu = 100 * (_cpu_s(etcd_pid) - etcd0) / IDLE_S
        requests = (_etcd_requests(etcd.endpoint) - requests0) / IDLE_S
        # Each node holds a replica of every ledger (E = 3 of 3) and caches every
        # ledger's metadata; a third of them it writes.
        rss = max(n.rss_bytes() for n in cluster.nodes) - empty_rss
        restarted = cluster.nodes[0]
        restarted.stop()
        started = time.monotonic()
        restarted.start(timeout_s=START_TIMEOUT_S)
        restart_s = time.monotonic() - started
        return {"node_cpu": node_cpu, "etcd_cpu": etcd_cpu, "etcd_requests_per_s": requests,
                "create_s": create_s, "rss_per_ledger_bytes": rss / ledgers,
                "restart_s": restart_s, "how": CREATED if ledgers <= REAL_MAX else SEEDED,
                "seed_s": seed_s, "start_s": start_s, "load_s": load_s}


def _wait_loaded(cluster: LiveCluster) -> float:
    """Seconds until every node's metadata cache holds every ledger (it loads after
    the node is ready; the idle window must not measure the load).  Code that
    does not report it (an older tree) counts as loaded."""
    started = time.monotonic()
    deadline = started + START_TIMEOUT_S
    for node in cluster.nodes:
        while node.metrics().get("ledgerd_cluster_metadata_synced", 1.0) < 1.0:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{node.bookie_id} did not load the metadata")
            time.sleep(1.0)  # polling another process
    # Then the auditor's first full audit (once per start and per membership
    # change, every AUDIT_FULL_INTERVAL after): a one-off cost, not an idle one.
    while not any(_audited(node) for node in cluster.nodes):
        if time.monotonic() > deadline:
            raise RuntimeError("no full audit of every ledger")
        time.sleep(1.0)  # polling other processes
    return time.monotonic() - started


def _audited(node: ClusterNodeProcess) -> bool:
    """Whether ``node`` is the auditor and has audited the ledgers once since it
    loaded them (code that does not report it counts as done)."""
    metrics = node.metrics()
    if "ledgerd_cluster_is_auditor" not in metrics:
        return True
    return metrics["ledgerd_cluster_is_auditor"] == 1.0 \
        and metrics.get("ledgerd_cluster_ledgers_audited_total", 0.0) >= metrics.get(
            "ledgerd_bookie_replica_count", 0.0)


def _seed(cluster: LiveCluster, ledgers: int) -> tuple[float, float]:
    """Stop the (empty, started once) nodes, seed ``ledgers`` closed ledgers into etcd
    and their stores, start them again: (seconds seeding, seconds to ready)."""
    from tools.seed_ledgers import seed_stopped_cluster

    cluster.stop()
    seeded = seed_stopped_cluster(cluster.metadata_url, cluster.nodes, ledgers,
                                  payload=PAYLOAD, password="pw")
    started = time.monotonic()
    cluster.start(timeout_s=START_TIMEOUT_S)
    return seeded.metadata_s + seeded.replicas_s, time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.idle_bench")
    parser.add_argument("--child", nargs=2, metavar=("LEDGERS", "WORK"))
    parser.add_argument("--ledgers", type=int, nargs="+", default=[1000, 10_000])
    parser.add_argument("--before", help="git ref of the code to compare with")
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_measure(int(args.child[0]), Path(args.child[1]))))
        return 0
    for row in run(tuple(args.ledgers), before=args.before):
        print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
