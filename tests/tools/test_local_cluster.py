"""tools.local_cluster (``make cluster``): etcd and three nodes in cluster mode come up
on consecutive ports, replicate a ledger, and stop cleanly on SIGINT."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from tools.local_s3 import free_port

REPO = Path(__file__).resolve().parents[2]


def test_three_nodes_come_up_replicate_and_stop(tmp_path: Path) -> None:
    first = free_port()
    while any(_busy(first + i) for i in range(3)):
        first = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGERD_")}
    proc = subprocess.Popen([sys.executable, "-m", "tools.local_cluster", "run", "--dir",
                             str(tmp_path), "--first-port", str(first)], cwd=REPO,
                            env={**env, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if "Ctrl-C" in line:
                break
        else:
            raise AssertionError("".join(lines))
        urls = [f"http://127.0.0.1:{first + i}" for i in range(3)]
        assert all(u in "".join(lines) for u in urls)
        made = httpx.post(f"{urls[0]}/api/v1/ledgers", json={}, timeout=30)
        assert made.status_code == 201, made.text
        lid = made.json()["ledger_id"]
        assert httpx.post(f"{urls[1]}/api/v1/ledgers/{lid}/entries", content=b"hi",
                          timeout=30).status_code == 201
        assert httpx.get(f"{urls[2]}/api/v1/ledgers/{lid}/entries/0", timeout=30).content == b"hi"
        nodes = httpx.get(f"{urls[2]}/api/v1/cluster", timeout=30).json()["nodes"]
        assert [n["bookie_id"] for n in nodes] == ["node1", "node2", "node3"]
        assert (tmp_path / "token").stat().st_mode & 0o077 == 0
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(120) == 0
    for i in range(3):
        assert not _busy(first + i)


def _busy(port: int) -> bool:
    try:
        httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
    except httpx.TransportError:
        return False
    return True
