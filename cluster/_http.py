"""Keep-alive HTTP/1.1 connections between nodes, on asyncio streams.

Node-to-node calls are on every replicated add's path (one per bookie of its
write set, one more when the add is forwarded).  httpx spent about 3 ms of wall
time and 1.2 ms of CPU per request on this kind of loopback call, a plain
asyncio connection 0.3 ms and 0.06 ms (docs/benchmarks.md, the cluster
section), so the data path speaks HTTP/1.1 itself: one ``write`` per request
(``TCP_NODELAY``), responses framed by ``Content-Length`` (or chunked), idle
connections reused per host.  etcd's gateway is called the same way
(``cluster.EtcdClient``), and its watches read as a stream of lines
(:meth:`HttpPool.stream_lines`) on a connection of their own.

A request that fails without an answer raises ``BookieUnreachable``; one sent on
a reused connection that the server had already closed (it read nothing: EOF
before the first byte of an answer) is sent once more on a fresh connection.

An ``https://`` base URL gets TLS, the peer's certificate verified against the
pool's ``ssl_context`` (:func:`peer_ssl_context`: TLS_CA_FILE, else the system's
trust store) for the URL's host; a certificate it does not trust is a failed
handshake, so ``BookieUnreachable`` like any call that got no answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import time
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode, urlsplit

from common.errors import BookieUnreachable, InvalidSetting

TIMEOUT_S = 5.0
CONNECT_TIMEOUT_S = 1.0
# Uvicorn closes a keep-alive connection idle for 5 s; reuse only younger ones.
IDLE_S_MAX = 4.0
HEADER_BYTES_MAX = 64 * 1024


@dataclass(frozen=True, slots=True)
class HttpResponse:
    status: int
    headers: Mapping[str, str]   # lower-case names
    body: bytes

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


def peer_ssl_context(ca_file: Path | None) -> ssl.SSLContext:
    """What a node trusts when it calls an ``https://`` peer: the CAs of
    ``ca_file`` (TLS_CA_FILE, a PEM bundle) only, else the system's trust store.
    Certificates and host names are verified.  Raises ``InvalidSetting`` naming
    TLS_CA_FILE when the file does not load."""
    try:
        return ssl.create_default_context(cafile=None if ca_file is None else str(ca_file))
    except (ssl.SSLError, OSError) as exc:
        raise InvalidSetting(f"invalid setting TLS_CA_FILE={str(ca_file)!r}: not a readable "
                             f"PEM bundle of CA certificates ({exc})") from exc


def _address(base_url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of ``base_url``: the key idle connections are kept by."""
    parts = urlsplit(base_url)
    default_port = 443 if parts.scheme == "https" else 80
    return parts.scheme, parts.hostname or "127.0.0.1", parts.port or default_port


async def _next_chunk(reader: asyncio.StreamReader) -> bytes:
    """The next chunk of a chunked body; ``b""`` for the last one (its end read)."""
    size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
    if size == 0:
        await reader.readuntil(b"\r\n")
        return b""
    chunk = await reader.readexactly(size)
    await reader.readexactly(2)
    return chunk


def _status(status_line: bytes) -> int:
    """The status code of an HTTP/1.1 status line; ``ValueError`` if it is not one
    (the exchange is then broken, like one that got no answer)."""
    version, _, rest = status_line.partition(b" ")
    code = rest[:3]
    if not version.startswith(b"HTTP/1.") or len(code) != 3 or not code.isdigit():
        raise ValueError(f"not an HTTP/1.1 status line: {status_line[:80]!r}")
    return int(code)


class _StaleConnection(Exception):
    """The server had closed a reused connection before reading the request."""


@dataclass(slots=True)
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    idle_since: float
    reused: bool = False

    def close(self) -> None:
        self.writer.close()


class HttpPool:
    def __init__(self, *, headers: Mapping[str, str] | None = None,
                 timeout_s: float = TIMEOUT_S, connect_timeout_s: float = CONNECT_TIMEOUT_S,
                 idle_per_host_max: int = 64, ssl_context: ssl.SSLContext | None = None,
                 ) -> None:
        self._headers = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self._timeout_s = timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._idle_max = idle_per_host_max
        # Made on the first https:// call when not given (the system's trust store).
        self._ssl_context = ssl_context
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}

    async def aclose(self) -> None:
        for connections in self._idle.values():
            for connection in connections:
                connection.close()
        self._idle.clear()

    async def request(self, base_url: str, method: str, path: str, *,
                      params: Mapping[str, object] | None = None, body: bytes = b"",
                      headers: Mapping[str, str] | None = None,
                      timeout_s: float | None = None) -> HttpResponse:
        key = _address(base_url)
        target = path + (f"?{urlencode(params)}" if params else "")
        head = self._head(key, method, target, headers, len(body))
        try:
            async with asyncio.timeout(timeout_s or self._timeout_s):
                for _ in range(2):
                    connection = await self._connection(key)
                    try:
                        response = await self._exchange(connection, head, body, method)
                    except _StaleConnection:
                        connection.close()
                        continue
                    except BaseException:
                        connection.close()
                        raise
                    self._release(key, connection, response)
                    return response
                raise BookieUnreachable(f"{base_url}: the connection closed twice")
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                TimeoutError, ValueError) as exc:
            raise BookieUnreachable(f"{base_url} {method} {path}: {exc!r}") from exc

    async def stream_lines(self, base_url: str, method: str, path: str, *,
                           body: bytes = b"") -> AsyncGenerator[bytes, None]:
        """The lines of a response that goes on as long as the caller reads (a
        watch), on a connection of its own, closed when the caller stops.  The
        status line and headers are awaited within the pool's timeout, the body
        without one; a status other than 2xx, a broken or ended stream raise
        ``BookieUnreachable``."""
        key = _address(base_url)
        head = self._head(key, method, path, None, len(body))
        connection: _Connection | None = None
        try:
            async with asyncio.timeout(self._timeout_s):
                connection = await self._connection(key, reuse=False)
                connection.writer.write(head + body)
                await connection.writer.drain()
                status_line = await connection.reader.readuntil(b"\r\n")
                fields = await connection.reader.readuntil(b"\r\n\r\n")
            status = _status(status_line)
            if not 200 <= status < 300:
                raise BookieUnreachable(f"{base_url} {method} {path}: HTTP {status}")
            chunked = b"transfer-encoding: chunked" in fields.lower()
            reader, pending = connection.reader, b""
            while True:
                data = await _next_chunk(reader) if chunked else await reader.read(65536)
                if not data:
                    raise BookieUnreachable(f"{base_url} {method} {path}: the stream ended")
                pending += data
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    yield line
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                TimeoutError, ValueError) as exc:
            raise BookieUnreachable(f"{base_url} {method} {path}: {exc!r}") from exc
        finally:
            if connection is not None:
                connection.close()

    async def _connection(self, key: tuple[str, str, int], *,
                          reuse: bool = True) -> _Connection:
        scheme, host, port = key
        idle = self._idle.get(key, []) if reuse else []
        now = time.monotonic()
        while idle:
            connection = idle.pop()
            if now - connection.idle_since < IDLE_S_MAX and not connection.reader.at_eof():
                connection.reused = True
                return connection
            connection.close()
        context: ssl.SSLContext | None = None
        if scheme == "https":
            if self._ssl_context is None:
                self._ssl_context = peer_ssl_context(None)
            context = self._ssl_context
        async with asyncio.timeout(self._connect_timeout_s):
            # With TLS the handshake (certificate checked for ``host``) is part of
            # connecting, under the same timeout.
            reader, writer = await asyncio.open_connection(host, port, ssl=context)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _Connection(reader, writer, now)

    async def _exchange(self, connection: _Connection, head: bytes, body: bytes,
                        method: str) -> HttpResponse:
        connection.writer.write(head + body if len(body) < 65536 else head)
        if len(body) >= 65536:
            connection.writer.write(body)
        await connection.writer.drain()
        try:
            status_line = await connection.reader.readuntil(b"\r\n")
        except asyncio.IncompleteReadError as exc:
            if connection.reused and not exc.partial:
                raise _StaleConnection() from exc
            raise
        fields = await connection.reader.readuntil(b"\r\n\r\n")
        if len(fields) > HEADER_BYTES_MAX:
            raise ValueError("response headers too large")
        status = _status(status_line)
        headers: dict[str, str] = {}
        for line in fields.decode("latin-1").split("\r\n"):
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            return HttpResponse(status, headers, b"")
        if headers.get("transfer-encoding", "").lower() == "chunked":
            return HttpResponse(status, headers, await self._chunked(connection.reader))
        length = headers.get("content-length")
        if length is None:
            headers["connection"] = "close"  # the body runs to the end of the stream
            return HttpResponse(status, headers, await connection.reader.read())
        return HttpResponse(status, headers, await connection.reader.readexactly(int(length)))

    @staticmethod
    async def _chunked(reader: asyncio.StreamReader) -> bytes:
        chunks: list[bytes] = []
        while chunk := await _next_chunk(reader):
            chunks.append(chunk)
        return b"".join(chunks)

    def _head(self, key: tuple[str, str, int], method: str, target: str,
              headers: Mapping[str, str] | None, body_bytes: int) -> bytes:
        _, host, port = key
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        return (f"{method} {target} HTTP/1.1\r\nHost: {host}:{port}\r\n{self._headers}"
                f"{extra}Content-Length: {body_bytes}\r\n\r\n").encode("latin-1")

    def _release(self, key: tuple[str, str, int], connection: _Connection,
                 response: HttpResponse) -> None:
        idle = self._idle.setdefault(key, [])
        if response.headers.get("connection", "").lower() == "close" \
                or len(idle) >= self._idle_max:
            with contextlib.suppress(Exception):
                connection.close()
            return
        connection.idle_since = time.monotonic()
        connection.reused = False
        idle.append(connection)
