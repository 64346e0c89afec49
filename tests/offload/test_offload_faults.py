"""Seeded fault injection for offload (STYLE 13): each seed offloads a real
ledger of a real bookie through the real service while FaultyObjectStore
(FAULT INJECTION) makes S3 requests fail, answer late, store bodies cut short
or lie about ETags, and sometimes kills the "process" at a random request or
``set_offload``; then a recovery run without faults, then reads under faults.

Why the in-memory bucket and not radosgw: 128 offloads of 10-13 MiB ledgers,
each followed by a recovery run and reads, take about 30 s in memory and
several minutes against radosgw on this machine; memory_store.py has S3's
rules (multipart minimum, ListParts pages, ETags), checked by
test_memory_store.py.

Each seed asserts:

- nothing acknowledged is lost: after the recovery run the ledger is
  OFFLOADED and every entry reads back from the bucket byte for byte;
- failures are loud: a run that did not crash ends OFFLOADED (retried to
  success) or FAILED with ``RemoteStorageError`` naming the S3 request, the
  key, the attempts and the injected cause;
- an OFFLOADED ledger (never visited again) and every ledger after the
  recovery run leave no orphans: no open multipart upload, no chunk, exactly
  ``segment`` + ``index`` per segment;
- reads under faults return the right bytes or raise, never wrong bytes.

Replay a seed by its number:
``pytest 'tests/offload/test_offload_faults.py::test_offload_under_faults[seed-37]'``
(``OFFLOAD_FAULT_SEED_COUNT=1000`` runs more seeds).
"""

from __future__ import annotations

import os
import random
import re
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from common.errors import CorruptRecord
from common.units import KiB, MiB
from ledger import Bookie, OffloadInfo, OffloadState, TierPosition
from offload import (
    KeyLayout,
    OffloadService,
    OffloadSettings,
    RemoteLedgerReader,
    RemoteStorageError,
    RetryingObjectStore,
)
from offload._format import decode_index
from offload._tier_worker import LedgerGuard, TierWorker

from .conftest import (
    CHUNK,
    PASSWORD,
    T,
    Written,
    engine_settings,
    offload_settings,
    random_payloads,
)
from .conftest import write_closed_ledger as write_ledger
from .faulty_store import FaultPlan, FaultyObjectStore, SimulatedCrash, SourceUntilCrash, describe
from .memory_store import MemoryObjectStore

SEED_COUNT = int(os.environ.get("OFFLOAD_FAULT_SEED_COUNT", "128"))
SEGMENT_MAX = 11 * MiB
# Ledger shapes: no entry; one small PUT; one multipart upload of 3 parts
# (5, 5, <1 MiB); a multipart segment of 3 parts and a small second segment.
SHAPES = ("empty", "small", "three_parts", "three_parts", "two_segments", "two_segments")
# The request, the key, the attempts, and the cause (the injected one, or what
# the offloader or S3 found wrong: an InvalidPart named by a lying ETag).
LOUD = re.compile(r"RemoteStorageError: S3 \w+ of '[^']*' failed after \d+ attempt\(s\): \S.*")


@dataclass(frozen=True)
class Scenario:
    shape: str
    upload_concurrency: int
    list_page_size: int
    plan: FaultPlan

    @classmethod
    def of_seed(cls, seed: int) -> Scenario:
        rng = random.Random(seed)
        return cls(rng.choice(SHAPES), rng.choice([1, 2, 4]), rng.choice([1, 2, 1000]),
                   FaultPlan.of_seed(seed))

    def settings(self) -> OffloadSettings:
        return offload_settings("memory", None, upload_concurrency=self.upload_concurrency,
                                segment_size_bytes_max=SEGMENT_MAX, retry_attempts_max=3)


@pytest.fixture(scope="module")
def ledgers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Bookie,
                                                                        dict[str, Written]]]:
    bookie = Bookie.open(engine_settings(tmp_path_factory.mktemp("faults") / "data"))
    written = {
        "empty": write_ledger(bookie, []),
        "small": write_ledger(bookie, [b"a", b"", b"c" * 3000]),
        "three_parts": write_ledger(bookie, random_payloads(10 * MiB + 300 * KiB, seed=1)),
        "two_segments": write_ledger(bookie, random_payloads(13 * MiB, seed=2)),
    }
    try:
        yield bookie, written
    finally:
        bookie.close()


def _wait_idle_or_crash(service: OffloadService, faults: FaultyObjectStore) -> None:
    """Until the service is idle, or its worker died in a simulated crash."""
    deadline = time.monotonic() + T
    while not service.wait_idle(0.02) and not faults.crashed:
        assert time.monotonic() < deadline, "offload neither finished nor crashed"


def _run_with_faults(bookie: Bookie, ledger_id: int, scenario: Scenario,
                     memory: MemoryObjectStore, *,
                     settings: OffloadSettings | None = None) -> FaultyObjectStore:
    settings = settings or scenario.settings()
    faults = FaultyObjectStore(memory, scenario.plan)
    store = RetryingObjectStore(faults, settings, sleep=lambda _s: None,
                                rng=random.Random(scenario.plan.seed))
    service = OffloadService(SourceUntilCrash(bookie, faults), store, settings)
    service.start()
    try:
        service.request_offload(ledger_id)
        _wait_idle_or_crash(service, faults)
    except SimulatedCrash:
        pass  # died in request_offload's set_offload
    finally:
        service.stop()
    return faults


def _recover(bookie: Bookie, ledger_id: int, settings: OffloadSettings,
             memory: MemoryObjectStore) -> OffloadInfo:
    """The next start of the service, without faults; a FAILED (or never
    requested) offload is requested again, as an operator would."""
    service = OffloadService(bookie, RetryingObjectStore(memory, settings,
                                                         sleep=lambda _s: None), settings)
    service.start()
    try:
        assert service.wait_idle(T)
        if bookie.get_ledger(ledger_id).offload.state is not OffloadState.OFFLOADED:
            service.request_offload(ledger_id)
            assert service.wait_idle(T)
    finally:
        service.stop()
    return bookie.get_ledger(ledger_id).offload


def _assert_no_orphans(memory: MemoryObjectStore, info: OffloadInfo, context: str) -> None:
    assert memory.open_uploads() == [], context
    names = [key.removeprefix(info.key_prefix or "") for key in memory.object_keys()]
    segments = sorted({name.split("/")[0] for name in names})
    assert sorted(names) == sorted(f"{s}/{kind}" for s in segments
                                   for kind in ("index", "segment")), context
    assert sum(len(memory.data(f"{info.key_prefix}{s}/segment")) for s in segments) == (
        info.segment_bytes), context


def _read_under_faults(memory: MemoryObjectStore, scenario: Scenario, written: Written,
                       info: OffloadInfo) -> None:
    plan = FaultPlan(scenario.plan.seed, scenario.plan.rate, scenario.plan.faults)
    store = RetryingObjectStore(FaultyObjectStore(memory, plan), scenario.settings(),
                                sleep=lambda _s: None)
    reader = RemoteLedgerReader(store, scenario.settings())
    rng = random.Random(scenario.plan.seed)
    try:
        for entry_id in rng.sample(range(len(written.payloads)),
                                   min(40, len(written.payloads))):
            try:
                payload, _ = reader.read_entry(written.ledger_id, entry_id, info)
            except (RemoteStorageError, CorruptRecord):
                continue  # loud: the caller gets an error, never wrong bytes
            assert payload == written.payloads[entry_id], f"entry {entry_id}: wrong bytes"
    finally:
        reader.close()


def _read_all(memory: MemoryObjectStore, settings: OffloadSettings, written: Written,
              info: OffloadInfo) -> None:
    reader = RemoteLedgerReader(RetryingObjectStore(memory, settings), settings)
    try:
        for entry_id, expected in enumerate(written.payloads):
            assert reader.read_entry(written.ledger_id, entry_id, info)[0] == expected, entry_id
    finally:
        reader.close()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize("seed", range(SEED_COUNT), ids=lambda seed: f"seed-{seed}")
def test_offload_under_faults(seed: int, ledgers: tuple[Bookie, dict[str, Written]]) -> None:
    bookie, all_written = ledgers
    scenario = Scenario.of_seed(seed)
    written = all_written[scenario.shape]
    for other in all_written.values():  # each seed starts from ledgers never offloaded
        bookie.set_offload(other.ledger_id, OffloadInfo())
    memory = MemoryObjectStore(list_page_size=scenario.list_page_size)

    faults = _run_with_faults(bookie, written.ledger_id, scenario, memory)
    context = f"seed {seed} {scenario}: {describe(faults)}"
    first = bookie.get_ledger(written.ledger_id).offload
    if first.state is OffloadState.OFFLOADED:
        _assert_no_orphans(memory, first, context)  # an OFFLOADED ledger is never revisited
    elif not faults.crashed:
        assert first.state is OffloadState.FAILED, context
        assert first.error is not None and LOUD.match(first.error), (first.error, context)

    info = _recover(bookie, written.ledger_id, scenario.settings(), memory)
    assert info.state is OffloadState.OFFLOADED, (info, context)
    assert info.segment_bytes == written.frame_bytes and info.upload_id is None, context
    _assert_no_orphans(memory, info, context)
    _read_all(memory, scenario.settings(), written, info)
    _read_under_faults(memory, scenario, written, info)


# --- tiering of an open ledger under faults --------------------------------------------

TIER_SEED_COUNT = int(os.environ.get("TIER_FAULT_SEED_COUNT", "32"))
# 5 MiB chunks, 6 MiB segments, 12 MiB written: two segments of a full chunk
# and a short one, tiered in steps of 1 to 4 chunks; the adds made between
# the two phases end in a third segment tiered (or not) and a local tail.
TIER_SEGMENT_MAX = 6 * MiB


class _Clock:
    """The tiering worker's clock: moved past every backoff by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _tier_rounds(source: Any, store: Any, settings: OffloadSettings,
                 faults: FaultyObjectStore | None, rounds_max: int = 40) -> None:
    """The real tiering worker, round after round (its failed steps backed off
    and retried), until nothing is left to tier, or the process "died"."""
    clock = _Clock()
    with ThreadPoolExecutor(settings.upload_concurrency) as executor:
        worker = TierWorker(source, store, settings, executor=executor, guard=LedgerGuard(),
                            on_closed=lambda _l: None, on_deleted=lambda _l: None,
                            on_tiered=lambda _l: None, clock=clock)
        for _ in range(rounds_max):
            try:
                uploaded = worker.run_once()
            except SimulatedCrash:
                return
            if faults is not None and faults.crashed:
                return
            retrying = worker.statistics()["tier_ledgers_retrying"]
            if not uploaded and not retrying:
                return
            clock.now += settings.failed_retry_delay_s_max + 1
        raise AssertionError("tiering did not settle")


def _s3_holds_the_position(memory: MemoryObjectStore, info: Any, layout: KeyLayout) -> None:
    at = info.tier
    if at == TierPosition():
        return
    for position in range(0, at.byte_position, CHUNK):
        key = layout.chunk_key(info.ledger_id, at.segment_first_entry_id, position)
        assert len(memory.data(key)) == CHUNK, (key, at)
    if at.entry_id > at.segment_first_entry_id:
        key = layout.index_key(info.ledger_id, at.segment_first_entry_id)
        assert decode_index(memory.data(key), key=key).end_entry_id >= at.entry_id, at


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize("seed", range(TIER_SEED_COUNT), ids=lambda seed: f"seed-{seed}")
def test_tiering_under_faults(seed: int, tmp_path: Path) -> None:
    """An open ledger tiered under faults (possibly dying at a request or around
    recording the position), tiered on without faults after a "restart", its
    tiered entries dropped and read back from the chunks, then closed and
    consolidated under faults, and recovered: OFFLOADED, no orphan, every
    entry back byte for byte."""
    rng = random.Random(seed)
    plan = FaultPlan.of_seed(seed)
    settings = offload_settings("memory", None, upload_concurrency=rng.choice([1, 2, 4]),
                                segment_size_bytes_max=TIER_SEGMENT_MAX, tier_open_ledgers=True,
                                retry_attempts_max=3)
    page_size = rng.choice([1, 2, 1000])
    memory = MemoryObjectStore(list_page_size=page_size)
    reader = RemoteLedgerReader(RetryingObjectStore(memory, settings), settings)
    bookie = Bookie.open(engine_settings(tmp_path / "data"), remote=reader)
    try:
        payloads = random_payloads(12 * MiB, seed=1000 + seed)
        ledger_id = bookie.create_ledger(password=PASSWORD, metadata={}).result(T).ledger_id
        _add_all(bookie, ledger_id, payloads)
        faults = FaultyObjectStore(memory, plan)
        faulty = RetryingObjectStore(faults, settings, sleep=lambda _s: None,
                                     rng=random.Random(seed))
        _tier_rounds(SourceUntilCrash(bookie, faults), faulty, settings, faults)
        context = f"seed {seed} {settings.upload_concurrency}: {describe(faults)}"
        layout = KeyLayout(settings)
        _s3_holds_the_position(memory, bookie.get_ledger(ledger_id), layout)

        # The next start: tiering goes on without faults; the tiered entries
        # leave the local disk and come back from the chunks.
        more = random_payloads(3 * MiB, seed=2000 + seed)
        _add_all(bookie, ledger_id, more)
        payloads += more
        _tier_rounds(bookie, RetryingObjectStore(memory, settings), settings, None)
        at = bookie.get_ledger(ledger_id).tier
        assert at.entry_id > 0, context
        assert bookie.drop_local_entries({ledger_id: at.entry_id}) == [ledger_id], context
        assert [e.payload for e in bookie.read_entries(ledger_id)] == payloads, context

        bookie.close_ledger(ledger_id, password=PASSWORD).result(T)
        closing = FaultPlan(plan.seed + 1, plan.rate, plan.faults, plan.crash_rate)
        crash_faults = _run_with_faults(bookie, ledger_id, Scenario(
            "tiered", settings.upload_concurrency, page_size, closing), memory,
            settings=settings)
        context += f"; closing: {describe(crash_faults)}"
        info = _recover(bookie, ledger_id, settings, memory)
        assert info.state is OffloadState.OFFLOADED, (info, context)
        _assert_no_orphans(memory, info, context)
        assert info.segment_bytes == sum(16 + len(p) for p in payloads), context
        reader.refresh(ledger_id)
        written = Written(ledger_id, payloads)
        _read_all(memory, settings, written, info)
    finally:
        bookie.close()
        reader.close()


def _add_all(bookie: Bookie, ledger_id: int, payloads: list[bytes]) -> None:
    for start in range(0, len(payloads), 4):
        batch = payloads[start:start + 4]
        bookie.append(ledger_id, [(None, batch)], password=PASSWORD)[0].result(T)
