"""Browser attacks on a server that trusts its network position (loopback):
checks of the ``Host`` and ``Origin`` headers, for HTTP requests and WebSocket
upgrades alike.

* **DNS rebinding.** A page of ``evil.example`` makes its name resolve to
  127.0.0.1; the browser then sends the page's requests to ledgerd as
  same-origin, with ``Host: evil.example``.  So the Host must be a name this
  server answers to: an IP address (a page served from an address is that
  address's origin, and addresses cannot be rebound), ``localhost``, the
  listen host (``HOST``), or a name of ``ALLOWED_HOSTS`` (``.example.com``
  also allows its subdomains, ``*`` any name).  Otherwise 400 ``EBADREQ``.
* **Cross-site requests.** A page of another site can POST to ledgerd without
  reading the answer (a form, ``fetch`` with ``mode: "no-cors"``), and open a
  WebSocket, which CORS never restricts.  Browsers name the page's site in
  ``Origin``; a request whose ``Origin`` is not the request's own scheme-less
  host and port (``null`` included) is refused with 403 ``EUA``.  ledgerd sends
  no CORS headers, so no cross-site page has a legitimate use for it.
  Requests without ``Origin`` (every non-browser client) pass.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from common.errors import ForeignOrigin, HostNotAllowed, LedgerdError

from .errors import ErrorCode, response_for
from .openapi_docs import Answer, add_answer

DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}
# What a Host header may hold: a name or address, an optional port.
_HOST = re.compile(r"[A-Za-z0-9._\-]+(:[0-9]*)?|\[[0-9A-Fa-f:.]+\](:[0-9]*)?")


class AllowedHosts:
    """The names a Host header may carry."""

    def __init__(self, listen_host: str, extra: tuple[str, ...]) -> None:
        self._names = {"localhost", _normal(listen_host), *(_normal(n) for n in extra)}
        self._any = "*" in self._names
        self._suffixes = tuple(n for n in self._names if n.startswith("."))

    def allows(self, name: str) -> bool:
        if self._any or name in self._names or _is_address(name):
            return True
        return any(name.endswith(s) or name == s[1:] for s in self._suffixes)


class BrowserGuardMiddleware:
    def __init__(self, app: ASGIApp, *, allowed_hosts: AllowedHosts) -> None:
        self.app = app
        self.allowed_hosts = allowed_hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            refusal = self._refusal(scope)
            if refusal is not None:
                await _refuse(refusal, scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _refusal(self, scope: Scope) -> LedgerdError | None:
        host = origin = None
        for name, value in scope["headers"]:
            if name == b"host":
                if host is not None:
                    return HostNotAllowed("more than one Host header")
                host = value.decode("latin-1")
            elif name == b"origin":
                origin = value.decode("latin-1")
        scheme = "https" if scope.get("scheme") in ("https", "wss") else "http"
        where = _host_and_port(host, scheme) if host is not None else None
        if host is not None and (where is None or not self.allowed_hosts.allows(where[0])):
            return HostNotAllowed(f"Host {host!r} is not a name of this server; an operator "
                                  "can allow it with ALLOWED_HOSTS")
        if origin is not None and (where is None or _origin(origin) != where):
            return ForeignOrigin(f"requests from the page of another site ({origin!r}) "
                                 "are refused")
        return None


async def _refuse(refusal: LedgerdError, scope: Scope, receive: Receive, send: Send) -> None:
    response = response_for(refusal)
    if scope["type"] == "http" or "websocket.http.response" in scope.get("extensions", {}):
        await response(scope, receive, send)  # Starlette sends websocket.http.response.*
    else:
        await send({"type": "websocket.close", "code": 1008})  # the server answers 403


def _origin(origin: str) -> tuple[str, int] | None:
    """(host, port) of an ``Origin`` header; None for ``null`` or garbage."""
    try:
        parts = urlsplit(origin)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    return _normal(parts.hostname), port or DEFAULT_PORTS[parts.scheme]


def _host_and_port(host: str, scheme: str) -> tuple[str, int] | None:
    """(name, port) of a Host header; None when it is not one."""
    return _origin(f"{scheme}://{host}") if _HOST.fullmatch(host) else None


def _normal(name: str) -> str:
    return name.strip().lower().rstrip(".").strip("[]")


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True



FOREIGN_HOST = Answer(400, ErrorCode.EBADREQ, "the `Host` header is not a name of this server "
                      "(ALLOWED_HOSTS)")
FOREIGN_SITE = Answer(403, ErrorCode.EUA, "a browser request from the page of another site "
                      "(`Origin`)")


def document(spec: dict[str, Any]) -> None:
    """Say in the OpenAPI document that every operation refuses a foreign Host
    (400) or Origin (403)."""
    for item in spec.get("paths", {}).values():
        for operation in item.values():
            responses = operation.setdefault("responses", {})
            add_answer(responses, FOREIGN_HOST)
            add_answer(responses, FOREIGN_SITE)
