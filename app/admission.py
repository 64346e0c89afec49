"""Admission control: how much work the server takes on, and for whom.

* :class:`AdmissionMiddleware` serves at most ``MAX_CONCURRENT_REQUESTS`` HTTP
  requests at once and answers the next ones 503 ``ETOOMANYREQUESTS`` with
  ``Retry-After`` at once: a queue without a bound only turns overload into
  memory and latency (S3 answers ``SlowDown`` the same way).  ``/heartbeat`` and
  ``/metrics`` are exempt, so an overloaded server still looks alive and can be
  watched.  WebSocket streams are not requests: they have their own window.
* :class:`PasswordGate` is where password checks that are not answered at once
  go: a wrong password, and a scrypt-hashed one (ledgers created before keyed
  hashes, and cluster mode's) not verified yet.  It refuses, with 429 and no
  check, a client (peer address) that failed ``MAX_AUTH_FAILURES`` checks
  within ``AUTH_FAILURE_WINDOW`` (that bound, not a hash's cost, is what limits
  online guessing: docs/api.md, Security), and runs scrypt on its own few
  threads, never on the pool that reads use.  A correct password is checked
  by the engine without a KDF (a keyed digest, or a scrypt password verified
  once), so honest clients never reach the gate.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
from prometheus_client import Counter
from starlette.types import ASGIApp, Receive, Scope, Send

from common.errors import AuthenticationThrottled, TooManyRequests, Unauthorized

from .errors import ErrorCode, response_for
from .openapi_docs import Answer, add_answer

T = TypeVar("T")

EXEMPT_PATHS = frozenset({"/heartbeat", "/metrics"})
# Node-to-node calls (cluster mode) carry CLUSTER_TOKEN and are bounded by the
# peers' own windows; refusing them would turn this node's load into an
# ensemble change at its peers.
EXEMPT_PREFIX = "/internal/"
# Clients whose failures are remembered; past it the least recently failing is
# forgotten (an attacker with many addresses must not grow this without bound).
CLIENTS_TRACKED_MAX = 10_000


class AdmissionMiddleware:
    def __init__(self, app: ASGIApp, *, requests_max: int) -> None:
        self.app = app
        self.requests_max = requests_max
        self.in_flight = 0  # only the event loop's thread touches it

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] != "http" or scope["path"] in EXEMPT_PATHS
                or scope["path"].startswith(EXEMPT_PREFIX)):
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.requests_max:
            refusal = TooManyRequests(f"the server is serving {self.in_flight} requests, "
                                      "the most MAX_CONCURRENT_REQUESTS allows")
            await response_for(refusal)(scope, receive, send)
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1


class PasswordGate:
    """The few threads scrypt may use, and each client's recent failed checks."""

    def __init__(self, *, concurrency: int, failures_max: int, window_s: float,
                 checks: Counter, clock: Callable[[], float] = time.monotonic) -> None:
        # A turn is taken on the event loop (waiting for one holds no thread);
        # the thread that then runs scrypt comes from a limiter of the same size.
        self._turns = anyio.CapacityLimiter(concurrency)
        self._threads = anyio.CapacityLimiter(concurrency)
        self._failures_max = failures_max
        self._window_s = window_s
        self._checks = checks
        self._clock = clock
        # client → times of its failures within the window, oldest first; the
        # dict is ordered by each client's latest failure.
        self._failures: collections.OrderedDict[str, collections.deque[float]] = (
            collections.OrderedDict())  # only the event loop's thread touches it

    async def hash(self, call: Callable[[anyio.CapacityLimiter], Awaitable[T]]) -> T:
        """``call(limiter)``, a ledger creation, which may hash on a thread of
        ``limiter`` (none does now: standalone and cluster mode both make keyed
        digests, a microsecond on the event loop).  It takes no
        turn: the limiter bounds the hashing alone, and holding a turn across
        the rest of the creation (a journal sync, an etcd write) is what capped
        creations at one per sync."""
        return await call(self._threads)

    async def check(self, client: str,
                    call: Callable[[anyio.CapacityLimiter], Awaitable[T]]) -> T:
        """``call(limiter)``, a password check that runs scrypt on a thread of
        ``limiter``, in its turn, unless ``client`` failed too often lately:
        AuthenticationThrottled."""
        self._refuse_if_throttled(client)  # before waiting for a turn
        async with self._turns:
            self._refuse_if_throttled(client)  # its failures while it waited count
            try:
                result = await call(self._threads)
            except Unauthorized:
                self._checks.labels("wrong").inc()
                self._record_failure(client)
                raise
        self._checks.labels("ok").inc()
        return result

    def _refuse_if_throttled(self, client: str) -> None:
        times = self._failures.get(client)
        if times is None:
            return
        now = self._clock()
        while times and times[0] <= now - self._window_s:
            times.popleft()
        if len(times) < self._failures_max:
            return
        self._checks.labels("throttled").inc()
        raise AuthenticationThrottled(
            f"{self._failures_max} failed password checks from this client within "
            f"{self._window_s:g} s (MAX_AUTH_FAILURES, AUTH_FAILURE_WINDOW)",
            times[0] + self._window_s - now)

    def _record_failure(self, client: str) -> None:
        times = self._failures.pop(client, None)
        if times is None:
            times = collections.deque(maxlen=self._failures_max)
        times.append(self._clock())
        self._failures[client] = times
        if len(self._failures) > CLIENTS_TRACKED_MAX:
            self._failures.popitem(last=False)


TOO_MANY_REQUESTS = Answer(503, ErrorCode.ETOOMANYREQUESTS, "MAX_CONCURRENT_REQUESTS requests "
                           "are in flight; retry after `Retry-After` seconds", retry_after=True)
THROTTLED = Answer(429, ErrorCode.ETOOMANYREQUESTS, "this client failed MAX_AUTH_FAILURES "
                   "password checks within AUTH_FAILURE_WINDOW; none is checked before "
                   "`Retry-After` seconds", retry_after=True)


def document(spec: dict[str, Any]) -> None:
    """Say in the OpenAPI document what admission control answers: 503 on every
    operation it guards, 429 on those that check a ledger password."""
    for path, item in spec.get("paths", {}).items():
        for operation in item.values():
            responses = operation.setdefault("responses", {})
            if path not in EXEMPT_PATHS:
                add_answer(responses, TOO_MANY_REQUESTS)
            parameters = operation.get("parameters", ())
            if any(p.get("name") == "X-Ledger-Password" for p in parameters):
                add_answer(responses, THROTTLED)
