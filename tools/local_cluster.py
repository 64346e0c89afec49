"""The cluster quick start (``make cluster``): a real etcd and three ``ledgerd serve``
nodes in cluster mode on loopback, ports 8081-8083, each with its own data
directory and journal under one directory::

    DIR/etcd/          the etcd member (tools.local_etcd)
    DIR/node1/ …       each node's data dir (entry logs, index, journal.dev)
    DIR/node1.log …    each node's log
    DIR/token          the CLUSTER_TOKEN of this cluster (made on first use)
    DIR/pki/           with --tls: the CA (cluster-ca.pem) clients verify against,
                       and the certificate every node serves (made at each start)

Command line::

    python -m tools.local_cluster run --dir DIR [--nodes 3] [--first-port 8081] [--tls]

With ``--tls`` the nodes serve HTTPS and WSS and call each other over HTTPS
verified against the cluster's CA (TLS_CERT_FILE, TLS_KEY_FILE, TLS_CA_FILE;
docs/cluster.md); etcd stays plain HTTP on loopback.

It runs in the foreground until interrupted, then stops the nodes and etcd; data
persists across runs.  S3 offload is on when the environment names a bucket
(``LEDGERD_S3_BUCKET``, ``LEDGERD_S3_ENDPOINT_URL`` and the AWS keys, as the
Makefile sets them from ``tools.local_s3``).  Exit codes: 0 ok, 1 failed to
start, 2 etcd not installed.

The process harness under it, :class:`LiveCluster` (several nodes on loopback on
one etcd, each a :class:`ClusterNodeProcess`), is also what the cluster tests, the
cluster benchmarks and the partition suite start; ``NODE_SETTINGS`` and ``TOKEN``
are their small defaults, ``QUICK_START_SETTINGS`` the quick start's.  Each node
has its own data directory and journal, a fixed port kept across restarts, and the
same ``CLUSTER_TOKEN`` and ``METADATA_URL`` scope.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from tools.local_etcd import LocalEtcd, LocalEtcdError, etcd_available
from tools.local_pki import make_pki
from tools.local_server import ServerProcess

TOKEN = "cluster-test-token"
# Small enough that flushes and checkpoints happen within a test.
NODE_SETTINGS: dict[str, Any] = {
    "JOURNAL_CAPACITY": "32MiB",
    "WRITE_CACHE_SIZE": "8MiB",
    "READ_CACHE_SIZE": "4MiB",
    "ENTRY_LOG_SIZE_LIMIT": "8MiB",
    "FLUSH_INTERVAL": "1",
    "ACCESS_LOG": "false",
    "MEMBERSHIP_TTL": "2",
    "REREPLICATION_DELAY": "2",
    "AUDIT_INTERVAL": "1",
}


class ClusterNodeProcess(ServerProcess):
    def __init__(self, root: Path, bookie_id: str, metadata_url: str, *,
                 token: str = TOKEN, settings: dict[str, Any] | None = None,
                 extra_env: dict[str, str] | None = None, port: int | None = None,
                 ca_file: Path | None = None) -> None:
        self.bookie_id = bookie_id
        self.data_dir = root / bookie_id
        values = {**NODE_SETTINGS, **(settings or {}), "DATA_DIR": str(self.data_dir),
                  "BOOKIE_ID": bookie_id, "METADATA_URL": metadata_url, "CLUSTER_TOKEN": token}
        root.mkdir(parents=True, exist_ok=True)
        super().__init__({k: str(v) for k, v in values.items()},
                         log_path=root / f"{bookie_id}.log", extra_env=extra_env, port=port,
                         ca_file=ca_file)


class LiveCluster:
    """``size`` nodes ``n0 … n{size-1}`` under ``root`` on the etcd at ``metadata_url``.
    With TLS_CERT_FILE in ``settings`` they serve HTTPS, which this harness verifies
    against ``ca_file``."""

    def __init__(self, root: Path, metadata_url: str, size: int, *,
                 settings: dict[str, Any] | None = None,
                 extra_env: dict[str, str] | None = None, token: str = TOKEN,
                 first_port: int | None = None, names: list[str] | None = None,
                 ca_file: Path | None = None) -> None:
        self.root = root
        self.metadata_url = metadata_url
        self._settings, self._extra_env, self._token = settings, extra_env, token
        self._ca_file = ca_file
        names = names or [f"n{i}" for i in range(size)]
        self.nodes = [ClusterNodeProcess(
            root, names[i], metadata_url, settings=settings, extra_env=extra_env,
            token=token, port=None if first_port is None else first_port + i, ca_file=ca_file)
            for i in range(size)]

    def __enter__(self) -> LiveCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout_s: float = 120.0) -> None:
        for node in self.nodes:
            node.spawn()
        for node in self.nodes:
            node.wait_ready(timeout_s)
        self.wait_members(len(self.nodes))

    def add_node(self, bookie_id: str | None = None, *,
                 settings: dict[str, Any] | None = None) -> ClusterNodeProcess:
        """Start one more node with the same settings (``settings`` overrides some);
        it joins the cluster."""
        node = ClusterNodeProcess(self.root, bookie_id or f"n{len(self.nodes)}",
                                  self.metadata_url, settings={**(self._settings or {}),
                                                               **(settings or {})},
                                  extra_env=self._extra_env, token=self._token,
                                  ca_file=self._ca_file)
        node.start()
        self.nodes.append(node)
        self.wait_members(len(self.running))
        return node

    def stop(self) -> None:
        for node in self.nodes:
            node.resume()
        for node in self.nodes:
            node.stop()

    def node(self, bookie_id: str) -> ClusterNodeProcess:
        return next(n for n in self.nodes if n.bookie_id == bookie_id)

    @property
    def running(self) -> list[ClusterNodeProcess]:
        return [n for n in self.nodes if n.running]

    def members(self, via: ClusterNodeProcess | None = None) -> set[str]:
        node = via or self.running[0]
        doc = httpx.get(f"{node.url}/api/v1/cluster", timeout=10, verify=node.verify).json()
        return {n["bookie_id"] for n in doc["nodes"]}

    def wait_members(self, count: int, timeout_s: float = 60.0) -> None:
        """Until every running node sees ``count`` members."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if all(len(self.members(n)) == count for n in self.running):
                    return
            except (httpx.HTTPError, ValueError, KeyError):
                pass
            time.sleep(0.1)  # polling other processes' views
        raise TimeoutError(f"the cluster did not reach {count} members")


# Sized for a laptop: three nodes share it.
QUICK_START_SETTINGS = {
    "JOURNAL_CAPACITY": "256MiB",
    "WRITE_CACHE_SIZE": "64MiB",
    "READ_CACHE_SIZE": "32MiB",
    "MEMBERSHIP_TTL": "10",
    "REREPLICATION_DELAY": "60",
    "AUDIT_INTERVAL": "5",
    "ACCESS_LOG": "false",
    "FLUSH_INTERVAL": "10",
}
PASSED_ON = ("S3_BUCKET", "S3_ENDPOINT_URL", "S3_PREFIX", "S3_REGION", "OFFLOAD_AFTER_CLOSE",
             "ADMIN_TOKEN")


def token_of(directory: Path) -> str:
    path = directory / "token"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(24))
        path.chmod(0o600)
    return path.read_text().strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.local_cluster")
    parser.add_argument("command", choices=("run",))
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--first-port", type=int, default=8081)
    parser.add_argument("--tls", action="store_true", help="HTTPS between clients and nodes "
                        "and node to node, with a CA made under DIR/pki")
    args = parser.parse_args(argv)
    if etcd_available() is not None:
        print(etcd_available(), file=sys.stderr)
        return 2
    args.dir.mkdir(parents=True, exist_ok=True)
    settings = dict(QUICK_START_SETTINGS)
    settings.update({k: os.environ[f"LEDGERD_{k}"] for k in PASSED_ON
                     if f"LEDGERD_{k}" in os.environ})
    extra = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
    ca_file = None
    if args.tls:
        pki = make_pki(args.dir / "pki", "cluster")
        ca_file = pki.ca
        settings.update({"TLS_CERT_FILE": str(pki.cert), "TLS_KEY_FILE": str(pki.key),
                         "TLS_CA_FILE": str(pki.ca)})
    etcd = LocalEtcd(args.dir / "etcd")
    try:
        etcd.start()
    except LocalEtcdError as exc:
        print(f"local cluster: {exc}", file=sys.stderr)
        return 1
    cluster = LiveCluster(args.dir, etcd.metadata_url("ledgerd"), args.nodes,
                          settings=settings, extra_env=extra, token=token_of(args.dir),
                          first_port=args.first_port,
                          names=[f"node{i}" for i in range(1, args.nodes + 1)],
                          ca_file=ca_file)
    stop = {"now": False}

    def on_signal(signum: int, frame: object) -> None:
        stop["now"] = True
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        cluster.start()
        s3 = f"on (bucket {settings['S3_BUCKET']})" if "S3_BUCKET" in settings else "off"
        print(f"ledgerd cluster: etcd {etcd.endpoint}, S3 offload {s3}")
        if ca_file is not None:
            print(f"  TLS: clients verify against {ca_file}")
        for node in cluster.nodes:
            print(f"  {node.bookie_id}: {node.url}  (log {node.log_path})")
        print("Ctrl-C stops it; data stays in", args.dir, flush=True)
        while not stop["now"]:
            time.sleep(0.2)
    except (RuntimeError, TimeoutError) as exc:
        print(f"local cluster failed to start: {exc}", file=sys.stderr)
        return 1
    finally:
        cluster.stop()
        etcd.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
