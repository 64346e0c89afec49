"""``BookieClient`` over HTTP: one request to another node's ``/internal/v1/`` routes
(docs/cluster.md §12.2), on keep-alive connections with bounded timeouts
(:class:`HttpPool`).

Every answer becomes the protocol's reply (``AddsOk``, ``Fenced``, ``NoEntry``, …);
a refusal the protocol has no word for (read-only, full, broken) becomes
``Unavailable``; no answer at all (refused connection, timeout, a reset) raises
``BookieUnreachable``.  Entry reads are checked against their ``X-Crc32c``.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Callable
from typing import Any

import crc32c

from common.errors import BookieUnreachable, InvariantViolation, LedgerdError

from ._http import HttpPool, HttpResponse
from ._messages import (
    AddEntries,
    AddsOk,
    BookieReply,
    BookieRequest,
    CopiesOk,
    CopyEntries,
    CopyEntry,
    CopyOk,
    Deleted,
    DeleteReplica,
    EntriesHeld,
    EntriesRead,
    EntryFound,
    Fence,
    Fenced,
    FenceOk,
    LacIs,
    ListEntries,
    NoEntry,
    ReadEntries,
    ReadEntry,
    ReadLac,
    RecoveryRead,
    Unavailable,
    WriteLac,
)
from ._wire import (
    BATCH_MEDIA_TYPE,
    EntryFrame,
    decode_entry_frames,
    encode_batch,
    encode_entry_frames,
    held_pairs,
    replica_path,
)

TIMEOUT_S = 5.0
LIST_PAGE_SIZE = 10_000


class HttpBookieClient:
    """Calls other nodes; ``url_of(bookie_id)`` gives a node's advertised URL (None:
    unknown, which is unreachable).  ``https://`` peers are verified against
    ``ssl_context`` (default: the system's trust store)."""

    def __init__(self, url_of: Callable[[str], str | None], *, token: str,
                 timeout_s: float = TIMEOUT_S, connections_max: int = 64,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self._url_of = url_of
        self._http = HttpPool(headers={"Authorization": f"Bearer {token}"},
                              timeout_s=timeout_s, idle_per_host_max=connections_max,
                              ssl_context=ssl_context)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def call(self, bookie_id: str, request: BookieRequest) -> BookieReply:
        if isinstance(request, AddEntries):
            return await self._add(bookie_id, request)
        if isinstance(request, ListEntries):
            return await self._list(bookie_id, request)
        lid = request.ledger_id
        if isinstance(request, ReadEntry):
            response = await self._send(bookie_id, "GET", replica_path(lid, "entries",
                                                                       request.entry_id))
            return _entry_reply(request.ledger_id, request.entry_id, response)
        if isinstance(request, RecoveryRead):
            response = await self._send(bookie_id, "POST", replica_path(
                lid, "recovery-read", request.entry_id), params={"epoch": request.epoch})
            return _entry_reply(request.ledger_id, request.entry_id, response)
        if isinstance(request, ReadLac):
            response = await self._send(bookie_id, "GET", replica_path(lid, "lac"))
            refused = _or_unavailable(lid, response)
            if refused is not None:
                return refused
            doc = _json(response)
            return LacIs(lid, int(doc["lac"]), int(doc.get("fenced_epoch", 0)))
        if isinstance(request, WriteLac):
            response = await self._send(bookie_id, "POST", replica_path(lid, "lac"),
                                        params={"lac": request.lac})
            return _or_unavailable(lid, response) or LacIs(lid, int(_json(response)["lac"]))
        if isinstance(request, Fence):
            response = await self._send(bookie_id, "POST", replica_path(lid, "fence"),
                                        params={"epoch": request.epoch})
            return _fenced(lid, response) or _or_unavailable(lid, response) or FenceOk(
                lid, request.epoch, int(_json(response)["lac"]))
        if isinstance(request, CopyEntry):
            response = await self._send(
                bookie_id, "PUT", replica_path(lid, "copies", request.entry_id),
                params={"epoch": request.epoch, "length_after": request.length_after},
                body=request.payload)
            return _or_unavailable(lid, response) or CopyOk(lid, request.entry_id)
        if isinstance(request, ReadEntries):
            return await self._read_entries(bookie_id, request)
        if isinstance(request, CopyEntries):
            body = encode_entry_frames([EntryFrame(
                c.entry_id, c.epoch, c.length_after, crc32c.crc32c(c.payload), c.payload)
                for c in request.entries])
            response = await self._send(bookie_id, "POST", replica_path(lid, "copies", "batch"),
                                        body=body, headers={"Content-Type": BATCH_MEDIA_TYPE})
            return _or_unavailable(lid, response) or CopiesOk(
                lid, tuple(c.entry_id for c in request.entries))
        if isinstance(request, DeleteReplica):
            response = await self._send(bookie_id, "DELETE", replica_path(lid))
            return _or_unavailable(lid, response) or Deleted(lid)
        raise InvariantViolation(f"unknown request {request!r}")

    async def _add(self, bookie_id: str, request: AddEntries) -> BookieReply:
        """One call, one journal record on the bookie, all or nothing."""
        lid, epoch, entries = request.ledger_id, request.epoch, request.entries
        if len(entries) == 1:
            first = entries[0]
            response = await self._send(
                bookie_id, "POST", replica_path(lid, "entries", first.entry_id),
                params={"epoch": epoch, "lac": request.lac, "length_after": first.length_after},
                body=first.payload)
        else:
            response = await self._send(
                bookie_id, "POST", replica_path(lid, "entries", "batch"),
                params={"epoch": epoch, "lac": request.lac}, body=encode_batch(entries),
                headers={"Content-Type": BATCH_MEDIA_TYPE})
        refused = _fenced(lid, response) or _or_unavailable(lid, response)
        if refused is not None:
            return refused
        return AddsOk(lid, epoch, int(_json(response)["lac"]),
                      tuple(e.entry_id for e in entries))

    async def _read_entries(self, bookie_id: str, request: ReadEntries) -> BookieReply:
        lid = request.ledger_id
        response = await self._send(
            bookie_id, "POST", replica_path(lid, "reads"),
            params={"bytes_max": request.bytes_max},
            body=json.dumps({"entry_ids": list(request.entry_ids)}).encode(),
            headers={"Content-Type": "application/json"})
        refused = _or_unavailable(lid, response)
        if refused is not None:
            return refused
        try:
            frames = decode_entry_frames(response.body, count_max=len(request.entry_ids))
            absent = response.headers.get("x-absent-entries", "")
            absent_ids = tuple(int(i) for i in absent.split(",") if i)
            lac = int(response.headers["x-last-add-confirmed"])
        except (LedgerdError, KeyError, ValueError) as exc:
            return Unavailable(lid, f"a range read answer that does not parse: {exc}")
        for frame in frames:
            if crc32c.crc32c(frame.payload) != frame.crc32c:
                return Unavailable(lid, f"entry {frame.entry_id}: CRC32C mismatch on the wire")
        return EntriesRead(lid, tuple(
            EntryFound(lid, f.entry_id, f.epoch, f.payload, f.length_after, lac)
            for f in frames), absent_ids, lac)

    async def _list(self, bookie_id: str, request: ListEntries) -> BookieReply:
        held: list[tuple[int, int]] = []
        first: int | None = request.first
        while first is not None:
            response = await self._send(
                bookie_id, "GET", replica_path(request.ledger_id, "entries"),
                params={"first": first, "last": request.last, "limit": LIST_PAGE_SIZE})
            refused = _or_unavailable(request.ledger_id, response)
            if refused is not None:
                return refused
            doc = _json(response)
            held.extend(held_pairs(doc["entries"]))
            first = doc.get("next_first")
        return EntriesHeld(request.ledger_id, tuple(held))

    async def _send(self, bookie_id: str, method: str, path: str, **kwargs: Any,
                    ) -> HttpResponse:
        url = self._url_of(bookie_id)
        if url is None:
            raise BookieUnreachable(f"bookie {bookie_id} has no known URL")
        return await self._http.request(url, method, path, **kwargs)


def _json(response: HttpResponse) -> dict[str, Any]:
    try:
        doc = json.loads(response.body)
    except ValueError as exc:
        raise BookieUnreachable(f"an answer that is not JSON: {response.body[:100]!r}") from exc
    if not isinstance(doc, dict):
        raise BookieUnreachable(f"an answer that is not a JSON object: {doc!r}")
    return doc


def _fenced(ledger_id: int, response: HttpResponse) -> Fenced | None:
    if response.status != 409:
        return None
    doc = _json(response)
    return Fenced(ledger_id, int(doc["fenced_epoch"]), int(doc["lac"]))


def _or_unavailable(ledger_id: int, response: HttpResponse) -> Unavailable | None:
    """None for a 2xx answer, else the refusal (read-only, full, broken, 401)."""
    if response.ok:
        return None
    try:
        doc = _json(response)
        reason = str(doc.get("detail") or doc.get("reason"))
    except BookieUnreachable:
        reason = response.body[:200].decode("utf-8", "replace")
    return Unavailable(ledger_id, f"HTTP {response.status}: {reason}")


def _entry_reply(ledger_id: int, entry_id: int, response: HttpResponse) -> BookieReply:
    if response.status == 404:
        try:
            lac = int(_json(response)["lac"])
        except (BookieUnreachable, KeyError, TypeError, ValueError):
            return Unavailable(ledger_id, "HTTP 404 without a replica answer")
        return NoEntry(ledger_id, entry_id, lac)
    refused = _fenced(ledger_id, response) or _or_unavailable(ledger_id, response)
    if refused is not None:
        return refused
    payload = response.body
    headers = response.headers
    if crc32c.crc32c(payload) != int(headers["x-crc32c"]):
        return Unavailable(ledger_id, f"entry {entry_id}: CRC32C mismatch on the wire")
    return EntryFound(ledger_id, entry_id, int(headers["x-epoch"]), payload,
                      int(headers["x-length-after"]), int(headers["x-last-add-confirmed"]))
