"""Tiering of open ledgers as they fill (DESIGN.md §6): chunks and the
segment's index uploaded as acknowledged entries accumulate, the position
recorded by the engine, reads of tiered entries from the chunks once the
local copy is gone, consolidation at close, restart from the position.

Real bookies; the bucket is the in-memory one (memory_store.py, S3's rules)
for the step-by-step checks, and the real radosgw where the service runs
end to end (test_tiering_service.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import crc32c
import pytest

from common.units import KiB, MiB
from ledger import Bookie, OffloadState, TierPosition
from offload import (
    Offloader,
    OffloadSettings,
    RemoteLedgerReader,
    RetryingObjectStore,
    Tierer,
)
from offload._format import decode_index, encode_frame_header

from .conftest import PASSWORD, T, engine_settings, offload_settings, random_payloads
from .memory_store import MemoryObjectStore

SEGMENT_MAX = 11 * MiB


def _settings(**overrides: object) -> OffloadSettings:
    values: dict[str, object] = {"segment_size_bytes_max": SEGMENT_MAX,
                                 "tier_open_ledgers": True, **overrides}
    return offload_settings("memory", None, **values)


def _frames(payloads: list[bytes], first: int = 0) -> bytes:
    return b"".join(encode_frame_header(i, p, crc32c.crc32c(p)) + p
                    for i, p in enumerate(payloads, start=first))


def _add(bookie: Bookie, ledger_id: int, payloads: list[bytes]) -> None:
    batch: list[bytes] = []
    for payload in [*payloads, None]:
        if payload is None or sum(map(len, batch)) + len(payload) > 900 * KiB:
            if batch:
                bookie.append(ledger_id, [(None, batch)], password=PASSWORD)[0].result(T)
            batch = []
        if payload is not None:
            batch.append(payload)


@pytest.fixture
def memory() -> MemoryObjectStore:
    return MemoryObjectStore()


@pytest.fixture
def tiering(tmp_path: Path, memory: MemoryObjectStore,
            ) -> Iterator[tuple[Bookie, RetryingObjectStore, RemoteLedgerReader]]:
    settings = _settings()
    store = RetryingObjectStore(memory, settings, sleep=lambda _s: None)
    reader = RemoteLedgerReader(store, settings)
    bookie = Bookie.open(engine_settings(tmp_path / "data"), remote=reader)
    yield bookie, store, reader
    bookie.close()
    reader.close()


def _tier_all(tierer: Tierer, ledger_id: int) -> int:
    chunks = 0
    while (done := tierer.tier(ledger_id)) > 0:
        chunks += done
    return chunks


def test_open_ledger_tiered_read_back_dropped_and_consolidated(tiering, memory) -> None:
    bookie, store, _reader = tiering
    settings = _settings()
    payloads = random_payloads(26 * MiB, seed=21)
    ledger_id = bookie.create_ledger(password=PASSWORD, metadata={"app": "t"}).result(T).ledger_id
    _add(bookie, ledger_id, payloads[:len(payloads) // 2])
    with ThreadPoolExecutor(4) as executor:
        tierer = Tierer(bookie, store, settings, executor=executor)
        first_chunks = _tier_all(tierer, ledger_id)
        at = bookie.get_ledger(ledger_id).tier
        assert first_chunks >= 2 and at.entry_id > 0 and at.byte_position > 0
        # Everything below the position is in S3: drop it locally, read it back.
        assert bookie.drop_local_entries({ledger_id: at.entry_id}) == [ledger_id]
        for entry_id in range(0, at.entry_id, 7):
            assert bookie.read_entry(ledger_id, entry_id).payload == payloads[entry_id]
        _add(bookie, ledger_id, payloads[len(payloads) // 2:])
        assert _tier_all(tierer, ledger_id) >= 2
        later = bookie.get_ledger(ledger_id).tier
        assert later > at and later.segment_first_entry_id > 0  # into a second segment
        assert bookie.drop_local_entries({ledger_id: later.entry_id}) == [ledger_id]
        assert [e.payload for e in bookie.read_entries(ledger_id)] == payloads
        bookie.close_ledger(ledger_id, password=PASSWORD).result(T)
        info = Offloader(bookie, store, settings, executor=executor).offload(ledger_id)
    assert info.state is OffloadState.OFFLOADED
    names = sorted(k.removeprefix(info.key_prefix or "") for k in memory.object_keys())
    expected = _segments_of(payloads, SEGMENT_MAX)
    assert names == sorted(f"seg-{first}/{kind}" for first, _ in expected
                           for kind in ("index", "segment"))
    for first, data in expected:
        assert memory.data(f"{info.key_prefix}seg-{first}/segment") == data
        index = decode_index(memory.data(f"{info.key_prefix}seg-{first}/index"), key="i")
        assert not index.ledger.is_open and index.ledger.last_entry_id == len(payloads) - 1
    assert memory.open_uploads() == []
    assert store.statistics()["requests_copy"] >= first_chunks
    bookie.drop_local_copy(ledger_id)
    assert [e.payload for e in bookie.read_entries(ledger_id)] == payloads


class ForgetsPositions:
    """FAULT INJECTION: the engine as the tierer's source, except that
    recording a tier position fails as a process killed just before it would
    (what S3 got stays; the engine never hears of it)."""

    def __init__(self, bookie: Bookie) -> None:
        self._bookie = bookie

    def __getattr__(self, name: str) -> object:
        return getattr(self._bookie, name)

    def record_tier_position(self, ledger_id: int, position: TierPosition) -> object:
        raise RuntimeError("killed before recording the tier position")


SHAPES = {
    # Frames of exactly 256 KiB and 10 MiB segments: chunks and segments end
    # at the same byte, so a segment ends with no short chunk.
    "aligned": [bytes([i % 251]) * (256 * KiB - 16) for i in range(100)],
    "random": random_payloads(24 * MiB, seed=22),
    "small": [bytes([i % 251]) * (900 + i % 300) for i in range(24_000)],
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_tiering_resumes_from_the_recorded_position(shape: str, tmp_path: Path,
                                                     memory: MemoryObjectStore) -> None:
    """Adds and steps interleaved; a step whose position was never recorded
    (S3 ahead of the engine); a restart between steps (a new tierer rebuilds
    its cursor from the position and one index); then close: the segments
    hold exactly the ledger's frames, cut as a sealed offload cuts them."""
    payloads = SHAPES[shape]
    segment_max = 10 * MiB if shape == "aligned" else SEGMENT_MAX
    settings = _settings(segment_size_bytes_max=segment_max, upload_concurrency=2)
    store = RetryingObjectStore(memory, settings, sleep=lambda _s: None)
    reader = RemoteLedgerReader(store, settings)
    data_dir = tmp_path / "data"
    bookie = Bookie.open(engine_settings(data_dir), remote=reader)
    ledger_id = bookie.create_ledger(password=PASSWORD, metadata={}).result(T).ledger_id
    quarter = len(payloads) // 4
    with ThreadPoolExecutor(2) as executor:
        _add(bookie, ledger_id, payloads[:quarter])
        assert Tierer(bookie, store, settings, executor=executor).tier(ledger_id) > 0
        _add(bookie, ledger_id, payloads[quarter:2 * quarter])
        with pytest.raises(RuntimeError, match="killed"):
            Tierer(ForgetsPositions(bookie), store, settings,  # type: ignore[arg-type]
                   executor=executor).tier(ledger_id)
        bookie.close()
        bookie = Bookie.open(engine_settings(data_dir), remote=reader)
        tierer = Tierer(bookie, store, settings, executor=executor)
        _tier_all(tierer, ledger_id)
        _add(bookie, ledger_id, payloads[2 * quarter:])
        _tier_all(tierer, ledger_id)
        at = bookie.get_ledger(ledger_id).tier
        if shape == "aligned":  # segment 0 ended on a chunk boundary: no short chunk
            seg0 = [len(memory.data(k)) for k in memory.object_keys() if "/seg-0/chunk-" in k]
            assert seg0 == [5 * MiB, 5 * MiB] and at.segment_first_entry_id >= 40
        assert bookie.drop_local_entries({ledger_id: at.entry_id}) == [ledger_id]
        reader.refresh(ledger_id)
        assert [e.payload for e in bookie.read_entries(ledger_id)] == payloads
        bookie.close_ledger(ledger_id, password=PASSWORD).result(T)
        info = Offloader(bookie, store, settings, executor=executor).offload(ledger_id)
    expected = _segments_of(payloads, segment_max)
    names = sorted(k.removeprefix(info.key_prefix or "") for k in memory.object_keys())
    assert names == sorted(f"seg-{first}/{kind}" for first, _ in expected
                           for kind in ("index", "segment"))
    for first, data in expected:
        assert memory.data(f"{info.key_prefix}seg-{first}/segment") == data, first
    bookie.drop_local_copy(ledger_id)
    reader.refresh(ledger_id)
    assert [e.payload for e in bookie.read_entries(ledger_id)] == payloads
    bookie.close()
    reader.close()


def _segments_of(payloads: list[bytes], segment_max: int) -> list[tuple[int, bytes]]:
    found: list[tuple[int, bytes]] = []
    first, length = 0, 0
    for entry_id, payload in enumerate(payloads):
        size = 16 + len(payload)
        if entry_id > first and length + size > segment_max:
            found.append((first, _frames(payloads[first:entry_id], first)))
            first, length = entry_id, 0
        length += size
    found.append((first, _frames(payloads[first:], first)))
    return found


class RefreshesInsideARead:
    """TIMING SEAM (nothing faked): the in-memory bucket, except that the first
    GET of an index once armed first runs ``refresh`` of the reader, as the
    tiering thread does after every step (``on_tiered``) while reads run."""

    def __init__(self, memory: MemoryObjectStore) -> None:
        self._memory = memory
        self.refresh: list[Callable[[], None]] = []

    def __getattr__(self, name: str) -> object:
        return getattr(self._memory, name)

    def get_object(self, key: str) -> bytes:
        if key.endswith("/index") and self.refresh:
            self.refresh.pop()()
        return self._memory.get_object(key)


def test_a_read_of_tiered_chunks_racing_a_refresh_reads_the_chunks(
        tmp_path: Path, memory: MemoryObjectStore) -> None:
    """A read that located its segment (tiered while open: chunks, no
    ``segment`` object yet) before a refresh of the reader's listing still
    reads the chunks: the refresh (run between the listing and the GET of the
    bytes) must not make it look for the consolidated object."""
    settings = _settings()
    racing = RefreshesInsideARead(memory)
    reader = RemoteLedgerReader(racing, settings)  # type: ignore[arg-type]
    bookie = Bookie.open(engine_settings(tmp_path / "data"), remote=reader)
    try:
        payloads = random_payloads(8 * MiB, seed=5)
        ledger_id = bookie.create_ledger(password=PASSWORD, metadata={}).result(T).ledger_id
        _add(bookie, ledger_id, payloads)
        with ThreadPoolExecutor(2) as executor:
            _tier_all(Tierer(bookie, memory, settings, executor=executor), ledger_id)
        at = bookie.get_ledger(ledger_id).tier
        assert bookie.drop_local_entries({ledger_id: at.entry_id}) == [ledger_id]
        racing.refresh.append(lambda: reader.refresh(ledger_id))
        assert bookie.read_entry(ledger_id, 0).payload == payloads[0]
        assert not racing.refresh
        assert [e.payload for e in bookie.read_entries(ledger_id)] == payloads
    finally:
        bookie.close()
        reader.close()
