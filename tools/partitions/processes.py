"""etcd and the ledgerd nodes, each started inside its own namespace of a
:class:`~tools.partitions.lab.NetLab`.

Nodes run under libfaketime (Debian ``faketime``) so the nemesis can jump their
clocks: ``LD_PRELOAD`` of ``libfaketimeMT.so.1`` with ``FAKETIME_TIMESTAMP_FILE``
naming a per-node file holding the offset (``+0`` at start; the nemesis writes
``+N`` to jump N seconds forward) and ``FAKETIME_CACHE_DURATION=1`` (the file is
read again at most once a second).  libfaketime fakes ``CLOCK_MONOTONIC`` as well as
the wall clock unless ``FAKETIME_DONT_FAKE_MONOTONIC=1`` (not set here), and the
node's leases, add timeouts and every asyncio timer read ``time.monotonic()``
(``node/_cluster_runtime.MonotonicClock``, ``node/_cluster_membership``), so one
jump moves all of them.  etcd is a Go program: Go reads the clock through the
vDSO, not libc, so libfaketime cannot move etcd's clock (its lease TTLs are not
faked).  Jumps go forward only: a backward monotonic clock is something no kernel
does.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tools.local_cluster import NODE_SETTINGS, TOKEN

from .lab import NetLab, call_in

REPO = Path(__file__).resolve().parents[2]
FAKETIME_LIB = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1")
NODE_PORT = 8080
ETCD_PORT = 2379
SCOPE = "partitions"
ADMIN_TOKEN = "partition-lab-admin"


def faketime_missing() -> str | None:
    if not FAKETIME_LIB.exists():
        return f"{FAKETIME_LIB} (Debian libfaketime; scripts/install-partition.sh)"
    return None


class Member:
    """One child process inside a member's namespace."""

    def __init__(self, lab: NetLab, name: str, log_path: Path) -> None:
        self.lab = lab
        self.name = name
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    def _argv(self) -> list[str]:
        raise NotImplementedError

    def _env(self) -> dict[str, str]:
        return dict(os.environ)

    def spawn(self) -> None:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.lab.exec_argv(self.name, self._argv()), cwd=REPO, env=self._env(),
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal(self, signum: int) -> None:
        if self.running:
            assert self.process is not None
            self.process.send_signal(signum)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.kill()
            self.process.wait(10)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGCONT)
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.kill()

    def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s

        def probe() -> bool:
            with httpx.Client(timeout=1.0) as http:
                while time.monotonic() < deadline:
                    if not self.running:
                        return False
                    try:
                        if self._ready(http):
                            return True
                    except httpx.HTTPError:
                        pass
                    time.sleep(0.05)  # polling a child process
            return False
        if not call_in(self.lab.netns("client"), probe, timeout_s + 5):
            tail = self.log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{self.name} not ready in {timeout_s}s:\n{tail}")

    def _ready(self, http: httpx.Client) -> bool:
        raise NotImplementedError


class EtcdMember(Member):
    def __init__(self, lab: NetLab, directory: Path) -> None:
        super().__init__(lab, "etcd", directory / "etcd.log")
        self.directory = directory
        self.endpoint = f"http://{lab.address('etcd')}:{ETCD_PORT}"

    def _argv(self) -> list[str]:
        peer = "http://127.0.0.1:2380"
        return ["etcd", "--name", "lab", "--data-dir", str(self.directory / "etcd-data"),
                "--listen-client-urls", self.endpoint, "--advertise-client-urls",
                self.endpoint, "--listen-peer-urls", peer, "--initial-advertise-peer-urls",
                peer, "--initial-cluster", f"lab={peer}", "--initial-cluster-state", "new",
                "--logger", "zap", "--log-level", "warn"]

    def _ready(self, http: httpx.Client) -> bool:
        reply = http.get(f"{self.endpoint}/health")
        return reply.status_code == 200 and reply.json().get("health") == "true"


class NodeMember(Member):
    def __init__(self, lab: NetLab, name: str, directory: Path, etcd: EtcdMember,
                 settings: dict[str, str]) -> None:
        super().__init__(lab, name, directory / f"{name}.log")
        self.url = f"http://{lab.address(name)}:{NODE_PORT}"
        self.clock_file = directory / f"{name}.faketime"
        self.clock_offset_s = 0
        self.clock_file.write_text("+0\n")
        self.settings = {**{k: str(v) for k, v in NODE_SETTINGS.items()}, **settings,
                         "DATA_DIR": str(directory / name), "BOOKIE_ID": name,
                         "METADATA_URL": f"etcd://{lab.address('etcd')}:{ETCD_PORT}/{SCOPE}",
                         "CLUSTER_TOKEN": TOKEN, "ADVERTISED_URL": self.url,
                         "ADMIN_TOKEN": ADMIN_TOKEN}

    def _argv(self) -> list[str]:
        return [sys.executable, "-m", "cli", "serve", "--host", self.lab.address(self.name),
                "--port", str(NODE_PORT)]

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGERD_")}
        env.update({f"LEDGERD_{k}": v for k, v in self.settings.items()})
        env["PYTHONPATH"] = str(REPO)
        env.update({"LD_PRELOAD": str(FAKETIME_LIB),
                    "FAKETIME_TIMESTAMP_FILE": str(self.clock_file),
                    "FAKETIME_CACHE_DURATION": "1"})
        return env

    def jump_clock(self, seconds: int) -> None:
        """Move this node's clocks (wall and monotonic) ``seconds`` forward, within a
        second (libfaketime's cache)."""
        self.clock_offset_s += seconds
        self.clock_file.write_text(f"+{self.clock_offset_s}\n")

    def _ready(self, http: httpx.Client) -> bool:
        return http.get(f"{self.url}/api/v1/bookie/is_ready").status_code == 200
