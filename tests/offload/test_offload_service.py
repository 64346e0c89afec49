"""The offload service: requests, triggers, resume at start, orphan sweep,
failures recorded and retried, S3 going away mid-offload (the real server is
stopped and started again)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import pytest
from botocore.exceptions import ClientError

from common.errors import NoSuchLedger, NotSealed
from common.units import MiB
from ledger import Bookie, OffloadInfo, OffloadState, TierPosition
from offload import OffloadService, OffloadSettings, S3ObjectStore, Step
from offload._tier_worker import LedgerGuard, TierWorker
from tools.seed_ledgers import seed_idle_ledgers

from .conftest import (
    PASSWORD,
    T,
    bucket_keys,
    endpoint_of,
    engine_settings,
    offload_settings,
    pending_uploads,
    random_payloads,
    write_closed_ledger,
)


def _service(bookie: Bookie, store: S3ObjectStore, settings: OffloadSettings,
             **kw: Any) -> OffloadService:
    return OffloadService(bookie, store, settings, **kw)


@pytest.fixture
def service(bookie, store, settings):
    svc = _service(bookie, store, settings)
    svc.start()
    yield svc
    svc.stop()


def test_request_offload_runs_in_the_background(bookie, service, s3_bucket):
    written = write_closed_ledger(bookie, [b"one", b"two"])
    queued = service.request_offload(written.ledger_id)
    assert queued.state in (OffloadState.PENDING, OffloadState.IN_PROGRESS,
                            OffloadState.OFFLOADED)
    assert queued.key_prefix == f"ledgerd/test/b1/ledgers/{written.ledger_id}/"
    assert service.wait_idle(T)
    done = bookie.get_ledger(written.ledger_id).offload
    assert done.state is OffloadState.OFFLOADED
    assert service.request_offload(written.ledger_id) == done  # idempotent
    stats = service.statistics()
    assert stats["offloads_completed"] == 1 and stats["offloads_failed"] == 0
    assert stats["requests_put"] == 2 and service.progress(written.ledger_id) is None


def test_request_offload_refuses_unsealed_and_unknown_ledgers(bookie, service):
    info = bookie.create_ledger(password=PASSWORD, metadata={}).result(T)
    with pytest.raises(NotSealed):
        service.request_offload(info.ledger_id)
    with pytest.raises(NoSuchLedger):
        service.request_offload(999)
    assert bookie.get_ledger(info.ledger_id).offload.state is OffloadState.NONE


def test_progress_is_visible_while_uploading(bookie, store, settings):
    written = write_closed_ledger(bookie, random_payloads(12 * MiB, seed=5))
    seen: list[tuple[int, int] | None] = []
    holder: list[OffloadService] = []

    def hook(step: Step, ledger_id: int) -> None:
        if step is Step.UPLOAD_PART and not seen:
            seen.append(holder[0].progress(ledger_id))

    svc = _service(bookie, store, settings, step_hook=hook)
    holder.append(svc)
    svc.start()
    try:
        svc.request_offload(written.ledger_id)
        assert svc.wait_idle(T)
    finally:
        svc.stop()
    done, total = seen[0] or (0, 0)
    assert total == written.frame_bytes and 0 < done < total


def test_after_close_and_disk_usage_triggers(bookie, store, s3_bucket):
    client, bucket = s3_bucket
    settings = offload_settings(bucket, endpoint_of(client), after_close=True,
                                disk_usage_threshold=0.8)
    svc = _service(bookie, store, settings)
    svc.start()
    try:
        first = write_closed_ledger(bookie, [b"a"])
        svc.on_ledger_closed(first.ledger_id)
        assert svc.wait_idle(T)
        assert bookie.get_ledger(first.ledger_id).offload.state is OffloadState.OFFLOADED
        older = [write_closed_ledger(bookie, [bytes([i])]).ledger_id for i in range(3)]
        bookie.create_ledger(password=PASSWORD, metadata={}).result(T)  # open: never chosen
        assert svc.offload_by_disk_usage(0.5) == []
        assert svc.offload_by_disk_usage(0.9, ledger_count_max=2) == older[:2]
        assert svc.wait_idle(T)
        states = [bookie.get_ledger(i).offload.state for i in older]
        assert states == [OffloadState.OFFLOADED] * 2 + [OffloadState.NONE]
    finally:
        svc.stop()


def test_after_close_off_does_nothing(bookie, service):
    written = write_closed_ledger(bookie, [b"a"])
    service.on_ledger_closed(written.ledger_id)
    assert bookie.get_ledger(written.ledger_id).offload.state is OffloadState.NONE


def test_start_resumes_pending_and_in_progress_ledgers(bookie, store, settings):
    pending = write_closed_ledger(bookie, [b"p"])
    running = write_closed_ledger(bookie, [b"r"])
    bookie.set_offload(pending.ledger_id, OffloadInfo(state=OffloadState.PENDING))
    bookie.set_offload(running.ledger_id, OffloadInfo(state=OffloadState.IN_PROGRESS))
    svc = _service(bookie, store, settings)
    svc.start()
    try:
        assert svc.wait_idle(T)
    finally:
        svc.stop()
    for written in (pending, running):
        assert bookie.get_ledger(written.ledger_id).offload.state is OffloadState.OFFLOADED


def test_deleted_ledgers_lose_their_objects(bookie, store, settings, s3_bucket, service):
    client, bucket = s3_bucket
    kept, direct, swept = (write_closed_ledger(bookie, [b"k"]),
                           write_closed_ledger(bookie, [b"d"]),
                           write_closed_ledger(bookie, [b"s"]))
    for written in (kept, direct, swept):
        service.request_offload(written.ledger_id)
    assert service.wait_idle(T) and len(bucket_keys(client, bucket)) == 6
    bookie.delete_ledger(direct.ledger_id, password=PASSWORD).result(T)
    assert service.delete_objects(direct.ledger_id) == 2
    bookie.delete_ledger(swept.ledger_id, password=PASSWORD).result(T)
    # The app missed this delete (crash): the sweep at start finds the orphan.
    assert service.sweep_orphans() == [swept.ledger_id]
    assert all(f"/ledgers/{kept.ledger_id}/" in k for k in bucket_keys(client, bucket))
    assert len(bucket_keys(client, bucket)) == 2


def test_s3_down_mid_offload_fails_clearly_then_succeeds_on_retry(bookie, store, settings,
                                                                  s3_server, s3_bucket):
    client, bucket = s3_bucket
    written = write_closed_ledger(bookie, random_payloads(12 * MiB, seed=6))
    stopped = threading.Event()

    def stop_server_after_first_part(step: Step, _ledger_id: int) -> None:
        if step is Step.UPLOAD_PART and not stopped.is_set():
            stopped.set()
            s3_server.stop()

    svc = _service(bookie, store, settings, step_hook=stop_server_after_first_part)
    svc.start()
    try:
        svc.request_offload(written.ledger_id)
        assert svc.wait_idle(60)
        failed = bookie.get_ledger(written.ledger_id).offload
        assert failed.state is OffloadState.FAILED
        assert failed.error is not None and "failed after 3 attempt(s)" in failed.error
        assert svc.statistics()["offloads_failed"] == 1
        assert svc.statistics()["retries"] >= 2
        s3_server.start()
        svc.request_offload(written.ledger_id)  # a FAILED ledger is retried on request
        assert svc.wait_idle(T)
    finally:
        svc.stop()
    assert bookie.get_ledger(written.ledger_id).offload.state is OffloadState.OFFLOADED
    assert [k.rsplit("/", 1)[1] for k in bucket_keys(client, bucket)] == ["index", "segment"]
    assert pending_uploads(client, bucket) == []


class SlowDownFirst:
    """Fault injection a real server will not produce on demand: answer the
    first ``count`` PutObject calls with 503 SlowDown, then pass everything to
    the real client."""

    def __init__(self, client: Any, count: int) -> None:
        self._client, self._left = client, count

    def put_object(self, **kwargs: Any) -> Any:
        if self._left > 0:
            self._left -= 1
            raise ClientError({"Error": {"Code": "SlowDown", "Message": "Please reduce"},
                               "ResponseMetadata": {"HTTPStatusCode": 503}}, "PutObject")
        return self._client.put_object(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def test_throttling_is_retried_with_backoff(bookie, settings, s3_bucket):
    client, _ = s3_bucket
    delays: list[float] = []
    store = S3ObjectStore(SlowDownFirst(client, 2), settings, sleep=delays.append)
    svc = _service(bookie, store, settings)
    svc.start()
    try:
        written = write_closed_ledger(bookie, [b"x"])
        svc.request_offload(written.ledger_id)
        assert svc.wait_idle(T)
    finally:
        svc.stop()
    assert bookie.get_ledger(written.ledger_id).offload.state is OffloadState.OFFLOADED
    stats = store.statistics()
    assert stats["retries"] == 2 and stats["requests_put"] == 4  # 2 refused + segment + index
    assert len(delays) == 2 and all(0 <= d <= settings.retry_backoff_s_max for d in delays)


def _wait_for(condition: Any, timeout_s: float = T) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def test_a_short_s3_outage_is_retried_automatically(bookie, settings, store, s3_server,
                                                    s3_bucket):
    """The real server is stopped: the offload fails, is retried by itself
    (and fails again, later each time, while the outage lasts), and succeeds
    once S3 is back, without anyone asking."""
    client, bucket = s3_bucket
    quick = replace(settings, failed_retry_delay_s_initial=0.5, failed_retry_delay_s_max=1.5)
    written = write_closed_ledger(bookie, random_payloads(3 * MiB, seed=8))
    svc = _service(bookie, store, quick)
    svc.start()
    try:
        s3_server.stop()
        try:
            failed_at = time.time()
            svc.request_offload(written.ledger_id)
            _wait_for(lambda: bookie.get_ledger(written.ledger_id).offload.failures >= 2, 60)
            failed = bookie.get_ledger(written.ledger_id).offload
            assert failed.state in (OffloadState.FAILED, OffloadState.PENDING,
                                    OffloadState.IN_PROGRESS)
            assert svc.statistics()["offloads_retried"] >= 1
            _wait_for(lambda: bookie.get_ledger(written.ledger_id).offload.state
                      is OffloadState.FAILED)
            failed = bookie.get_ledger(written.ledger_id).offload
            assert failed.error is not None and "failed after 3 attempt(s)" in failed.error
            assert failed.retry_at is not None
            assert failed_at < failed.retry_at <= time.time() + quick.failed_retry_delay_s_max
            scheduled = svc.next_retry_at(written.ledger_id)
            scheduled_count = svc.statistics()["offloads_retry_scheduled"]
            if time.time() < failed.retry_at:  # the retry has not begun: it is the one scheduled
                assert scheduled == failed.retry_at and scheduled_count == 1
        finally:
            s3_server.start()
        _wait_for(lambda: bookie.get_ledger(written.ledger_id).offload.state
                  is OffloadState.OFFLOADED, 60)
    finally:
        svc.stop()
    done = bookie.get_ledger(written.ledger_id).offload
    assert done.failures == 0 and done.retry_at is None and done.error is None
    stats = svc.statistics()
    assert stats["offloads_retry_scheduled"] == 0 and stats["offloads_next_retry_at"] == 0
    assert [k.rsplit("/", 1)[1] for k in bucket_keys(client, bucket)] == ["index", "segment"]
    assert pending_uploads(client, bucket) == []


def test_the_retry_schedule_survives_a_restart_and_a_request_retries_at_once(
        bookie, store, settings):
    written = write_closed_ledger(bookie, [b"a", b"b"])
    legacy = write_closed_ledger(bookie, [b"c"])
    later = time.time() + 3600
    failed = OffloadInfo(state=OffloadState.FAILED, bucket=store.bucket, error="boom",
                         failures=3, retry_at=later)
    bookie.set_offload(written.ledger_id, failed)
    # Recorded before retries were automatic: no retry time, scheduled at start.
    bookie.set_offload(legacy.ledger_id, OffloadInfo(state=OffloadState.FAILED, error="old"))
    svc = _service(bookie, store, settings)
    svc.start()
    try:
        _wait_for(lambda: svc.statistics()["offloads_retry_scheduled"] == 2)
        assert svc.next_retry_at(written.ledger_id) == later
        legacy_at = svc.next_retry_at(legacy.ledger_id)
        assert legacy_at is not None and legacy_at <= time.time() + (
            settings.failed_retry_delay_s_initial)
        assert svc.statistics()["offloads_next_retry_at"] == legacy_at
        queued = svc.request_offload(written.ledger_id)
        assert queued.failures == 3  # kept: a failure now would wait longer still
        assert svc.next_retry_at(written.ledger_id) is None
        assert svc.wait_idle(T)
    finally:
        svc.stop()
    done = bookie.get_ledger(written.ledger_id).offload
    assert done.state is OffloadState.OFFLOADED and done.failures == 0


class _CountingSource:
    """The real engine as the LedgerSource, counting the listing calls (a spy:
    every answer is the engine's own)."""

    def __init__(self, bookie: Bookie) -> None:
        self._bookie = bookie
        self.listings = 0

    def list_ledgers(self, **kw: Any) -> Any:
        self.listings += 1
        return self._bookie.list_ledgers(**kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._bookie, name)


def test_disk_usage_walk_goes_on_where_it_stopped_a_bounded_number_of_pages(
        tmp_path, store, settings):
    # 3,000 closed ledgers offloaded already, then 20 never offloaded: each
    # check looks at a bounded number of pages and the next goes on from there,
    # instead of listing every closed ledger from the lowest id on every check.
    engine = engine_settings(tmp_path / "data")
    seed_idle_ledgers(engine, 3000, offload=OffloadInfo(state=OffloadState.OFFLOADED))
    fresh = seed_idle_ledgers(engine, 20)
    bookie = Bookie.open(engine)
    source = _CountingSource(bookie)
    svc = OffloadService(source, store, replace(settings, disk_usage_threshold=0.8))  # type: ignore[arg-type]
    try:
        found: list[list[int]] = []
        for _ in range(6):
            before = source.listings
            found.append(svc.offload_by_disk_usage(0.9))
            assert source.listings - before <= 10
        assert [i for batch in found for i in batch] == fresh  # each once, in id order
        assert found[-1] == []  # all queued: nothing left to find
        assert all(bookie.get_ledger(i).offload.state is OffloadState.PENDING for i in fresh)
    finally:
        svc.stop()
        bookie.close()


def test_tiering_rounds_after_the_first_look_at_open_ledgers_and_those_closed_since(
        tmp_path, store, settings):
    # 3,000 closed ledgers: the first round looks at them all (closed while the
    # service was down?), later rounds only at the open ones and at those
    # closed since the round before, which are handed over when tiered.
    engine = engine_settings(tmp_path / "data")
    seed_idle_ledgers(engine, 3000)
    bookie = Bookie.open(engine)
    source = _CountingSource(bookie)
    closed: list[int] = []
    tiered = replace(settings, tier_open_ledgers=True)
    try:
        with ThreadPoolExecutor(2) as executor:
            worker = TierWorker(source, store, tiered, executor=executor, guard=LedgerGuard(),  # type: ignore[arg-type]
                                on_closed=closed.append, on_deleted=lambda _l: None,
                                on_tiered=lambda _l: None)
            worker.run_once()
            assert source.listings >= 30  # every closed ledger, once
            lid = bookie.create_ledger(password=PASSWORD, metadata={}).result(T).ledger_id
            bookie.append(lid, [(None, (b"x" * 100,))], password=PASSWORD)[0].result(T)
            bookie.record_tier_position(lid, TierPosition(entry_id=1, byte_position=100))
            for _ in range(61):  # it used to walk every closed ledger every 60 rounds
                before = source.listings
                worker.run_once()
                assert source.listings - before <= 2  # OPEN, FENCED: one page each
            assert closed == []
            bookie.close_ledger(lid, password=PASSWORD).result(T)
            worker.run_once()
            assert closed == [lid]  # tiered and closed since: handed over
    finally:
        bookie.close()
