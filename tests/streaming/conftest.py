"""Fixtures for append streams: real uvicorn servers on loopback.

``StreamServer`` runs uvicorn in a thread of the test process with the options
``ledgerd serve`` should use (``app.routes_stream.websocket_server_options``),
so a test can shorten the keepalive ping interval and look at the running
engine (the journal's sync count); crash tests use the ``ledgerd serve`` child
process of ``tests/app/conftest.py`` instead.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from app import create_app
from app.routes_stream import websocket_server_options
from node import Node
from streaming import stream_url
from tests.app.conftest import service_settings
from tools.local_s3 import free_port

PASSWORD = "pw"


class StreamServer:
    """``create_app`` served by a real uvicorn server on 127.0.0.1, in a thread."""

    def __init__(self, data_dir: Path, *, port: int | None = None,
                 uvicorn_options: dict[str, Any] | None = None, **settings: Any) -> None:
        self.settings = service_settings(data_dir, **settings)
        self.app = create_app(self.settings)
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        options = {**websocket_server_options(self.settings), **(uvicorn_options or {})}
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_config=None,
                                access_log=False, lifespan="on", **options)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="uvicorn", daemon=True)

    def start(self) -> StreamServer:
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)  # polling a server's readiness
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(60)

    @property
    def node(self) -> Node:
        node = self.app.state.service.node
        assert node is not None
        return node

    def create_ledger(self, password: str = PASSWORD) -> int:
        response = httpx.post(f"{self.url}/api/v1/ledgers", json={"password": password})
        assert response.status_code == 201, response.text
        return int(response.json()["ledger_id"])

    def stream_url(self, ledger_id: int) -> str:
        return stream_url(self.url, ledger_id)

    def post(self, path: str, password: str = PASSWORD, **kwargs: Any) -> httpx.Response:
        return httpx.post(f"{self.url}{path}", headers={"X-Ledger-Password": password},
                          timeout=30, **kwargs)

    def entries(self, ledger_id: int) -> list[bytes]:
        """Every entry of the ledger up to its LAC, in order."""
        response = httpx.get(f"{self.url}/api/v1/ledgers/{ledger_id}/entries",
                             headers={"Accept": "application/x-ledgerd-frames"}, timeout=60)
        assert response.status_code == 200, response.text
        from common.frames import decode_download

        frames = decode_download(response.content)
        assert [entry_id for entry_id, _, _ in frames] == list(range(len(frames)))
        return [payload for _, _, payload in frames]

    def metric(self, name: str) -> float:
        """One unlabelled sample of /metrics."""
        text = httpx.get(f"{self.url}/metrics").text
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        raise AssertionError(f"{name} not in /metrics")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StreamServer]:
    """One server per module with the tests' SMALL settings (each test makes its own ledgers)."""
    running = StreamServer(tmp_path_factory.mktemp("stream") / "data").start()
    try:
        yield running
    finally:
        running.stop()


def problem_of(body: bytes) -> dict[str, Any]:
    return dict(json.loads(body))
