"""tools.local_etcd: the command line starts a real etcd and stops it again."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx


def test_start_prints_exports_and_stop_ends_it(tmp_path: Path) -> None:
    started = subprocess.run([sys.executable, "-m", "tools.local_etcd", "start", "--dir",
                              str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert started.returncode == 0, started.stderr
    exports = dict(line.removeprefix("export ").split("=", 1)
                   for line in started.stdout.splitlines())
    endpoint = exports["LEDGERD_ETCD_ENDPOINT"]
    assert exports["LEDGERD_METADATA_URL"].startswith("etcd://127.0.0.1:")
    try:
        assert httpx.get(f"{endpoint}/health", timeout=5).json()["health"] == "true"
    finally:
        stopped = subprocess.run([sys.executable, "-m", "tools.local_etcd", "stop", "--dir",
                                  str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert stopped.returncode == 0, stopped.stderr
    assert not (tmp_path / "state.json").exists()
    try:
        httpx.get(f"{endpoint}/health", timeout=2)
        raise AssertionError("etcd still answers after stop")
    except httpx.TransportError:
        pass
