"""JSON batches (issue 14, item 1): the password and the route's own cap are
checked before the body is read, entries are counted while parsing, and the
body is decoded off the event loop."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from app.json_batch import MalformedJson, json_batch_bytes_max, parse_json_batch
from bench._harness import percentile
from common.errors import BadRequest
from common.units import MiB

from . import _raw_http as raw_http
from .conftest import LiveServer, assert_problem, create_ledger, pw

# --- the parser ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "payloads"),
    [
        (b'{"entries": ["YQ==", "", "Y2Nj"]}', [b"a", b"", b"ccc"]),
        (b' \n{ "entries" :\t[ ] }\r\n', []),
        (b'{"entries": ["Y\\/8="]}', [b"c\xff"]),  # "\/" is JSON for "/" (PHP writes it)
        (b'{"entries": ["\\u0059Q=="]}', [b"a"]),
        (json.dumps({"entries": ["YQ==", "Yg=="]}, indent=4).encode(), [b"a", b"b"]),
    ],
)
def test_valid_bodies_give_their_payloads(body, payloads):
    assert parse_json_batch(body, count_max=3) == payloads
    assert parse_json_batch(bytearray(body), count_max=3) == payloads


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        (b"", ()),
        (b"{", ()),
        (b"[]", ()),
        (b"{}", ("entries",)),
        (b'{"entries": "x"}', ("entries",)),
        (b'{"entries": [1]}', ("entries", 0)),
        (b'{"entries": ["YQ==",]}', ("entries", 1)),
        (b'{"entries": ["YQ=="', ("entries", 0)),
        (b'{"entries": ["YQ==', ("entries", 0)),
        (b'{"entries": ["YQ\\"]}', ("entries", 0)),
        (b'{"entries": [], "x": 1}', ("x",)),
        (b'{"entries": [], "entries": []}', ("entries",)),
        (b'{"entries": []} []', ()),
        (b'{"entries": ["\\x"]}', ("entries", 0)),
    ],
)
def test_malformed_bodies_say_where(body, loc):
    with pytest.raises(MalformedJson) as caught:
        parse_json_batch(body, count_max=3)
    assert caught.value.loc == loc


@pytest.mark.parametrize("text", ["not base64!", "YQ", "YQ==YQ==", "=", "Y\nQ==", "é"])
def test_strings_that_are_not_base64_are_bad_requests(text):
    body = json.dumps({"entries": ["", text]}).encode()
    with pytest.raises(BadRequest, match=r"entries\[1\] is not valid base64"):
        parse_json_batch(body, count_max=3)


def test_parsing_stops_at_the_first_entry_over_the_count():
    """Proves the parser never holds more than count_max + 1 entries: the body
    after entry count_max + 1 is not even JSON, yet the answer is the count."""
    body = b'{"entries": [' + b'"",' * 4 + b"garbage"
    with pytest.raises(BadRequest, match="at most 3 entries"):
        parse_json_batch(body, count_max=3)


@pytest.mark.parametrize(("size_max", "count_max"), [(8 * MiB, 10_000), (4096, 10), (10, 20)])
def test_the_cap_fits_the_largest_valid_batches(size_max, count_max):
    """The cap bounds every valid batch, pretty-printed too: base64's padding
    wastes the most with 1-byte entries, the envelope the least with one entry."""
    singles = [b"x"] * min(count_max, size_max)
    singles[-1] += b"x" * (size_max - len(singles))
    shapes = [[b"x" * size_max], singles, [b""] * count_max]
    cap = json_batch_bytes_max(size_max, count_max)
    for payloads in shapes:
        entries = [base64.b64encode(p).decode() for p in payloads]
        for indent in (None, 4):
            body = json.dumps({"entries": entries}, indent=indent).encode()
            assert len(body) <= cap, (len(payloads), indent, len(body), cap)
            assert parse_json_batch(body, count_max=count_max) == payloads


# --- the route ----------------------------------------------------------------


def test_a_wrong_password_or_an_unknown_ledger_is_refused_before_the_body(client):
    """A body that is not even JSON: the answer is about the password or the
    ledger, so none of it was parsed."""
    ledger_id = create_ledger(client)["ledger_id"]
    garbage = b"{" * 1000
    url = f"/api/v1/ledgers/{ledger_id}/entries/batch"
    headers = {"Content-Type": "application/json"}
    assert_problem(client.post(url, content=garbage, headers={**headers, **pw("x")}), 403, "EUA")
    assert_problem(client.post("/api/v1/ledgers/987654/entries/batch", content=garbage,
                               headers={**headers, **pw()}), 404, "ENOLEDGER")


def test_a_body_over_the_json_cap_is_refused_by_its_declared_size(make_client):
    client = make_client(max_batch_entries=10, max_batch_size=4096, max_entry_size=4096)
    ledger_id = create_ledger(client)["ledger_id"]
    cap = json_batch_bytes_max(4096, 10)
    body = b" " * (cap + 1)  # whitespace: valid JSON framing, yet over the cap
    response = client.post(f"/api/v1/ledgers/{ledger_id}/entries/batch", content=body,
                           headers={**pw(), "Content-Type": "application/json"})
    assert_problem(response, 413, "EBADREQ")
    assert "MAX_BATCH_ENTRIES" in response.json()["detail"]


def test_too_many_entries_is_400_and_writes_nothing(make_client):
    client = make_client(max_batch_entries=10)
    ledger_id = create_ledger(client)["ledger_id"]
    response = client.post(f"/api/v1/ledgers/{ledger_id}/entries/batch",
                           json={"entries": ["YQ=="] * 11}, headers=pw())
    assert_problem(response, 400, "EBADREQ")
    assert client.get(f"/api/v1/ledgers/{ledger_id}").json()["last_add_confirmed"] == -1


# --- a real server under attack -----------------------------------------------

ATTACKERS = 4
ATTACK_S = 4.0
HEARTBEAT_P99_S_MAX = 0.100
RSS_GROWTH_BYTES_MAX = 200 * MiB
BODY_BYTES = 64 * MiB  # MAX_REQUEST_BODY_SIZE's default
# Left to autotuning, each attacking connection keeps megabytes in flight on
# the loopback device, and the probe's packets queue behind them in the kernel:
# a bare uvicorn app that answers without reading bodies then shows the same
# heartbeat latency as ledgerd, gone with small send buffers.  That would
# measure the kernel's queues, not the server's event loop.
ATTACKER_SEND_BUFFER_BYTES = 64 * 1024


def _tiny_strings(size_bytes: int) -> bytes:
    """A JSON batch of empty base64 strings, at most ``size_bytes`` long: three
    bytes an entry."""
    head, tail = b'{"entries": [', b'""]}'
    return head + b'"",' * ((size_bytes - len(head) - len(tail)) // 3) + tail


@pytest.fixture(scope="module")
def attacked_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    # A 64 MiB journal: its window allows the default 8 MiB batches, so the JSON
    # cap is the default one (about 11 MB).
    server = LiveServer(tmp_path_factory.mktemp("json") / "data",
                        {"journal_capacity": "64MiB"}).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.timeout(120)
def test_json_attack_bodies_neither_stall_the_server_nor_blow_its_memory(attacked_server):
    """Proves item 1 end to end: while 4 clients send 64 MiB bodies of tiny base64
    strings (wrong password; right password with and without a Content-Length)
    and bodies as large as the JSON cap of tiny strings (right password), the
    event loop keeps answering /heartbeat (p99 < 100 ms) and the server's RSS
    grows by less than 200 MiB.  Before the fix each such body was parsed whole
    on the event loop: seconds of stall and about a gigabyte per request."""
    server = attacked_server
    with httpx.Client(base_url=server.url, timeout=60) as client:
        ledger_id = create_ledger(client)["ledger_id"]
        path = f"/api/v1/ledgers/{ledger_id}/entries/batch"
        ok = client.post(path, headers=pw(), json={"entries": ["YQ=="] * 100})
        assert ok.status_code == 201, ok.text
    huge = _tiny_strings(BODY_BYTES)
    capped = _tiny_strings(json_batch_bytes_max(8 * MiB, 10_000))
    json_type = {"Content-Type": "application/json"}
    attacks: list[tuple[dict[str, str], bytes, bool, int]] = [
        ({**json_type, **pw("wrong")}, huge, False, 403),
        ({**json_type, **pw()}, huge, False, 413),
        ({**json_type, **pw()}, capped, False, 400),
        ({**json_type, **pw()}, huge, True, 413),  # chunked: no size declared
    ]
    baseline_rss = server.rss_bytes()
    stop = threading.Event()
    answers: list[tuple[int, int]] = []
    failures: list[BaseException] = []

    def attacker(n: int) -> None:
        turn = n
        try:
            while not stop.is_set():
                headers, body, chunked, expected = attacks[turn % len(attacks)]
                status = raw_http.post(server.url, path, headers, body, chunked=chunked,
                                       send_buffer_bytes=ATTACKER_SEND_BUFFER_BYTES)
                answers.append((status, expected))
                turn += 1
        except BaseException as exc:  # reported by the main thread
            failures.append(exc)

    threads = [threading.Thread(target=attacker, args=(n,)) for n in range(ATTACKERS)]
    for thread in threads:
        thread.start()
    latencies, peak_rss = [], baseline_rss
    deadline = time.monotonic() + ATTACK_S
    with httpx.Client(base_url=server.url, timeout=30) as probe:
        while time.monotonic() < deadline:
            started = time.perf_counter()
            assert probe.get("/heartbeat").status_code == 200
            latencies.append(time.perf_counter() - started)
            peak_rss = max(peak_rss, server.rss_bytes())
            time.sleep(0.002)  # the probe's pace, not synchronisation
    stop.set()
    for thread in threads:
        thread.join()
    assert failures == []
    assert len(answers) >= ATTACKERS, answers  # the attack did run
    assert all(status == expected for status, expected in answers), answers
    p99 = percentile(latencies, 99)
    growth = peak_rss - baseline_rss
    print(f"heartbeat p50 {percentile(latencies, 50) * 1e3:.1f} ms, p99 {p99 * 1e3:.1f} ms "
          f"over {len(latencies)} probes, max {max(latencies) * 1e3:.1f} ms; "
          f"RSS +{growth / MiB:.0f} MiB; {len(answers)} attack requests")
    assert p99 < HEARTBEAT_P99_S_MAX, sorted(latencies)[-10:]
    assert growth < RSS_GROWTH_BYTES_MAX, growth / MiB
