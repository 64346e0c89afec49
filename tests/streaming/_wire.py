"""Raw §5a connections for protocol tests: every server message and the close code,
nothing hidden by the client library."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed
from websockets.typing import Subprotocol

from streaming import SUBPROTOCOL, Acks, Failure, decode_server_message

from .conftest import PASSWORD


@asynccontextmanager
async def raw_stream(url: str, password: str = PASSWORD,
                     **options: Any) -> AsyncIterator[ClientConnection]:
    headers = {"X-Ledger-Password": password}
    async with connect(url, subprotocols=[Subprotocol(SUBPROTOCOL)], additional_headers=headers,
                       compression=None, open_timeout=30, **options) as connection:
        yield connection


@dataclass
class Transcript:
    """What the server said on one connection."""

    acks: list[Acks] = field(default_factory=list)
    failure: Failure | None = None
    close_code: int | None = None

    @property
    def acked(self) -> list[tuple[int, int, int]]:
        """(seq, first, last) of every ack, in arrival order."""
        return [(a.seq, a.first_entry_id, a.last_entry_id) for m in self.acks for a in m.acks]


async def read_until(connection: ClientConnection, acks: int | None = None) -> Transcript:
    """Server messages until ``acks`` acks (None: until the server closes)."""
    transcript = Transcript()
    try:
        while acks is None or len(transcript.acked) < acks:
            message = await connection.recv()
            assert isinstance(message, str), "server messages are text"
            decoded = decode_server_message(message)
            if isinstance(decoded, Failure):
                assert transcript.failure is None, "a second error on one connection"
                transcript.failure = decoded
            else:
                assert transcript.failure is None, "an ack after the error"
                transcript.acks.append(decoded)
    except ConnectionClosed as closed:
        transcript.close_code = closed.rcvd.code if closed.rcvd is not None else 1006
    return transcript
