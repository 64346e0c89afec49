"""The workload: clients in the lab's ``client`` namespace calling random nodes, and
the history they record.

- **Writers**, one per ledger at a time (the ledger's only client writer, as a
  BookKeeper client is): single adds with ``?entry_id=N``, batches with
  ``?first_entry_id=N`` and append streams opened with ``next_entry_id``; an
  attempt without an answer (timeout, 503, EFENCED: "may or may not be in") is
  retried with the same bytes and id through another random node until it is
  answered.  Now and then a writer closes its ledger (``/close`` or ``/fence``, at
  random) and creates the next one.
- **Readers**: ledger state (the LAC, ``GET /ledgers/{id}``), single entries
  (bytes and ``X-Last-Add-Confirmed``), and one past a closed ledger's end.

Every payload is unique: ``seed:ledger:intended id:process:counter|`` padded to a
random length, so the checker tells which write a stored entry came from.  Every
attempt is one operation in the history with its invoke and completion times
(this process's monotonic clock, which no nemesis touches), the node it went to,
and its outcome: ``ok``, ``fail`` (a definite refusal) or ``info`` (unknown).
"""

from __future__ import annotations

import asyncio
import base64
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from streaming import AppendStream

from .lab import entered

PW = {"X-Ledger-Password": "pw"}
# Answers after which the outcome of an add is unknown and a retry is right.
RETRY_CODES = {"EFENCED", "EIO", "ETOOMANYREQUESTS", "EUNAVAILABLE"}


def make_payload(token: str, length: int) -> bytes:
    return (token + "|").ljust(length, "x").encode()


def token_of(payload: bytes) -> str:
    return payload.split(b"|", 1)[0].decode(errors="replace")


class History:
    """Operations in completion order; thread safe."""

    def __init__(self) -> None:
        self.ops: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def record(self, op: dict[str, Any]) -> None:
        with self._lock:
            op["i"] = len(self.ops)
            self.ops.append(op)


@dataclass
class Shared:
    """What the clients know of each other: ledgers, what was acked, closes."""

    ledgers: list[int] = field(default_factory=list)
    acked_top: dict[int, int] = field(default_factory=dict)
    closed_end: dict[int, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


class Client:
    """One logical process of the history."""

    def __init__(self, name: str, urls: dict[str, str], history: History, shared: Shared,
                 rng: random.Random, seed: int, timeout_s: float) -> None:
        self.name = name
        self.urls = urls
        self.history = history
        self.shared = shared
        self.rng = rng
        self.seed = seed
        self.timeout_s = timeout_s
        self.http = httpx.Client(timeout=timeout_s)
        self.counter = 0

    def node(self) -> tuple[str, str]:
        name = self.rng.choice(sorted(self.urls))
        return name, self.urls[name]

    def call(self, kind: str, ledger: int | None, fields: dict[str, Any], method: str,
             path: str, **kwargs: Any) -> tuple[dict[str, Any], httpx.Response | None]:
        node, url = self.node()
        op: dict[str, Any] = {"p": self.name, "f": kind, "ledger": ledger, "node": node,
                              **fields, "t0": time.monotonic()}
        reply: httpx.Response | None = None
        try:
            reply = self.http.request(method, url + path, **kwargs)
        except httpx.HTTPError as exc:
            op.update(outcome="info", error=type(exc).__name__)
        op["t1"] = time.monotonic()
        if reply is not None:
            op["status"] = reply.status_code
            if reply.status_code >= 400:
                try:
                    op["code"] = reply.json().get("code")
                except ValueError:
                    op["code"] = None
                definite = reply.status_code in (400, 403, 404, 409, 413, 422)
                op["outcome"] = "fail" if definite and op["code"] not in RETRY_CODES else "info"
            else:
                op["outcome"] = "ok"
        return op, reply

    def pause(self) -> None:
        time.sleep(self.rng.uniform(0.01, 0.05))  # pacing: two cores for the whole lab


class Writer(Client):
    def run(self, stop: threading.Event, client_netns: str) -> None:
        with entered(client_netns):
            ledger: int | None = None
            next_id = 0
            while not stop.is_set():
                if ledger is None:
                    ledger = self.create(stop)
                    next_id = 0
                    continue
                roll = self.rng.random()
                if roll < 0.04 and next_id > 3:
                    self.close(ledger, stop)
                    ledger = None
                    continue
                if roll < 0.6:
                    done = self.add(ledger, next_id, [self.fresh(ledger, next_id)], stop)
                elif roll < 0.85:
                    count = self.rng.randint(2, 5)
                    done = self.add(ledger, next_id, [self.fresh(ledger, next_id + k)
                                                      for k in range(count)], stop)
                else:
                    done = self.stream(ledger, next_id, stop)
                if done is None:  # the ledger cannot go on (stop, conflict, closed)
                    if not stop.is_set():
                        self.close(ledger, stop)
                    ledger = None
                else:
                    next_id = done
                    with self.shared.lock:
                        self.shared.acked_top[ledger] = next_id - 1
                self.pause()

    def fresh(self, ledger: int, entry_id: int) -> bytes:
        self.counter += 1
        token = f"{self.seed}:{ledger}:{entry_id}:{self.name}:{self.counter}"
        return make_payload(token, self.rng.randint(len(token) + 1, 300))

    def create(self, stop: threading.Event) -> int | None:
        while not stop.is_set():
            op, reply = self.call("create", None, {}, "POST", "/api/v1/ledgers", json={
                "password": "pw", "ensemble_size": 3, "write_quorum": 3, "ack_quorum": 2})
            if reply is not None and reply.status_code == 201:
                op["ledger"] = reply.json()["ledger_id"]
            self.history.record(op)
            if op["outcome"] == "ok":
                with self.shared.lock:
                    self.shared.ledgers.append(op["ledger"])
                return int(op["ledger"])
            time.sleep(self.rng.uniform(0.1, 0.3))  # nothing to do until a node answers
        return None

    def add(self, ledger: int, first: int, payloads: list[bytes],
            stop: threading.Event) -> int | None:
        """Single add (one payload) or batch, retried until answered; the next id,
        or None when the ledger cannot go on."""
        attempt = 0
        tokens = [token_of(p) for p in payloads]
        while not stop.is_set():
            attempt += 1
            fields = {"first": first, "last": first + len(payloads) - 1, "tokens": tokens,
                      "lengths": [len(p) for p in payloads], "attempt": attempt}
            if len(payloads) == 1:
                op, reply = self.call("add", ledger, fields, "POST",
                                      f"/api/v1/ledgers/{ledger}/entries", content=payloads[0],
                                      headers=PW, params={"entry_id": first})
            else:
                body = {"entries": [base64.b64encode(p).decode() for p in payloads]}
                op, reply = self.call("batch", ledger, fields, "POST",
                                      f"/api/v1/ledgers/{ledger}/entries/batch", json=body,
                                      headers=PW, params={"first_entry_id": first})
            if op["outcome"] == "ok" and reply is not None:
                doc = reply.json()
                op["lac"] = doc.get("last_add_confirmed")
                op["acked_first"] = doc.get("entry_id", doc.get("first_entry_id"))
            self.history.record(op)
            if op["outcome"] == "ok":
                return first + len(payloads)
            if op["outcome"] == "fail":
                return None
            time.sleep(self.rng.uniform(0.05, 0.3))  # backoff before the retry
        return None

    def stream(self, ledger: int, first: int, stop: threading.Event) -> int | None:
        """A few messages over one append stream; what it left unacknowledged is
        retried as one batch from the first unacked id (exactly once)."""
        messages: list[list[bytes]] = []
        next_id = first
        for _ in range(self.rng.randint(2, 4)):
            count = self.rng.randint(1, 3)
            messages.append([self.fresh(ledger, next_id + k) for k in range(count)])
            next_id += count
        node, url = self.node()
        acked: list[Any] = []
        op: dict[str, Any] = {"p": self.name, "f": "stream", "ledger": ledger, "node": node,
                              "first": first, "last": next_id - 1,
                              "tokens": [token_of(p) for m in messages for p in m],
                              "lengths": [len(p) for m in messages for p in m],
                              "attempt": 1, "t0": time.monotonic()}

        async def send() -> None:
            stream = await asyncio.wait_for(AppendStream.open(
                url, ledger, password="pw", next_entry_id=first, reconnect_attempts=1,
                reconnect_delay_s=0.1, open_timeout=self.timeout_s), self.timeout_s)
            try:
                futures = [await stream.send(m) for m in messages]
                for future in futures:
                    acked.append(await asyncio.wait_for(future, self.timeout_s))
            finally:
                await asyncio.wait_for(stream.close(), self.timeout_s)
        try:
            asyncio.run(send())
            op["outcome"] = "ok"
        # Every failure leaves the unacked part unknown; a close cut short by its
        # timeout can surface as CancelledError from the client's drain.
        except (Exception, asyncio.CancelledError) as exc:
            op.update(outcome="info", error=type(exc).__name__)
        op["t1"] = time.monotonic()
        if acked:
            op["acked_last"] = acked[-1].last_entry_id
            op["lac"] = acked[-1].last_add_confirmed
        self.history.record(op)
        if op["outcome"] == "ok":
            return next_id
        done = first + sum(len(m) for m in messages[:len(acked)])
        rest = [p for m in messages[len(acked):] for p in m]
        return self.add(ledger, done, rest, stop) if rest else done

    def close(self, ledger: int, stop: threading.Event) -> None:
        """Close (or fence: in cluster mode both close) until answered, then leave
        the ledger to the readers."""
        kind = self.rng.choice(("close", "fence"))
        for _ in range(20):
            if stop.is_set():
                return
            op, reply = self.call(kind, ledger, {}, "POST",
                                  f"/api/v1/ledgers/{ledger}/{kind}", headers=PW)
            if reply is not None and op["outcome"] == "ok":
                doc = reply.json()
                op["state"], op["lac"] = doc.get("state"), doc.get("last_add_confirmed")
                with self.shared.lock:
                    self.shared.closed_end[ledger] = int(op["lac"])
            self.history.record(op)
            if op["outcome"] != "info":
                return
            time.sleep(self.rng.uniform(0.1, 0.3))  # backoff before the retry


class Reader(Client):
    def run(self, stop: threading.Event, client_netns: str) -> None:
        with entered(client_netns):
            while not stop.is_set():
                with self.shared.lock:
                    ledgers = list(self.shared.ledgers)
                if not ledgers:
                    time.sleep(0.1)  # no ledger yet
                    continue
                ledger = self.rng.choice(ledgers)
                with self.shared.lock:
                    top = self.shared.acked_top.get(ledger, -1)
                    end = self.shared.closed_end.get(ledger)
                roll = self.rng.random()
                if roll < 0.5:
                    op, reply = self.call("state", ledger, {}, "GET",
                                          f"/api/v1/ledgers/{ledger}")
                    if reply is not None and op["outcome"] == "ok":
                        doc = reply.json()
                        op["state"], op["lac"] = doc["state"], doc["last_add_confirmed"]
                else:
                    if end is not None and roll > 0.85:
                        entry = end + 1
                    else:
                        entry = self.rng.randint(0, top) if top >= 0 else 0
                    op, reply = self.call("read", ledger, {"entry": entry}, "GET",
                                          f"/api/v1/ledgers/{ledger}/entries/{entry}")
                    if reply is not None and op["outcome"] == "ok":
                        op["token"] = token_of(reply.content)
                        op["length"] = len(reply.content)
                        op["intact"] = reply.content == make_payload(op["token"],
                                                                     len(reply.content))
                        op["lac"] = int(reply.headers["X-Last-Add-Confirmed"])
                self.history.record(op)
                self.pause()
