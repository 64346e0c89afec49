"""In-process tests of the admin endpoints, read-only mode, metrics and the no-op,
and of the service's lifecycle."""

from __future__ import annotations

import gc
import threading
import time

from app import ServiceSettings, create_app
from common.collector import YOUNG_COLLECTION_THRESHOLD

from .conftest import TestClient, assert_problem, create_ledger, pw, service_settings


def test_heartbeat_ready_state_info(client):
    assert client.get("/heartbeat").json() == {"status": "OK"}
    assert client.get("/api/v1/bookie/is_ready").json() == {"ready": True, "read_only": False}
    assert client.get("/api/v1/bookie/state").json() == {
        "running": True,
        "read_only": False,
        "shutting_down": False,
        "available_for_high_priority_writes": True,
    }
    info = client.get("/api/v1/bookie/info").json()
    assert info["total_space"] >= info["free_space"] > 0
    assert info["read_only"] is False
    assert info["gc_enabled"] is True and info["offload_enabled"] is False
    assert info["cluster"] == "default"


def test_storage_views(client):
    ledger_id = create_ledger(client)["ledger_id"]
    for _i in range(20):
        client.post(f"/api/v1/ledgers/{ledger_id}/entries", content=b"x" * 10_000, headers=pw())
    mark = client.get("/api/v1/bookie/last_log_mark").json()
    assert all(isinstance(v, int) for v in mark.values()) and mark
    files = client.get("/api/v1/bookie/list_disk_file").json()["files"]
    assert any(f["path"].startswith("journal") for f in files)
    assert all(f["size"] >= 0 for f in files)
    logs = client.get("/api/v1/bookie/entrylogs").json()["entry_logs"]
    for log in logs:
        assert set(log) == {"log_id", "size", "remaining", "usage", "ledgers"}
        assert 0.0 <= log["usage"] <= 1.0


def test_gc_endpoints_without_gc_are_409(make_client):
    client = make_client(gc_enabled=False)
    for method, path in [
        ("PUT", "/api/v1/bookie/gc"),
        ("GET", "/api/v1/bookie/gc"),
        ("GET", "/api/v1/bookie/gc_details"),
        ("PUT", "/api/v1/bookie/gc/suspend_compaction"),
        ("GET", "/api/v1/bookie/gc/suspend_compaction"),
        ("PUT", "/api/v1/bookie/gc/resume_compaction"),
    ]:
        body = assert_problem(client.request(method, path), 409, "EBADREQ")
        assert body["detail"] == "garbage collection is switched off (GC_ENABLED=false)"
    assert client.get("/api/v1/bookie/info").json()["gc_enabled"] is False


def _wait_gc_done(client, timeout_s: float = 20.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while client.get("/api/v1/bookie/gc").json()["is_in_force_gc"]:
        assert time.monotonic() < deadline, "forced GC did not finish"
        time.sleep(0.02)  # polling the API's own status, as an operator would
    return dict(client.get("/api/v1/bookie/gc_details").json())


def test_forced_gc_reclaims_deleted_ledgers_through_the_api(make_client):
    """The real collector behind the admin routes: delete ledgers, force GC,
    entry-log space goes down and the kept ledger still reads back."""
    client = make_client(entry_log_size_limit="64KiB", write_cache_size="256KiB",
                         compaction_rate=0)
    ids = [create_ledger(client)["ledger_id"] for _ in range(6)]
    for lid in ids:
        frames = b"".join(len(b"x" * 2000).to_bytes(4, "big") + b"x" * 2000 for _ in range(40))
        response = client.post(f"/api/v1/ledgers/{lid}/entries/batch", content=frames,
                               headers={**pw(), "content-type": "application/x-ledgerd-frames"})
        assert response.status_code == 201, response.text
        client.post(f"/api/v1/ledgers/{lid}/close", headers=pw())
    client.app.state.service.node.bookie.checkpoint()
    before = sum(log["size"] for log in client.get("/api/v1/bookie/entrylogs").json()["entry_logs"])
    for lid in ids[:5]:
        assert client.delete(f"/api/v1/ledgers/{lid}", headers=pw()).status_code == 204
    # No checkpoint here: a forced GC runs one first, so the deletions count.
    response = client.put("/api/v1/bookie/gc", json={"forceMajor": True})
    assert response.status_code == 200
    details = _wait_gc_done(client)
    assert details["runs"] >= 1 and details["major_compaction_count"] >= 1
    assert details["reclaimed_by_deletion_bytes"] + details["reclaimed_by_compaction_bytes"] > 0
    assert details["last_run"]["forced"] is True and details["progress"]["running"] is False
    after = sum(log["size"] for log in client.get("/api/v1/bookie/entrylogs").json()["entry_logs"])
    assert after < before / 2, (before, after)
    entry = client.get(f"/api/v1/ledgers/{ids[5]}/entries/39")
    assert entry.status_code == 200 and entry.content == b"x" * 2000
    metrics = client.get("/metrics").text
    assert "ledgerd_gc_runs " in metrics and "ledgerd_gc_logs_removed" in metrics


def test_gc_suspension_and_bad_input(make_client):
    client = make_client()
    assert client.get("/api/v1/bookie/gc").json() == {"is_in_force_gc": False}
    assert_problem(client.put("/api/v1/bookie/gc", json={"force_major": "x"}), 422, "EBADREQ")
    assert_problem(client.put("/api/v1/bookie/gc", json={"bogus": 1}), 422, "EBADREQ")
    url = "/api/v1/bookie/gc/suspend_compaction"
    response = client.put(url, json={"suspendMajor": True})
    assert response.json() == {"is_major_gc_suspended": True, "is_minor_gc_suspended": False}
    assert client.get(url).json()["is_major_gc_suspended"] is True
    assert client.get("/api/v1/bookie/gc_details").json()["is_major_gc_suspended"] is True
    response = client.put("/api/v1/bookie/gc/resume_compaction", json={"resume_major": True})
    assert response.json() == {"is_major_gc_suspended": False, "is_minor_gc_suspended": False}
    assert client.put("/api/v1/bookie/gc").status_code == 200
    _wait_gc_done(client)
    assert client.get("/api/v1/bookie/info").json()["gc_enabled"] is True


def test_read_only_mode_blocks_adds_not_reads(client):
    ledger_id = create_ledger(client)["ledger_id"]
    client.post(f"/api/v1/ledgers/{ledger_id}/entries", content=b"before", headers=pw())
    response = client.put("/api/v1/bookie/state/readonly", json={"read_only": True})
    assert response.status_code == 200 and response.json() == {"read_only": True}
    try:
        assert client.get("/api/v1/bookie/state/readonly").json() == {"read_only": True}
        assert client.get("/api/v1/bookie/state").json()["read_only"] is True
        response = client.post(f"/api/v1/ledgers/{ledger_id}/entries", content=b"x", headers=pw())
        assert_problem(response, 507, "EREADONLY")
        response = client.post(
            f"/api/v1/ledgers/{ledger_id}/entries/batch", headers=pw(), json={"entries": ["eA=="]}
        )
        assert_problem(response, 507, "EREADONLY")
        assert_problem(client.post("/api/v1/ledgers", json={}), 507, "EREADONLY")
        assert client.get(f"/api/v1/ledgers/{ledger_id}/entries/0").content == b"before"
        assert client.get("/api/v1/bookie/is_ready").json()["read_only"] is True
    finally:
        response = client.put("/api/v1/bookie/state/readonly", json={"readOnly": False})
        assert response.json() == {"read_only": False}
    response = client.post(f"/api/v1/ledgers/{ledger_id}/entries", content=b"x", headers=pw())
    assert response.status_code == 201
    # Absent is false, as in BookKeeper; booleans are strict; one spelling per field.
    assert client.put("/api/v1/bookie/state/readonly", json={}).json() == {"read_only": False}
    for body in ({"read_only": 1}, {"readOnly": "true"}, {"read_only": True, "readOnly": True}):
        assert_problem(client.put("/api/v1/bookie/state/readonly", json=body), 422, "EBADREQ")


def test_disk_usage_threshold_turns_read_only(make_client):
    # Any real file system is more than 0.01% used: the watcher must react by itself.
    client = make_client(readonly_disk_usage_threshold=0.0001, disk_check_interval=0.05)
    deadline = time.monotonic() + 10
    while not client.get("/api/v1/bookie/state/readonly").json()["read_only"]:
        assert time.monotonic() < deadline, "disk watcher never turned the bookie read-only"
        time.sleep(0.02)
    assert_problem(client.post("/api/v1/ledgers", json={}), 507, "EREADONLY")


def test_metrics(client):
    ledger_id = create_ledger(client)["ledger_id"]
    client.post(f"/api/v1/ledgers/{ledger_id}/entries", content=b"m", headers=pw())
    client.get(f"/api/v1/ledgers/{ledger_id}/entries/0")
    client.get("/api/v1/ledgers/999999/entries/0")
    text = client.get("/metrics").text
    assert 'ledgerd_add_latency_seconds_count{kind="single"}' in text
    assert 'ledgerd_read_latency_seconds_count{kind="single"}' in text
    assert (
        'ledgerd_http_requests_total{method="POST",route="/api/v1/ledgers/{ledger_id}/entries",'
        'status="201"}' in text
    )
    assert 'route="/api/v1/ledgers/{ledger_id}/entries/{entry_id:int}",status="404"' in text
    assert "ledgerd_bookie_adds_total" in text


def test_noop_only_with_bench_endpoints(make_client, client):
    assert_problem(client.post("/api/v1/noop", content=b"x"), 404, "EBADREQ")
    assert "/api/v1/noop" not in client.get("/openapi.json").json()["paths"]
    bench = make_client(bench_endpoints=True)
    response = bench.post("/api/v1/noop", content=b"x" * 1000)
    assert response.status_code == 201 and response.json() == {}


def test_body_larger_than_the_limit_is_413(make_client):
    client = make_client(max_request_body_size="300KiB", bench_endpoints=True)
    assert_problem(client.post("/api/v1/noop", content=b"x" * (301 * 1024)), 413, "EBADREQ")

    def chunks():
        for _ in range(400):
            yield b"x" * 1024

    # Without Content-Length (chunked) the limit holds while reading.
    ledger_id = create_ledger(client)["ledger_id"]
    response = client.post(
        f"/api/v1/ledgers/{ledger_id}/entries/batch",
        content=chunks(),
        headers={**pw(), "Content-Type": "application/x-ledgerd-frames"},
    )
    assert_problem(response, 413, "EBADREQ")


def test_concurrent_appends_get_dense_ids(client):
    ledger_id = create_ledger(client)["ledger_id"]
    ids: list[int] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(25):
            r = client.post(f"/api/v1/ledgers/{ledger_id}/entries", content=b"c", headers=pw())
            assert r.status_code == 201
            with lock:
                ids.append(r.json()["entry_id"])

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(ids) == list(range(100))


def test_spec_lists_every_route_with_problem_errors(client):
    spec = client.get("/openapi.json").json()
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            for status, response in operation["responses"].items():
                if int(status) >= 400:
                    assert list(response["content"]) == ["application/problem+json"], (
                        method,
                        path,
                        status,
                    )
    add = spec["paths"]["/api/v1/ledgers/{ledger_id}/entries"]["post"]
    assert list(add["requestBody"]["content"]) == ["application/octet-stream"]
    assert "HTTPValidationError" not in spec["components"]["schemas"]


def test_settings_are_those_given(tmp_path):
    settings = ServiceSettings.load(environ={}, data_dir=tmp_path)
    assert create_app(settings).title == "ledgerd"


def test_a_running_service_keeps_its_startup_objects_out_of_full_collections(tmp_path):
    """Startup freezes what lives as long as the service (full collections under
    load otherwise stalled requests by up to 65 ms) and spaces young passes out;
    shutdown undoes both, so an app torn down in a longer-lived process can be
    collected."""
    before = gc.get_threshold()
    app = create_app(service_settings(tmp_path / "data"))
    with TestClient(app) as client:
        assert gc.get_freeze_count() > 10_000  # modules, the app, the bookie
        assert gc.get_threshold()[0] == YOUNG_COLLECTION_THRESHOLD
        assert client.post("/api/v1/ledgers", json={}).status_code == 201
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == before
