"""The HTTP crash workload: appenders that record every acknowledged entry, and
the verifier that reads each back byte for byte after a restart.

Shared by the SIGKILL test (``tests/app/test_crash_http.py``) and the power-loss
test (``tests/powerloss/``).  Payloads are self-checking (``tests/crash/workload``):
an entry that reached the disk without its acknowledgement being seen must still
be one of ours, whole, never garbage.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field

import httpx

from common.frames import FRAMES_MEDIA_TYPE, decode_download, encode_upload
from tests.crash.workload import make_payload, token_of

PASSWORD_HEADERS = {"X-Ledger-Password": "pw"}


@dataclass
class Ledger:
    ledger_id: int
    acked: dict[int, bytes] = field(default_factory=dict)
    lac_after_restart: int = -1
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, first_id: int, payloads: list[bytes]) -> None:
        with self.lock:
            for offset, payload in enumerate(payloads):
                previous = self.acked.setdefault(first_id + offset, payload)
                assert previous == payload, f"entry {first_id + offset} acknowledged twice"


class Round:
    """One run of the workload until the crash: counts acks, collects errors."""

    def __init__(self, url: str, kill_after_acks: int) -> None:
        self.url = url
        self.kill_after_acks = kill_after_acks
        self.acks = 0
        self.lock = threading.Lock()
        self.target_reached = threading.Event()
        self.stop = threading.Event()
        self.errors: list[str] = []

    def acknowledged(self) -> None:
        with self.lock:
            self.acks += 1
            if self.acks >= self.kill_after_acks:
                self.target_reached.set()


def worker(rnd: Round, ledger: Ledger, seed: int, batches: bool) -> None:
    """Append single entries (or frame batches of 1 to 5) until the server is gone."""
    rng = random.Random(seed)
    with httpx.Client(base_url=rnd.url, timeout=10.0) as client:
        n = 0
        while not rnd.stop.is_set():
            count = rng.randint(1, 5) if batches else 1
            payloads = [make_payload(f"{ledger.ledger_id}/{seed}/{n + i}") for i in range(count)]
            n += count
            try:
                if batches:
                    response = client.post(
                        f"/api/v1/ledgers/{ledger.ledger_id}/entries/batch",
                        content=encode_upload(payloads),
                        headers={**PASSWORD_HEADERS, "Content-Type": FRAMES_MEDIA_TYPE},
                    )
                else:
                    response = client.post(
                        f"/api/v1/ledgers/{ledger.ledger_id}/entries",
                        content=payloads[0],
                        headers={**PASSWORD_HEADERS, "Content-Type": "application/octet-stream"},
                    )
            except httpx.TransportError:
                return  # the server is gone: this request's fate is unknown
            if response.status_code == 503:
                continue  # back-pressure: retry with new data
            if response.status_code not in (200, 201):
                rnd.errors.append(f"{response.status_code} {response.text[:300]}")
                return
            body = response.json()
            first = body["first_entry_id"] if batches else body["entry_id"]
            ledger.record(first, payloads)
            rnd.acknowledged()


def verify(url: str, ledger: Ledger) -> dict[str, object]:
    """Every acknowledged entry reads back byte for byte, ids are dense up to the
    LAC, the LAC never goes back across restarts, and any entry written but not
    acknowledged is one of ours, whole.  Returns the ledger as the server has it."""
    with httpx.Client(base_url=url, timeout=60.0) as client:
        response = client.get(f"/api/v1/ledgers/{ledger.ledger_id}")
        assert response.status_code == 200, f"ledger {ledger.ledger_id}: {response.text}"
        info: dict[str, object] = response.json()
        lac = info["last_add_confirmed"]
        assert isinstance(lac, int)
        acked_max = max(ledger.acked, default=-1)
        assert lac >= acked_max, f"ledger {ledger.ledger_id}: LAC {lac} < acked {acked_max}"
        assert lac >= ledger.lac_after_restart, "LAC went backwards across a restart"
        response = client.get(
            f"/api/v1/ledgers/{ledger.ledger_id}/entries", headers={"Accept": FRAMES_MEDIA_TYPE}
        )
        assert response.status_code == 200, response.text
        frames = decode_download(response.content)
    assert [entry_id for entry_id, _, _ in frames] == list(range(lac + 1)), "ids not dense"
    for entry_id, _, payload in frames:
        if entry_id in ledger.acked:
            assert payload == ledger.acked[entry_id], f"entry {entry_id} differs after crash"
        else:
            # Written but never acknowledged: allowed to survive, but must be ours whole.
            token = token_of(payload)
            assert token.startswith(f"{ledger.ledger_id}/"), f"entry {entry_id}: {token}"
    ledger.lac_after_restart = lac
    return info
