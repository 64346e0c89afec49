"""Packs of small ledgers (OFFLOAD_PACK) against the real S3 server: packing,
reads, deletion lowering a pack's live fraction, the rewrite, and a crash
after every step of packing and of rewriting.

The crash is a hook that raises ``_Crash`` (a BaseException, so no handler of
the service catches it and the worker thread dies there), after which the
bookie is closed and reopened from its directory and a new service started:
what recovery sees is what a SIGKILL after that step leaves, since every
record is synced before the step's hook runs.  A store wrapper
(``_SilentAfterCrash``, FAULT INJECTION) drops the clean-up the dying thread
would still send, so the pack upload a crash cuts short stays open, as after
a SIGKILL, for recovery to abort.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from common.units import KiB, MiB
from ledger import Bookie, OffloadState
from offload import (
    OffloadService,
    OffloadSettings,
    RemoteLedgerReader,
    RemoteStorageError,
    S3ObjectStore,
)
from offload._packer import Packer, PackStep

from .conftest import (
    PASSWORD,
    Written,
    bucket_keys,
    endpoint_of,
    engine_settings,
    offload_settings,
    pending_uploads,
    random_payloads,
    write_closed_ledger,
)

T = 30.0


class _Crash(BaseException):
    """FAULT INJECTION: the process dies right after a step."""


class _SilentAfterCrash:
    """FAULT INJECTION: the store as a killed process leaves it: once ``crashed``
    is set, the clean-up the dying thread would still send (aborting the pack's
    upload, deleting its data) never reaches S3."""

    def __init__(self, store: S3ObjectStore, crashed: list[str]) -> None:
        self._store, self._crashed = store, crashed

    def __getattr__(self, name: str) -> Any:
        if self._crashed and name in ("abort_multipart_upload", "delete_objects"):
            return lambda *args, **kwargs: None
        return getattr(self._store, name)


def pack_settings(s3_bucket: tuple[Any, str]) -> OffloadSettings:
    client, bucket = s3_bucket
    return offload_settings(bucket, endpoint_of(client), pack=True, pack_wait_s=0.0,
                            pack_ledger_bytes_max=2 * MiB, pack_size_bytes=64 * MiB,
                            pack_delete_delay_s=0.0, pack_live_fraction_min=0.5)


def write_ledgers(bookie: Bookie, count: int, size_bytes: int) -> list[Written]:
    written = [write_closed_ledger(bookie, random_payloads(size_bytes, seed=i, size_max=
                                                           max(1, size_bytes // 4)))
               for i in range(count)]
    written.append(write_closed_ledger(bookie, []))  # an empty ledger packs too
    return written


def start(bookie: Bookie, store: S3ObjectStore, settings: OffloadSettings,
          hook: Callable[[PackStep, str], None] | None = None) -> OffloadService:
    service = OffloadService(bookie, store, settings, pack_hook=hook)
    service.start()
    return service


def wait_for(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + T
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def read_all(service: OffloadService, bookie: Bookie, written: list[Written]) -> None:
    for ledger in written:
        info = bookie.get_ledger(ledger.ledger_id).offload
        assert info.state is OffloadState.OFFLOADED and info.pack_key is not None
        for entry_id, payload in enumerate(ledger.payloads):
            got, _ = service.reader.read_entry(ledger.ledger_id, entry_id, info)
            assert got == payload, (ledger.ledger_id, entry_id)


def pack_objects(keys: list[str]) -> list[str]:
    return [key for key in keys if "/packs/" in key]


def expected_keys(bookie: Bookie, live: list[Written]) -> list[str]:
    referenced = {bookie.get_ledger(w.ledger_id).offload.pack_key for w in live}
    assert None not in referenced
    return sorted(k for key in referenced if key for k in (key, key[:-4] + "index"))


def settled(client: Any, bucket: str, bookie: Bookie, live: list[Written]) -> None:
    """Every live ledger packed, and the bucket holds exactly the packs they
    point at (data + index each), no ledger objects, no open upload (an old
    pack is deleted by the worker just after the rewrite: waited for)."""
    wait_for(lambda: bucket_keys(client, bucket) == expected_keys(bookie, live))
    assert pending_uploads(client, bucket) == []


def test_small_ledgers_share_one_pack_read_back_deleted_and_rewritten(
        bookie: Bookie, s3_bucket: tuple[Any, str]) -> None:
    client, bucket = s3_bucket
    settings = pack_settings(s3_bucket)
    store = S3ObjectStore(client, settings)
    written = write_ledgers(bookie, 40, 8 * KiB)
    service = OffloadService(bookie, store, settings)
    for ledger in written:
        service.request_offload(ledger.ledger_id)
    before = store.statistics()
    service.start()
    try:
        assert service.wait_idle(T)
        # 41 ledgers, one pack: two objects, written with one PUT each (and a
        # HEAD checking the data), where each ledger of its own would take two
        # PUTs and two objects.
        keys = bucket_keys(client, bucket)
        assert len(pack_objects(keys)) == 2 and keys == pack_objects(keys)
        used = {k: v - before.get(k, 0) for k, v in store.statistics().items()}
        assert used["requests_put"] == 2 and used["requests_part"] == 0
        assert service.statistics()["ledgers_packed"] == len(written)
        gets_before = store.statistics()["requests_get"]
        read_all(service, bookie, written)
        # The pack is smaller than a block: one ranged GET serves every ledger.
        assert store.statistics()["requests_get"] - gets_before == 1

        # Deleting most members drops the pack's live fraction under half: it is
        # rewritten with the others, the old one deleted.
        gone, kept = written[:30], written[30:]
        old_key = bookie.get_ledger(kept[0].ledger_id).offload.pack_key
        for ledger in gone:
            info = bookie.get_ledger(ledger.ledger_id).offload
            bookie.delete_ledger(ledger.ledger_id, password=PASSWORD).result(T)
            assert service.delete_objects(ledger.ledger_id, info) == 0
        wait_for(lambda: service.statistics()["packs_deleted"] == 1)
        assert service.statistics()["packs_rewritten"] == 1
        assert bookie.get_ledger(kept[0].ledger_id).offload.pack_key != old_key
        settled(client, bucket, bookie, kept)
        read_all(service, bookie, kept)
    finally:
        service.stop()


def test_a_rewrite_past_its_time_to_repoint_deletes_its_new_pack(
        bookie: Bookie, s3_bucket: tuple[Any, str]) -> None:
    """Until a rewrite repoints its members, no ledger points at its new pack,
    which a cluster's audit deletes once old enough: a rewrite past ``mark_by``
    deletes the new pack itself and leaves every member where it was."""
    client, bucket = s3_bucket
    settings = pack_settings(s3_bucket)
    store = S3ObjectStore(client, settings)
    written = write_ledgers(bookie, 4, 2 * KiB)
    with ThreadPoolExecutor(2) as executor:
        packer = Packer(bookie, store, settings, executor=executor)
        result = packer.pack(w.ledger_id for w in written)
        assert result is not None
        before = bucket_keys(client, bucket)
        with pytest.raises(RemoteStorageError, match="outlived its time to repoint"):
            packer.rewrite(result.data_key, mark_by=time.time() - 1)
        assert bucket_keys(client, bucket) == before == expected_keys(bookie, written)
        assert pending_uploads(client, bucket) == []
        assert packer.rewrite(result.data_key, mark_by=time.time() + 60) is not None
        assert bookie.get_ledger(written[0].ledger_id).offload.pack_key != result.data_key


class _IndexPutFails:
    """FAULT INJECTION: the store refuses every pack index PUT (S3 cannot be made
    to fail one kind of PUT on demand)."""

    def __init__(self, store: S3ObjectStore) -> None:
        self._store = store

    def put_object(self, key: str, data: bytes, **kwargs: Any) -> str:
        if key.endswith("/index"):
            raise RemoteStorageError("PutObject", key, 1, "injected")
        return self._store.put_object(key, data, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


@pytest.mark.parametrize("delete_unindexed", [True, False])
def test_a_pack_whose_index_put_failed_is_deleted_only_where_nobody_else_adopts_it(
        bookie: Bookie, s3_bucket: tuple[Any, str], delete_unindexed: bool) -> None:
    """Standalone deletes it at once; cluster mode (``delete_unindexed=False``)
    leaves it: the PUT may have succeeded unseen and another node adopted it."""
    client, bucket = s3_bucket
    settings = pack_settings(s3_bucket)
    store: Any = _IndexPutFails(S3ObjectStore(client, settings))
    written = write_ledgers(bookie, 3, 2 * KiB)
    with ThreadPoolExecutor(2) as executor:
        packer = Packer(bookie, store, settings, executor=executor,
                        delete_unindexed=delete_unindexed)
        with pytest.raises(RemoteStorageError, match="injected"):
            packer.pack(w.ledger_id for w in written)
    data = [key for key in bucket_keys(client, bucket) if key.endswith("/data")]
    assert len(data) == (0 if delete_unindexed else 1)


def test_a_ledger_larger_than_the_pack_limit_is_offloaded_alone(
        bookie: Bookie, s3_bucket: tuple[Any, str]) -> None:
    client, bucket = s3_bucket
    settings = pack_settings(s3_bucket)
    big = write_closed_ledger(bookie, random_payloads(3 * MiB, seed=7))
    service = start(bookie, S3ObjectStore(client, settings), settings)
    try:
        service.request_offload(big.ledger_id)
        assert service.wait_idle(T)
    finally:
        service.stop()
    info = bookie.get_ledger(big.ledger_id).offload
    assert info.state is OffloadState.OFFLOADED and info.pack_key is None
    assert pack_objects(bucket_keys(client, bucket)) == []


PACKING_STEPS = [PackStep.MARK_PACKING, PackStep.UPLOAD_PACK_PART, PackStep.PUT_PACK,
                 PackStep.WRITE_PACK_INDEX, PackStep.MARK_PACKED]
REWRITE_STEPS = [PackStep.UPLOAD_PACK_PART, PackStep.PUT_PACK, PackStep.WRITE_PACK_INDEX,
                 PackStep.MARK_PACKED, PackStep.DELETE_PACK]


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize(("phase", "step"), [("pack", s) for s in PACKING_STEPS]
                         + [("rewrite", s) for s in REWRITE_STEPS])
def test_crash_after_each_step_recovers(tmp_path: Path, s3_bucket: tuple[Any, str],
                                        phase: str, step: PackStep) -> None:
    client, bucket = s3_bucket
    # Packs of more than one 5 MiB part, so every step happens.
    settings = pack_settings(s3_bucket)
    store = S3ObjectStore(client, settings)
    bookie = Bookie.open(engine_settings(tmp_path / "data"))
    written = write_ledgers(bookie, 14, 900 * KiB)
    armed = [phase == "pack"]
    crashed: list[str] = []

    def hook(at: PackStep, key: str) -> None:
        if armed[0] and at is step and not crashed:
            crashed.append(key)
            raise _Crash(f"after {at} of {key}")

    service = OffloadService(bookie, _SilentAfterCrash(store, crashed),  # type: ignore[arg-type]
                             settings, pack_hook=hook)
    for ledger in written:
        service.request_offload(ledger.ledger_id)
    service.start()
    live = written
    if phase == "rewrite":
        assert service.wait_idle(T)
        live = written[8:]
        armed[0] = True
        for ledger in written[:8]:
            info = bookie.get_ledger(ledger.ledger_id).offload
            bookie.delete_ledger(ledger.ledger_id, password=PASSWORD).result(T)
            service.delete_objects(ledger.ledger_id, info)
    wait_for(lambda: bool(crashed))
    service.stop(T)
    bookie.close()

    bookie = Bookie.open(engine_settings(tmp_path / "data"))
    try:
        service = start(bookie, store, settings)
        try:
            # A rewrite cut short is found again at start (its live fraction).
            assert service.wait_idle(T)
            settled(client, bucket, bookie, live)
            read_all(service, bookie, live)
        finally:
            service.stop()
    finally:
        bookie.close()


def test_reading_packs_in_order_carries_the_read_ahead_window_over(
        bookie: Bookie, s3_bucket: tuple[Any, str]) -> None:
    """Ledgers read in id order run through pack after pack: each next pack starts
    with the window the previous one reached, not at the minimum again (which
    made a million 1 KiB ledgers cost 130 GETs per GiB, against 66 for one
    segment of the same bytes)."""
    client, _ = s3_bucket
    settings = replace(pack_settings(s3_bucket), read_ahead_bytes_max=4 * MiB,
                       read_cache_size_bytes=12 * MiB)
    store = S3ObjectStore(client, settings)
    written = [write_closed_ledger(bookie, random_payloads(200 * KiB, seed=i, size_max=20 * KiB))
               for i in range(60)]
    with ThreadPoolExecutor(4) as pool:
        packer = Packer(bookie, store, settings, executor=pool)
        for at in range(0, 60, 20):  # three packs of about 4 MiB
            packer.pack([w.ledger_id for w in written[at:at + 20]])
    reader = RemoteLedgerReader(store, settings)
    try:
        before = store.statistics()["requests_get"]
        for ledger in written:
            info = bookie.get_ledger(ledger.ledger_id).offload
            for entry_id, payload in enumerate(ledger.payloads):
                assert reader.read_entry(ledger.ledger_id, entry_id, info)[0] == payload
        gets = store.statistics()["requests_get"] - before
        assert reader.statistics().get("read_ahead_carried", 0) == 2
    finally:
        reader.close()
    # The first pack (a little over 4 MiB) climbs 1, 2, 4 MiB windows: 3 GETs;
    # the others start at 4 MiB: 2 GETs each (3 each without the carry-over).
    assert gets <= 3 + 2 * 2
