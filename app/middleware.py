"""One pure-ASGI middleware: request ids, request-size cap, access log and metrics.

Every request gets an id, answered in ``X-Request-Id`` and logged with the
access-log line and any error: a client reporting a failure quotes it, and the
operator finds the whole story (errors whose message names files or endpoints
reach the client only as their title and this id, see ``app/errors.py``).

Pure ASGI (not ``BaseHTTPMiddleware``) so that streamed responses stay streamed and
the per-request cost stays a few microseconds.
"""

from __future__ import annotations

import itertools
import logging
import os
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from common.errors import RequestTooLarge

from .errors import REQUEST_ID_KEY, problem
from .metrics import Metrics

access_log = logging.getLogger("ledgerd.access")
# Node-to-node routes (app/routes_internal.py), logged at debug.
INTERNAL_PREFIX = "/internal/"


class ServiceMiddleware:
    def __init__(
        self, app: ASGIApp, *, metrics: Metrics, body_size_max: int, log_requests: bool
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.body_size_max = body_size_max
        self.log_requests = log_requests
        # Ids unique across restarts (the random prefix) at the cost of a counter.
        self._id_prefix = os.urandom(4).hex() + "-"
        self._ids = itertools.count(1)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500
        limit = self.body_size_max
        request_id = f"{self._id_prefix}{next(self._ids):x}"
        scope[REQUEST_ID_KEY] = request_id
        id_header = (b"x-request-id", request_id.encode())

        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                if value.isdigit() and int(value) > limit:
                    response = problem(
                        413,
                        "EBADREQ",
                        f"request body of {int(value)} bytes exceeds MAX_REQUEST_BODY_SIZE",
                    )
                    response.raw_headers.append(id_header)
                    await response(scope, receive, send)
                    self._record(scope, 413, started)
                    return
                break

        received = 0

        async def capped_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise RequestTooLarge("request body exceeds MAX_REQUEST_BODY_SIZE")
            return message

        async def observed_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message = {**message, "headers": [*message.get("headers", ()), id_header]}
            await send(message)

        try:
            await self.app(scope, capped_receive, observed_send)
        finally:
            self._record(scope, status, started)

    def _record(self, scope: Scope, status: int, started: float) -> None:
        elapsed = time.perf_counter() - started
        route: Any = scope.get("route")
        template = getattr(route, "path", None) or "unmatched"
        method = scope.get("method", "")
        requests, seconds = self.metrics.request_metrics(method, template, status)
        requests.inc()
        seconds.observe(elapsed)
        path = scope.get("path", "")
        # Node-to-node calls (every replicated add makes one per bookie; a forwarded
        # call was logged at info by the node the client called) go at debug: at info
        # a chaos run wrote 223k access lines in six minutes.  Clients' calls stay at info.
        level = logging.DEBUG if path.startswith(INTERNAL_PREFIX) else logging.INFO
        if self.log_requests and access_log.isEnabledFor(level):
            client = scope.get("client")
            access_log.log(
                level,
                "%s %s %d",
                method,
                path,
                status,
                extra={
                    "method": method,
                    "path": path,
                    "route": template,
                    "status": status,
                    "duration_ms": round(elapsed * 1000, 3),
                    "client": f"{client[0]}:{client[1]}" if client else None,
                    "request_id": scope.get(REQUEST_ID_KEY),
                },
            )
