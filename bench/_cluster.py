"""Several ``ledgerd serve`` nodes in cluster mode on loopback, on one etcd: what the
cluster tests, the cluster benchmarks and ``make cluster`` start.

Each node has its own data directory and journal, a fixed port kept across
restarts, and the same ``CLUSTER_TOKEN`` and ``METADATA_URL`` scope.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx

from bench._server import ServerProcess

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
