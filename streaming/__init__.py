"""Append streams (DESIGN.md §5a): the wire codec and the async Python client.

Imports only the standard library, ``common`` and (for the client) ``websockets``,
so the server (``app.routes_stream``), the CLI, tests and benchmarks share one
codec.  The protocol, byte by byte, is in ``_codec.py`` and docs/api.md:

- ``GET /api/v1/ledgers/{id}/entries/stream`` upgraded to a WebSocket with
  subprotocol ``ledgerd.v1`` and ``X-Ledger-Password``;
- client → server: binary, ``u64 first_entry_id`` (2^64-1: server assigns) then
  frames (``u32`` length + payload); one message = one batch = one journal record;
- server → client: text, ``{"acks": [[seq, first, last], ...], "last_add_confirmed"}``
  (one message per group commit) or ``{"seq": n, "error": problem}`` followed by
  the close code ``4000 + status``.

Invariants the client relies on and the server keeps:

1. Every client message is acknowledged exactly once, in order, once durable.
2. After an error no later message of the connection is appended: what was
   acknowledged is a prefix of what was sent.
3. A message with an explicit ``first_entry_id`` whose entries are all stored
   already, with the same payloads, is acknowledged again without appending.
"""

from typing import TYPE_CHECKING, Any

from ._codec import ASSIGN as ASSIGN
from ._codec import SUBPROTOCOL as SUBPROTOCOL
from ._codec import Ack as Ack
from ._codec import Acks as Acks
from ._codec import Batch as Batch
from ._codec import Failure as Failure
from ._codec import Limits as Limits
from ._codec import close_code as close_code
from ._codec import decode_batch as decode_batch
from ._codec import decode_server_message as decode_server_message
from ._codec import encode_acks as encode_acks
from ._codec import encode_batch as encode_batch
from ._codec import encode_failure as encode_failure
from ._codec import status_of_close as status_of_close
from ._problem import error_from_problem as error_from_problem

if TYPE_CHECKING:
    from ._client import Appended as Appended
    from ._client import AppendStream as AppendStream
    from ._client import stream_url as stream_url
    from ._feed import InputFormat as InputFormat
    from ._feed import Progress as Progress
    from ._feed import append_from_file as append_from_file
    from ._feed import split_frames as split_frames
    from ._feed import split_lines as split_lines

# The client side loads websockets' asyncio client; the server (app/) needs only
# the codec, so the client is imported on first use.
_LAZY = {"Appended": "._client", "AppendStream": "._client", "stream_url": "._client",
         "InputFormat": "._feed", "Progress": "._feed", "append_from_file": "._feed",
         "split_frames": "._feed", "split_lines": "._feed"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module 'streaming' has no attribute {name!r}")
