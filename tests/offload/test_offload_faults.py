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
from dataclasses import dataclass

import pytest

from common.errors import CorruptRecord
from common.units import KiB, MiB
from ledger import Bookie, OffloadInfo, OffloadState
from offload import (
    OffloadService,
    OffloadSettings,
    RemoteLedgerReader,
    RemoteStorageError,
    RetryingObjectStore,
)

from .conftest import T, Written, engine_settings, offload_settings, random_payloads
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
                     memory: MemoryObjectStore) -> FaultyObjectStore:
    settings = scenario.settings()
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
