"""tools.local_cluster (``make cluster``): etcd and three nodes in cluster mode come up
on consecutive ports, replicate a ledger, and stop cleanly on SIGINT; with
``--tls`` (``make cluster CLUSTER_TLS=1``) the same over HTTPS, verified against
the CA it made, and nothing served in plain HTTP."""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tools.local_s3 import port_is_free

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
def test_three_nodes_come_up_replicate_and_stop(tmp_path: Path, tls: bool) -> None:
    scheme = "https" if tls else "http"
    ca = tmp_path / "pki" / "cluster-ca.pem"
    with _local_cluster(tmp_path, tls) as (first, lines):
        urls = [f"{scheme}://127.0.0.1:{first + i}" for i in range(3)]
        assert all(u in "".join(lines) for u in urls)
        verify: ssl.SSLContext | bool = (ssl.create_default_context(cafile=str(ca)) if tls
                                         else True)
        with httpx.Client(verify=verify, timeout=30) as client:
            made = client.post(f"{urls[0]}/api/v1/ledgers", json={})
            assert made.status_code == 201, made.text
            lid = made.json()["ledger_id"]
            # Forwarded to the writer and replicated: node to node over the same scheme.
            assert client.post(f"{urls[1]}/api/v1/ledgers/{lid}/entries",
                               content=b"hi").status_code == 201
            assert client.get(f"{urls[2]}/api/v1/ledgers/{lid}/entries/0").content == b"hi"
            nodes = client.get(f"{urls[2]}/api/v1/cluster").json()["nodes"]
        assert [n["bookie_id"] for n in nodes] == ["node1", "node2", "node3"]
        assert (tmp_path / "token").stat().st_mode & 0o077 == 0
        if tls:
            assert str(ca) in "".join(lines)
            with pytest.raises(httpx.TransportError):  # no plain HTTP beside HTTPS
                httpx.get(f"http://127.0.0.1:{first}/api/v1/cluster", timeout=10)
    for i in range(3):
        assert not _busy(first + i)


def test_the_quick_start_commands_of_the_docs_run_as_written(tmp_path: Path) -> None:
    """docs/cluster.md §13's quick start, pasted after ``make cluster``: every command
    of its block runs as written (only the ports 8081-8083 moved to free ones), each
    with curl made strict (``--fail-with-body``: an HTTP error fails the command)."""
    commands = quick_start_commands((REPO / "docs" / "cluster.md").read_text())
    assert len(commands) >= 4 and all(c.startswith("curl ") for c in commands), commands
    with _local_cluster(tmp_path, tls=False) as (first, _lines):
        outputs = []
        for command in commands:
            moved = re.sub(r"localhost:808([1-9])",
                           lambda m: f"localhost:{first + int(m.group(1)) - 1}", command)
            ran = subprocess.run(
                ["bash", "-c", 'curl() { command curl --fail-with-body "$@"; }\n' + moved],
                capture_output=True, text=True, timeout=60, check=False)
            assert ran.returncode == 0, f"{command}\n{ran.stdout}{ran.stderr}"
            outputs.append(ran.stdout)
    created, added, read, cluster = outputs[:4]
    assert json.loads(created)["ledger_id"] == 1024  # the first id of the first block
    assert json.loads(added)["entry_id"] == 0
    assert read == "hello"
    assert len(json.loads(cluster)["nodes"]) == 3


def quick_start_commands(doc: str) -> list[str]:
    """The shell commands of the first ``sh`` block after "**Quick start.**",
    backslash-continued lines joined."""
    section = doc[doc.index("**Quick start.**"):]
    block = section[section.index("```sh\n") + 6:]
    block = block[:block.index("```")]
    return [c.strip() for c in block.replace("\\\n", " ").split("\n") if c.strip()]


@contextlib.contextmanager
def _local_cluster(directory: Path, tls: bool) -> Iterator[tuple[int, list[str]]]:
    """``python -m tools.local_cluster run`` on free ports until it says it is up;
    stopped with SIGINT (exit status 0) on the way out."""
    first = _consecutive_free_ports(3)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGERD_")}
    proc = subprocess.Popen([sys.executable, "-m", "tools.local_cluster", "run", "--dir",
                             str(directory), "--first-port", str(first),
                             *(["--tls"] if tls else [])], cwd=REPO,
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
        yield first, lines
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(120) == 0


def _consecutive_free_ports(count: int) -> int:
    """The first of ``count`` consecutive free ports, below the kernel's ephemeral
    range: a port from there (``free_port``) can be taken by another test's
    outgoing connection between this check and the nodes' binds, as a CI run saw
    (EADDRINUSE); a port below it is only ever taken by an explicit bind."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        ephemeral_low = int(f.read().split()[0])
    while True:
        first = random.randrange(10000, ephemeral_low - count)
        if all(port_is_free(first + i) for i in range(count)):
            return first


def _busy(port: int) -> bool:
    """Something listens on the port (plain HTTP or TLS alike)."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True
