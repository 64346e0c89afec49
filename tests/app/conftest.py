"""Fixtures for the HTTP layer: apps on a real Bookie, and live uvicorn servers.

Every app here opens the real engine (RocksDB index, journal on a preallocated
file under ``tmp_path``) through the lifespan; nothing is faked.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app import ServiceSettings, create_app
from tools.local_server import ServerProcess

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
    # Starlette's TestClient sends ``Host: testserver``.
    "allowed_hosts": "testserver",
    # Tests of one module share a server and try many wrong passwords on purpose;
    # tests/app/test_admission.py checks the throttle with its own settings.
    "max_auth_failures": 100_000,
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


class LiveServer(ServerProcess):
    """``ledgerd serve`` in a subprocess with the SMALL settings on ``data_dir``."""

    def __init__(self, data_dir: Path, env_overrides: dict[str, Any] | None = None, *,
                 ca_file: Path | None = None) -> None:
        self.data_dir = data_dir
        values = {**SMALL, **(env_overrides or {})}
        settings = {key.upper(): str(value) for key, value in values.items()}
        settings["DATA_DIR"] = str(data_dir)
        data_dir.parent.mkdir(parents=True, exist_ok=True)
        super().__init__(settings, log_path=data_dir.parent / f"server-{data_dir.name}.log",
                         ca_file=ca_file)


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
