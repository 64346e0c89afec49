"""The nodes' public HTTP API as the live Spark reads use it (driver and executors).

Four calls: a ledger (``GET /api/v1/ledgers/{id}``: state, last-add-confirmed,
mean entry size, where its local copy starts), a listing page (``GET
/api/v1/ledgers?after=…&metadata=…``), in cluster mode the nodes and a
ledger's fragments (``GET /api/v1/cluster``, ``/cluster/ledgers/{id}``), and
a range of entries as download frames (``GET …/entries/frames``).

Every call tries the given URLs in turn, from the preferred one, and comes
back to the first after a pause, for up to ``ATTEMPT_S`` seconds: any node of
a cluster answers any read, and a standalone node restarting comes back.  A
frame stream cut in the middle resumes at the next entry on the next node.
Every frame's entry id and CRC32C is checked before its row exists.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from common.errors import ConnectionLost, LedgerdError, NoSuchLedger, NotConfigured
from common.frames import FRAMES_MEDIA_TYPE, decode_download_stream
from common.headers import password_header
from streaming import error_from_problem

from .._format import crc32c
from ._read import segment_corrupt

log = logging.getLogger("ledgerd.offload.spark")

T = TypeVar("T")

ATTEMPT_S = 30.0
_PAUSE_S = 0.2
_TIMEOUT_S = 30.0
_CHUNK_BYTES = 1024 * 1024
_LIST_PAGE = 1000


@dataclass(frozen=True)
class LedgerView:
    """What a read plans with, from one ``GET /api/v1/ledgers/{id}``."""

    ledger_id: int
    state: str
    last_add_confirmed: int
    length: int
    entries: int
    created_at: float
    metadata: tuple[tuple[str, str], ...]
    local_deleted: bool = False
    local_first_entry_id: int = 0

    @property
    def closed(self) -> bool:
        return self.state == "CLOSED"

    @property
    def entry_bytes_mean(self) -> int:
        return max(1, self.length // self.entries) if self.entries else 1

    @property
    def s3_end_entry_id(self) -> int:
        """Entries below it have no local copy on the node any more."""
        return self.last_add_confirmed + 1 if self.local_deleted else self.local_first_entry_id

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> LedgerView:
        offload = body.get("offload") or {}
        return cls(ledger_id=int(body["ledger_id"]), state=str(body["state"]),
                   last_add_confirmed=int(body["last_add_confirmed"]),
                   length=int(body["length"]), entries=int(body["entries"]),
                   created_at=float(body["created_at"]),
                   metadata=tuple(sorted(dict(body.get("metadata") or {}).items())),
                   local_deleted=bool(offload.get("local_deleted", False)),
                   local_first_entry_id=int(offload.get("local_first_entry_id", 0)))


@dataclass(frozen=True)
class Fragment:
    first_entry_id: int
    urls: tuple[str, ...]  # of the bookies of its write set, in the placement's order


class NodeClient:
    """One connection pool to the nodes; thread-safe (httpx.Client is)."""

    def __init__(self, urls: tuple[str, ...], *, timeout_s: float = _TIMEOUT_S,
                 attempt_s: float = ATTEMPT_S) -> None:
        self.urls = urls
        self._attempt_s = attempt_s
        self._http = httpx.Client(timeout=timeout_s, limits=httpx.Limits(
            max_connections=32, max_keepalive_connections=32))
        self.requests = 0  # calls made, retries included (tests count them)
        # Learnt from the first answer to ``GET /api/v1/cluster``: a standalone
        # node (409) is never asked again.
        self._standalone = False
        self._good: str | None = None

    def close(self) -> None:
        self._http.close()

    def _order(self, prefer: tuple[str, ...]) -> list[str]:
        # The node that answered last comes before the others (a dead first URL
        # costs one failed connection per client, not one per call).
        good = (self._good,) if self._good is not None else ()
        return list(dict.fromkeys((*prefer, *good, *self.urls)))

    def _each_node(self, call: Callable[[str], T], prefer: tuple[str, ...] = ()) -> T:
        """``call(url)`` on the first node that answers; the last failure after ATTEMPT_S."""
        deadline = time.monotonic() + self._attempt_s
        last: Exception | None = None
        while True:
            for url in self._order(prefer):
                try:
                    self.requests += 1
                    answer = call(url)
                    self._good = url
                    return answer
                except (httpx.TransportError, _Unavailable) as exc:
                    last = exc
            if time.monotonic() >= deadline:
                break
            time.sleep(_PAUSE_S)
        raise ConnectionLost(f"no node answered ({', '.join(self.urls)}): {last}") from last

    def _json(self, path: str, *, ledger_id: int = -1,
              params: dict[str, Any] | list[tuple[str, Any]] | None = None) -> Any:
        def call(url: str) -> Any:
            response = self._http.get(url + path, params=params)
            _raise_for(response, ledger_id)
            return response.json()
        return self._each_node(call)

    def ledger(self, ledger_id: int) -> LedgerView | None:
        """The ledger, or None when no node knows it (deleted, or never created)."""
        try:
            return LedgerView.from_json(self._json(f"/api/v1/ledgers/{ledger_id}",
                                                   ledger_id=ledger_id))
        except NoSuchLedger:
            return None

    def list_ledgers(self, *, after: int | None,
                     metadata: tuple[tuple[str, str], ...] = ()) -> Iterator[LedgerView]:
        """Ledgers with an id above ``after`` (all when None), in id order, every page."""
        while True:
            params: list[tuple[str, Any]] = [("limit", _LIST_PAGE)]
            params += [("metadata", f"{key}={value}") for key, value in metadata]
            if after is not None:
                params.append(("after", after))
            page = self._json("/api/v1/ledgers", params=params)
            yield from (LedgerView.from_json(item) for item in page["ledgers"])
            if page.get("next_after") is None:
                return
            after = int(page["next_after"])

    def fragments(self, ledger_id: int) -> list[Fragment] | None:
        """The ledger's fragments with their ensemble's URLs; None when not in cluster
        mode (or the ledger is gone)."""
        if self._standalone:
            return None
        try:
            nodes = self._json("/api/v1/cluster")
            placement = self._json(f"/api/v1/cluster/ledgers/{ledger_id}", ledger_id=ledger_id)
        except NotConfigured:
            self._standalone = True
            return None
        except NoSuchLedger:
            return None
        url_of = {node["bookie_id"]: str(node["url"]).rstrip("/") for node in nodes["nodes"]}
        return [Fragment(int(f["first_entry_id"]),
                         tuple(url_of[b] for b in f["bookies"] if b in url_of))
                for f in placement["fragments"]]

    def frames(self, ledger_id: int, first: int, last: int, *, password: str | None = None,
               prefer: tuple[str, ...] = ()) -> Iterator[tuple[int, bytes, int]]:
        """``(entry_id, payload, crc32c)`` of entries ``first..last``, each checked.

        NoSuchLedger when the ledger is gone; a stream cut short resumes at the
        next entry (on the next node, then the others, for up to ATTEMPT_S)."""
        headers = {"Accept": FRAMES_MEDIA_TYPE}
        if password is not None:
            headers["X-Ledger-Password"] = password_header(password)
        next_id = first
        deadline = time.monotonic() + self._attempt_s
        failure: Exception | None = None
        while next_id <= last:
            progressed = False
            for url in self._order(prefer):
                path = f"/api/v1/ledgers/{ledger_id}/entries/frames"
                try:
                    self.requests += 1
                    with self._http.stream("GET", url + path, headers=headers,
                                           params={"start": next_id, "end": last}) as response:
                        if response.status_code != 200:
                            response.read()
                            _raise_for(response, ledger_id)
                        offset = 0
                        for entry_id, crc, payload in decode_download_stream(
                                response.iter_bytes(_CHUNK_BYTES)):
                            _check(ledger_id, url + path, offset, next_id, entry_id, crc,
                                   payload)
                            offset += 16 + len(payload)
                            next_id += 1
                            progressed = True
                            yield entry_id, payload, crc
                    if next_id <= last:
                        # A node answers up to its last-add-confirmed; one behind
                        # the planner's (a replica catching up) is asked again.
                        raise _Unavailable(f"{url} answered up to entry {next_id - 1} of "
                                           f"{last}")
                    return
                except (httpx.TransportError, ConnectionLost, _Unavailable) as exc:
                    failure = exc
                    log.info("frame stream interrupted, resuming", extra={
                        "ledger_id": ledger_id, "url": url, "next_entry_id": next_id,
                        "error": str(exc)})
                    if progressed:
                        break
            if progressed:
                deadline = time.monotonic() + self._attempt_s
            elif time.monotonic() >= deadline:
                raise ConnectionLost(f"ledger {ledger_id}: no node served entries "
                                     f"{next_id}..{last}: {failure}") from failure
            else:
                time.sleep(_PAUSE_S)


class _Unavailable(Exception):
    """A node answered 5xx (or short): try another, or again."""


def _raise_for(response: httpx.Response, ledger_id: int) -> None:
    if response.status_code < 400:
        return
    try:
        problem = response.json()
    except ValueError:
        problem = {"status": response.status_code, "code": "EIO", "detail": response.text}
    if response.status_code >= 500:
        raise _Unavailable(f"{response.request.url}: {response.status_code} "
                           f"{problem.get('detail', '')}")
    error: LedgerdError = error_from_problem(problem, ledger_id)
    if response.status_code == 409 and "cluster mode" in str(problem.get("detail", "")):
        error = NotConfigured(str(problem.get("detail")))
    raise error


def _check(ledger_id: int, source: str, offset: int, expected: int, entry_id: int, crc: int,
           payload: bytes) -> None:
    if entry_id != expected:
        raise segment_corrupt(ledger_id, expected, source, offset,
                              f"frame holds entry {entry_id}, expected {expected}")
    if crc32c(payload) != crc:
        raise segment_corrupt(ledger_id, entry_id, source, offset,
                              f"payload crc32c mismatch in entry {entry_id}")


_lock = threading.Lock()
_clients: dict[tuple[int, tuple[str, ...]], NodeClient] = {}


def client_for(urls: tuple[str, ...]) -> NodeClient:
    """One client per node list per process (executors reuse Python workers), keyed by
    process id too: a forked process must not share the parent's sockets."""
    key = (os.getpid(), urls)
    with _lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = NodeClient(urls)
        return client
