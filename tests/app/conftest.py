"""Fixtures for the HTTP layer: apps on a real Bookie, and live uvicorn servers.

Every app here opens the real engine (RocksDB index, journal on a preallocated
file under ``tmp_path``) through the lifespan; nothing is faked.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from app import ServiceSettings, create_app
from offload.local_s3 import free_port

with warnings.catch_warnings():
    # Starlette suggests httpx2 for its TestClient; the httpx one works the same here.
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

REPO = Path(__file__).resolve().parents[2]
CLIENT_DIR = REPO / "openapi" / "client"
if str(CLIENT_DIR) not in sys.path:
    sys.path.insert(0, str(CLIENT_DIR))

ADMIN_TOKEN = "test-admin-token"

# Small enough that flushes, checkpoints and journal trims happen within a test.
SMALL: dict[str, Any] = {
    "journal_capacity": "8MiB",
    "write_cache_size": "1MiB",
    "read_cache_size": "1MiB",
    "max_entry_size": "256KiB",
    "entry_log_size_limit": "1MiB",
    "flush_interval": 1.0,
    "access_log": False,
    "disk_check_interval": 0.2,
}


def service_settings(data_dir: Path, **overrides: Any) -> ServiceSettings:
    values = {**SMALL, "data_dir": data_dir, **overrides}
    return ServiceSettings.load(environ={}, **values)


@pytest.fixture
def make_client(tmp_path: Path) -> Iterator[Any]:
    """``make_client(**settings)`` → a started TestClient on a fresh data dir."""
    clients: list[TestClient] = []

    def make(**overrides: Any) -> TestClient:
        data_dir = overrides.pop("data_dir", tmp_path / f"data{len(clients)}")
        app = create_app(service_settings(data_dir, **overrides))
        client = TestClient(app, raise_server_exceptions=False)
        client.__enter__()
        clients.append(client)
        return client

    yield make
    for client in reversed(clients):
        client.__exit__(None, None, None)


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """One app per test module (each test makes its own ledgers)."""
    data_dir = tmp_path_factory.mktemp("app") / "data"
    app = create_app(service_settings(data_dir))
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def create_ledger(client: Any, password: str = "pw", **metadata: str) -> dict[str, Any]:
    response = client.post("/api/v1/ledgers", json={"password": password, "metadata": metadata})
    assert response.status_code == 201, response.text
    return dict(response.json())


def pw(password: str = "pw") -> dict[str, str]:
    return {"X-Ledger-Password": password}


def assert_problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body = dict(response.json())
    assert body["status"] == status
    assert body["code"] == code
    assert set(body) == {"type", "title", "status", "detail", "code"}
    return body


# --- live servers ----------------------------------------------------------------


@dataclass
class LiveServer:
    """``python -m app serve`` in a subprocess, on a loopback port."""

    data_dir: Path
    env_overrides: dict[str, str] = field(default_factory=dict)
    port: int = 0
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGERD_")}
        for key, value in {**SMALL, **self.env_overrides}.items():
            env[f"LEDGERD_{key.upper()}"] = str(value)
        env["LEDGERD_DATA_DIR"] = str(self.data_dir)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), str(REPO)) if p)
        return env

    def start(self, timeout_s: float = 60.0) -> LiveServer:
        self.port = free_port()
        self.log_path = self.data_dir.parent / f"server-{self.port}.log"
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "app",
                    "serve",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                ],
                cwd=REPO,
                env=self.environment(),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.wait_ready(timeout_s)
        return self

    def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        assert self.process is not None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}:\n{self.logs()}")
            try:
                if httpx.get(f"{self.url}/api/v1/bookie/is_ready", timeout=1.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.02)  # polling interval of the readiness probe, not a wait for state
        self.kill()
        raise RuntimeError(f"server not ready after {timeout_s}s:\n{self.logs()}")

    def logs(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")[-5000:]

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs (a crash)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self) -> None:
        """SIGTERM: uvicorn's graceful shutdown closes the bookie cleanly."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A live server with an admin token configured."""
    server = LiveServer(
        tmp_path_factory.mktemp("live") / "data", {"admin_token": ADMIN_TOKEN}
    ).start()
    try:
        yield server
    finally:
        server.stop()
