"""Minimal HTTP/1.1 clients for hostile-client tests.

httpx copies what it sends (httpcore's sync ``write`` slices the remaining
buffer after every ``send``), so a thread sending a 64 MiB body holds the GIL
for long stretches and stalls every other thread of the test process,
measurements included.  :func:`post` sends from a memoryview with
``socket.sendall``, which releases the GIL while the kernel copies.
:class:`Connection` is an asyncio keep-alive connection for floods of small
requests (one event loop drives many of them for little CPU).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Mapping
from urllib.parse import urlsplit

CHUNK_BYTES = 1 << 20


def post(url: str, path: str, headers: Mapping[str, str], body: bytes, *,
         chunked: bool = False, send_buffer_bytes: int | None = None,
         timeout_s: float = 60.0) -> int:
    """The status of one POST on a fresh connection; with ``chunked`` the body
    goes without a Content-Length.  ``send_buffer_bytes`` bounds what the kernel
    holds in flight for this connection (SO_SNDBUF, which Linux doubles)."""
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None, url
    # Keep-alive (no "Connection: close"): a server that answers before reading
    # the body then drains it, where closing would reset the connection under
    # the client's feet.
    head = [f"POST {path} HTTP/1.1", f"Host: {parts.netloc}",
            *(f"{name}: {value}" for name, value in headers.items())]
    head.append("Transfer-Encoding: chunked" if chunked else f"Content-Length: {len(body)}")
    with socket.create_connection((parts.hostname, parts.port), timeout=timeout_s) as sock:
        if send_buffer_bytes is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer_bytes)
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        view = memoryview(body)
        if chunked:
            for at in range(0, len(body), CHUNK_BYTES):
                piece = view[at:at + CHUNK_BYTES]
                sock.sendall(f"{len(piece):x}\r\n".encode())
                sock.sendall(piece)
                sock.sendall(b"\r\n")
            sock.sendall(b"0\r\n\r\n")
        else:
            sock.sendall(view)
        response = sock.makefile("rb")
        status_line = response.readline()
    return int(status_line.split()[1])


class Connection:
    """One asyncio keep-alive connection; requests carry small bodies only."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 host: str) -> None:
        self._reader, self._writer, self._host = reader, writer, host

    @classmethod
    async def open(cls, url: str, *, local_address: str | None = None) -> Connection:
        parts = urlsplit(url)
        assert parts.hostname is not None and parts.port is not None, url
        reader, writer = await asyncio.open_connection(
            parts.hostname, parts.port,
            local_addr=(local_address, 0) if local_address is not None else None)
        return cls(reader, writer, parts.netloc)

    async def request(self, method: str, path: str, headers: Mapping[str, str] | None = None,
                      body: bytes = b"") -> tuple[int, dict[str, str], bytes]:
        """(status, headers with lower-case names, body) of one request."""
        head = [f"{method} {path} HTTP/1.1", f"Host: {self._host}",
                f"Content-Length: {len(body)}",
                *(f"{name}: {value}" for name, value in (headers or {}).items())]
        self._writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        await self._writer.drain()
        status_line, _, block = (await self._reader.readuntil(b"\r\n\r\n")).partition(b"\r\n")
        answer: dict[str, str] = {}
        for line in block.strip().split(b"\r\n"):
            name, _, value = line.partition(b":")
            answer[name.strip().lower().decode()] = value.strip().decode()
        if "content-length" not in answer:
            raise RuntimeError("Connection reads Content-Length responses only")
        content = await self._reader.readexactly(int(answer["content-length"]))
        return int(status_line.split()[1]), answer, content

    async def close(self) -> None:
        self._writer.close()
        await self._writer.wait_closed()
