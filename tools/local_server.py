"""``ledgerd serve`` as a child process on a loopback port, which benches,
live-server tests and the quick start start, kill (SIGKILL: a crash) and restart.

It lives in ``tools`` (not ``bench``) so that every user can import it without an
import pointing up: ``bench`` and ``tests`` import ``tools``, never the reverse
(``tests/test_layers.py``)."""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Self

import httpx

from tools.local_s3 import free_port

REPO = Path(__file__).resolve().parents[1]


class ServerProcess:
    """One server on a loopback port kept across restarts; ``settings`` are
    ``LEDGERD_*`` names without the prefix (``{"WRITE_CACHE_SIZE": "64MiB"}``).
    ``LEDGERD_*`` variables of this process are not inherited, so only
    ``settings`` configure the server."""

    def __init__(self, settings: dict[str, str], *, log_path: Path | None = None,
                 extra_env: dict[str, str] | None = None, ca_file: Path | None = None,
                 port: int | None = None, cpus: Iterable[int] | None = None) -> None:
        self.port = port or free_port()
        # The CPUs the server (every thread it starts) may run on; None: all.
        self.cpus = tuple(sorted(cpus)) if cpus else None
        # With TLS_CERT_FILE the server speaks HTTPS; ``ca_file`` is what the
        # readiness check trusts (the CA that signed the server's certificate).
        scheme = "https" if "TLS_CERT_FILE" in settings else "http"
        self.url = f"{scheme}://127.0.0.1:{self.port}"
        self.verify: ssl.SSLContext | bool = (
            True if ca_file is None else ssl.create_default_context(cafile=str(ca_file)))
        self._settings = dict(settings)
        self._extra_env = dict(extra_env or {})
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    def environment(self) -> dict[str, str]:
        """The child's environment (also right for a CLI run against it)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGERD_")}
        env.update(self._extra_env)
        env.update({f"LEDGERD_{k}": v for k, v in self._settings.items()})
        env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), str(REPO)) if p)
        return env

    def start(self, timeout_s: float = 60.0) -> Self:
        self.spawn()
        self.wait_ready(timeout_s)
        return self

    def spawn(self) -> None:
        """Start the process without waiting (several servers start in parallel)."""
        if self.log_path is None:
            self._spawn(subprocess.DEVNULL)
        else:
            with open(self.log_path, "ab") as log:  # the child keeps its own descriptor
                self._spawn(log)

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        self._wait_ready(timeout_s)

    def _spawn(self, stdout: IO[bytes] | int) -> None:
        self.process = subprocess.Popen(
            self.command([sys.executable, "-m", "cli", "serve", "--host", "127.0.0.1",
                          "--port", str(self.port)]),
            cwd=REPO, env=self.environment(), stdout=stdout, stderr=subprocess.STDOUT)

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` run on :attr:`cpus` (by util-linux's taskset, as an operator
        would), or as it is."""
        if self.cpus is None:
            return argv
        return ["taskset", "--cpu-list", ",".join(map(str, self.cpus)), *argv]

    def _wait_ready(self, timeout_s: float) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}:\n"
                                   f"{self.logs()}")
            try:
                ready = httpx.get(f"{self.url}/api/v1/bookie/is_ready", timeout=1,
                                  verify=self.verify)
                if ready.status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.02)  # polling readiness of a child process
        self.kill()
        raise RuntimeError(f"server not ready after {timeout_s}s:\n{self.logs()}")

    def logs(self) -> str:
        """The tail of the server's log (empty without ``log_path``)."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")[-5000:]

    def kill(self) -> None:
        """SIGKILL: a crash, no shutdown code runs."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(30)

    def pause(self) -> None:
        """SIGSTOP: the process stands still (no keep-alives, no answers)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        """SIGTERM: uvicorn's graceful shutdown closes the bookie cleanly."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()

    def metrics(self) -> dict[str, float]:
        """The server's unlabelled Prometheus samples (``/metrics``), by name."""
        text = httpx.get(f"{self.url}/metrics", timeout=30, verify=self.verify).text
        found: dict[str, float] = {}
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            if value and not name.startswith("#") and "{" not in name:
                found[name] = float(value)
        return found

    def rss_bytes(self) -> int:
        if self.process is None or self.process.poll() is not None:
            return 0
        try:
            status = Path(f"/proc/{self.process.pid}/status").read_text()
        except OSError:
            return 0
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0
