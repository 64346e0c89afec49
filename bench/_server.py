"""``ledgerd serve`` as a child process the benches can kill and restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from offload.local_s3 import free_port


class ServerProcess:
    """One server on a fixed loopback port; ``settings`` are ``LEDGERD_*`` names
    without the prefix (``{"WRITE_CACHE_SIZE": "64MiB"}``)."""

    def __init__(self, settings: dict[str, str], *, log_path: Path | None = None,
                 extra_env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._env = {**os.environ, **(extra_env or {}),
                     **{f"LEDGERD_{k}": v for k, v in settings.items()}}
        self._log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 60.0) -> None:
        out = open(self._log_path, "ab") if self._log_path else subprocess.DEVNULL  # noqa: SIM115
        self.process = subprocess.Popen(
            [sys.executable, "-m", "app", "serve", "--port", str(self.port)],
            env=self._env, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}")
            try:
                if httpx.get(f"{self.url}/api/v1/bookie/is_ready", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)  # polling readiness of a child process
        raise RuntimeError(f"server not ready after {timeout_s}s")

    def kill(self) -> None:
        """SIGKILL: a crash, no shutdown code runs."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()

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
