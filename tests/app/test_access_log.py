"""The access log: one line per request, at info for clients' calls and at debug for
node-to-node calls (``/internal/…``), whose volume buried everything else."""

from __future__ import annotations

import asyncio
import logging

import pytest
from starlette.types import Receive, Scope, Send

from app.metrics import Metrics
from app.middleware import ServiceMiddleware


async def ok(scope: Scope, receive: Receive, send: Send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"{}"})


async def call(app: ServiceMiddleware, method: str, path: str) -> None:
    async def receive() -> dict[str, object]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: object) -> None:
        pass
    scope = {"type": "http", "method": method, "path": path, "headers": [],
             "client": ("127.0.0.1", 5000)}
    await app(scope, receive, send)


def test_node_to_node_calls_are_logged_at_debug_client_calls_at_info(
        caplog: pytest.LogCaptureFixture) -> None:
    asyncio.run(_logged_at_their_levels(caplog))


async def _logged_at_their_levels(caplog: pytest.LogCaptureFixture) -> None:
    app = ServiceMiddleware(ok, metrics=Metrics(), body_size_max=1 << 20, log_requests=True)
    caplog.set_level(logging.DEBUG, logger="ledgerd.access")
    await call(app, "POST", "/internal/v1/ledgers/1/replica/entries/batch")
    await call(app, "POST", "/internal/v1/ledgers/1/forward/entries")
    await call(app, "POST", "/api/v1/ledgers/1/entries")
    await call(app, "GET", "/api/v1/cluster")
    levels = {r.path: r.levelno for r in caplog.records  # type: ignore[attr-defined]
              if r.name == "ledgerd.access"}
    assert levels == {"/internal/v1/ledgers/1/replica/entries/batch": logging.DEBUG,
                      "/internal/v1/ledgers/1/forward/entries": logging.DEBUG,
                      "/api/v1/ledgers/1/entries": logging.INFO,
                      "/api/v1/cluster": logging.INFO}

    # At the default level (info) a node-to-node call writes nothing.
    caplog.clear()
    caplog.set_level(logging.INFO, logger="ledgerd.access")
    await call(app, "POST", "/internal/v1/ledgers/1/replica/entries/batch")
    await call(app, "GET", "/api/v1/ledgers/1")
    assert [r.path for r in caplog.records  # type: ignore[attr-defined]
            if r.name == "ledgerd.access"] == ["/api/v1/ledgers/1"]
