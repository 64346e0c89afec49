"""Forwarding a v1 call to a ledger's writer: one hop (docs/cluster.md §1, §12.2).

The writer's ``/internal/v1/ledgers/{id}/forward/…`` routes run the call as if it
had arrived there, marked forwarded so it never hops again.  Its problem+json
errors come back as the same classes of the error tree; no answer at all is
``BookieUnreachable`` (503: retry).
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from cluster import (
    BATCH_MEDIA_TYPE,
    FORWARDED_HEADER,
    PASSWORD_KEY_PATH,
    HttpPool,
    HttpResponse,
    NewEntry,
    batch_runs,
    encode_batch,
    forward_path,
)
from common import errors
from ledger import (
    BatchAddResult,
    LedgerInfo,
    LedgerLimits,
    LedgerState,
    OffloadInfo,
    OffloadState,
)

TIMEOUT_S = 35.0  # beyond the writer's own wait for an acknowledgement
# How often a call in flight checks that waiting still makes sense (the writer still
# a member, this node still holding its lease): a partition answers 503 in about
# the membership TTL, not in TIMEOUT_S.
CHECK_EVERY_S = 0.25
# Asking the writer for its end (a read): past this, the end comes from its bookies.
ASK_END_TIMEOUT_S = 2.0

_BY_CODE: dict[str, type[errors.LedgerdError]] = {
    "EUA": errors.Unauthorized,
    "EFENCED": errors.WriterSuperseded,
    "ECLOSED": errors.LedgerClosed,
    "ECONFLICT": errors.EntryConflict,
    "ENOTSEALED": errors.NotSealed,
    "EREADONLY": errors.ReadOnly,
    "ETOOMANYREQUESTS": errors.MetadataConflict,
    "ETOOMANYLEDGERS": errors.TooManyLedgers,
}


class ForwardClient:
    def __init__(self, *, token: str, timeout_s: float = TIMEOUT_S,
                 ssl_context: ssl.SSLContext | None = None,
                 worth_waiting: Callable[[str], bool] | None = None) -> None:
        """``worth_waiting(url)``: whether a call to the writer at ``url`` may still
        be answered usefully; a call in flight gives up (``NotReady``) once not."""
        self._worth_waiting = worth_waiting
        self._http = HttpPool(headers={"Authorization": f"Bearer {token}",
                                       FORWARDED_HEADER: "1"}, timeout_s=timeout_s,
                              ssl_context=ssl_context)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def append(self, url: str, ledger_id: int, payloads: Sequence[bytes], *,
                     password: str, expected_first_entry_id: int | None = None,
                     ) -> BatchAddResult:
        """One batch at the ledger's writer (a single add is a batch of one)."""
        body = encode_batch([NewEntry(0, p, 0) for p in payloads])
        params = {} if expected_first_entry_id is None else {
            "first_entry_id": expected_first_entry_id}
        response = await self._send(url, "POST", forward_path(ledger_id, "entries", "batch"),
                                    ledger_id, body=body, params=params, headers={
                                        **_password(password),
                                        "Content-Type": BATCH_MEDIA_TYPE})
        doc = _json(response)
        return BatchAddResult(first_entry_id=int(doc["first_entry_id"]),
                              last_entry_id=int(doc["last_entry_id"]),
                              last_add_confirmed=int(doc["last_add_confirmed"]),
                              already_present=response.status == 200)

    async def ledger_call(self, url: str, ledger_id: int, action: str, *,
                          password: str | None = None) -> LedgerInfo | None:
        """``close``, ``fence``, ``delete`` (None) or ``ledger`` (the writer's view)."""
        method = {"ledger": "GET", "delete": "DELETE"}.get(action, "POST")
        headers = {} if password is None else _password(password)
        timeout_s = ASK_END_TIMEOUT_S if action == "ledger" else None
        response = await self._send(url, method, forward_path(ledger_id, action), ledger_id,
                                    headers=headers, timeout_s=timeout_s)
        return None if action == "delete" else ledger_info(_json(response))

    async def close_idle(self, url: str, ledger_id: int, revision: int) -> bool:
        """Ask the live writer to close an idle ledger the auditor found naming a gone
        bookie (docs/cluster.md §9), if its metadata is still at ``revision``; True
        when it closed it.  Node to node only (the cluster token stands for the
        password: the auditor has none)."""
        response = await self._send(url, "POST", forward_path(ledger_id, "close-idle"),
                                    ledger_id, params={"revision": revision})
        return bool(_json(response)["closed"])

    async def password_key(self, url: str) -> bytes:
        """The cluster's password key, from the node at ``url`` (node/_cluster_password_key.py);
        ``NotReady`` while it has not agreed one, ``BookieUnreachable`` when it does
        not answer (or refuses this node's token)."""
        response = await self._http.request(url, "GET", PASSWORD_KEY_PATH,
                                            timeout_s=ASK_END_TIMEOUT_S)
        if response.status == 401:
            raise errors.BookieUnreachable(f"{url} refused this node's CLUSTER_TOKEN")
        if not response.ok:
            raise error_of(response, 0)
        try:
            return bytes.fromhex(str(_json(response)["key"]))
        except (KeyError, ValueError) as exc:
            raise errors.BookieUnreachable(f"{url} answered no password key") from exc

    async def _send(self, url: str, method: str, path: str, ledger_id: int,
                    **kwargs: Any) -> HttpResponse:
        call = asyncio.ensure_future(self._http.request(url, method, path, **kwargs))
        try:
            while not call.done():
                await asyncio.wait({call}, timeout=CHECK_EVERY_S)
                if not call.done() and self._worth_waiting is not None \
                        and not self._worth_waiting(url):
                    # The outcome of an add is unknown to the client either way: it
                    # retries elsewhere, with ?entry_id for exactly once.
                    raise errors.NotReady(f"ledger {ledger_id}: its writer left the cluster "
                                          "or this node lost its lease; retry")
            response = call.result()
        except errors.BookieUnreachable as exc:
            raise errors.BookieUnreachable(f"the writer of ledger {ledger_id} did not "
                                           f"answer: {exc}") from exc
        finally:
            call.cancel()
        if response.ok:
            return response
        raise error_of(response, ledger_id)


# Forwarded single adds waiting for one call: each payload and its answer.
_Adds = list[tuple[bytes, "asyncio.Future[BatchAddResult]"]]


class ForwardedAdds:
    """Single adds this node forwards to a ledger's writer, coalesced as a group
    commit is: while one call for a ledger (one writer, one password) is in
    flight, the adds made meanwhile wait and then go together as one batch call
    (within the batch limits), each answered with its own entry id.  An idle
    ledger's add goes at once.  An add with ``?entry_id`` goes on its own (it may
    have to be compared, not appended).  A batch fails as a whole: each add in it
    gets the error, its outcome unknown, as a forwarded add's is when its call
    fails."""

    def __init__(self, forward: ForwardClient, limits: LedgerLimits,
                 spawn: Callable[[Coroutine[Any, Any, None]], None]) -> None:
        self._forward = forward
        self._limits = limits
        self._spawn = spawn
        self._queued: dict[tuple[str, int, str], _Adds] = {}
        self._in_flight: set[tuple[str, int, str]] = set()

    async def add(self, url: str, ledger_id: int, payload: bytes, *, password: str,
                  ) -> BatchAddResult:
        key = (url, ledger_id, password)
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[BatchAddResult] = loop.create_future()
        self._queued.setdefault(key, []).append((payload, answer))
        if key not in self._in_flight:
            self._in_flight.add(key)
            loop.call_soon(self._flush, key)  # after the adds made in this turn
        return await answer

    def _flush(self, key: tuple[str, int, str]) -> None:
        """Send what waits for ``key``, or mark it idle when nothing does."""
        queue = self._queued.pop(key, None)
        if not queue:
            self._in_flight.discard(key)
            return
        runs = batch_runs([len(payload) for payload, _ in queue],
                          count_max=self._limits.batch_entry_count_max,
                          bytes_max=self._limits.batch_size_bytes_max)
        self._spawn(self._send_then_next(key, [queue[start:end] for start, end in runs]))

    async def _send_then_next(self, key: tuple[str, int, str],
                              calls: list[_Adds],
                              ) -> None:
        try:
            await asyncio.gather(*(self._send(key, adds) for adds in calls))
        finally:
            self._flush(key)

    async def _send(self, key: tuple[str, int, str],
                    adds: _Adds) -> None:
        url, ledger_id, password = key
        try:
            batch = await self._forward.append(url, ledger_id, [p for p, _ in adds],
                                               password=password)
        except BaseException as exc:
            error = exc if isinstance(exc, Exception) else errors.NotReady("stopping")
            for _payload, answer in adds:
                if not answer.done():
                    answer.set_exception(error)
            if not isinstance(exc, Exception):
                raise
            return
        for index, (_payload, answer) in enumerate(adds):
            if not answer.done():
                entry_id = batch.first_entry_id + index
                answer.set_result(BatchAddResult(entry_id, entry_id, batch.last_add_confirmed))


def _json(response: HttpResponse) -> dict[str, Any]:
    try:
        doc = json.loads(response.body)
    except ValueError as exc:
        raise errors.BookieUnreachable(f"the writer answered {response.status} without "
                                       "JSON") from exc
    if not isinstance(doc, dict):
        raise errors.BookieUnreachable(f"the writer answered {doc!r}")
    return doc


def _password(password: str) -> dict[str, str]:
    # Latin-1 is what HTTP carries; the routes decode UTF-8 back (app.deps.ledger_password).
    return {"X-Ledger-Password": password.encode("utf-8").decode("latin-1")}


def error_of(response: HttpResponse, ledger_id: int) -> errors.LedgerdError:
    """The error tree's class of a problem+json answer."""
    try:
        doc = _json(response)
        code, detail = str(doc.get("code", "")), str(doc.get("detail", ""))
    except errors.BookieUnreachable:
        code, detail = "", response.body[:200].decode("utf-8", "replace")
    status = response.status
    detail = f"(from the writer) {detail}"
    if code == "ENOLEDGER":
        return errors.NoSuchLedger(ledger_id)
    if status == 413:
        return errors.EntryTooLarge(detail)
    if status == 401:
        return errors.BookieUnreachable(f"the writer refused this node's token: {detail}")
    cls = _BY_CODE.get(code)
    if cls is not None:
        return cls(detail)
    if status == 503:
        return errors.NotReady(detail)
    if 400 <= status < 500:
        return errors.BadRequest(detail)
    return errors.BookieUnreachable(f"the writer failed: HTTP {status} {detail}")


def ledger_info(doc: dict[str, Any]) -> LedgerInfo:
    """A v1 Ledger JSON (app.models.Ledger) back into the engine's value."""
    off = doc.get("offload") or {}
    return LedgerInfo(
        ledger_id=int(doc["ledger_id"]), state=LedgerState(doc["state"]),
        last_add_confirmed=int(doc["last_add_confirmed"]), length=int(doc["length"]),
        entries=int(doc["entries"]), created_at=float(doc["created_at"]),
        closed_at=None if doc.get("closed_at") is None else float(doc["closed_at"]),
        metadata=dict(doc.get("metadata") or {}),
        offload=OffloadInfo(
            state=OffloadState(off.get("state", "NONE")), bucket=off.get("bucket"),
            key_prefix=off.get("key_prefix"), segment_bytes=int(off.get("segment_bytes") or 0),
            offloaded_at=off.get("offloaded_at"), local_deleted=bool(off.get("local_deleted")),
            error=off.get("error")))
