"""Seeded fault injection for the entry log on a FaultyFileSystem (STYLE 13).

Each seed drives one ``EntryLogStore`` deterministically through random
appends, syncs, reads, read-aheads, removals (what GC does), clean reopens and
crashes, while the file system fails on demand (EIO on a write, an fdatasync,
a directory fsync, a creation, a truncation or a read; ENOSPC injected or from
a file system that fills up; short writes).  Checked after every step and
every reopen:

* every entry whose ``sync()`` returned, and every entry of a log that was
  sealed, reads back byte for byte; a sealed log's map never changes and
  matches its records (read from the raw bytes as well as through the store);
* nothing fails silently: an injected EIO makes the call that met it raise
  ``DeviceBroken`` (an fdatasync failure too, whatever its errno) and every
  later write is refused; an ENOSPC on a write raises ``DiskFull``, and once
  space is freed appends and syncs succeed again;
* no read or scan returns bytes that were never appended there: every record
  is checked against what the seed wrote (payloads are a function of their
  ids), the rest is ``CorruptRecord``;
* reopening after any crash works.

A failing seed replays exactly:
``pytest tests/entrylog/test_entrylog_simulation.py -k 'seed-17'``.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import random
from collections.abc import Callable, Iterator
from pathlib import Path

import crc32c
import pytest

from common.errors import CorruptRecord, DeviceBroken, DiskFull
from common.units import KiB
from entrylog import (
    EntryLogSettings,
    EntryLogStore,
    LedgerUsage,
    Location,
)
from entrylog import _format as fmt
from entrylog.testing import FaultyFileSystem

SEEDS = range(150)
DIRECTORY = Path("/sim/entrylogs")
LEDGER_IDS = (1, 2, 3, 4, 5)
PAYLOAD_SIZES = (0, 1, 100, 1000, 3000, 5000, 12000)
FAULTS = (
    ("pwritev", errno.EIO), ("pwritev", errno.ENOSPC), ("fdatasync", errno.EIO),
    ("fdatasync", errno.ENOSPC), ("create", errno.ENOSPC), ("create", errno.EIO),
    ("sync_directory", errno.EIO), ("truncate", errno.EIO), ("unlink", errno.EIO),
)
Key = tuple[int, int]  # (ledger_id, entry_id)


@functools.cache
def payload_of(ledger_id: int, entry_id: int) -> bytes:
    rng = random.Random(ledger_id * 1_000_003 + entry_id)
    return rng.randbytes(rng.choice(PAYLOAD_SIZES))


class Model:
    """What the store promised, and everything it was ever given."""

    def __init__(self) -> None:
        self.durable: dict[Key, Location] = {}  # must read back, always
        self.unsynced: dict[Key, Location] = {}  # must read back while this store lives
        self.maybe: dict[Key, Location] = {}  # void or cut by a crash: exact bytes or an error
        self.appended: dict[Location, set[Key]] = {}
        self.sealed_maps: dict[int, dict[int, LedgerUsage]] = {}
        self.checked_logs: set[int] = set()
        # Logs an fdatasync failed on: the page cache may show records the disk
        # lost ("fsyncgate"), and a later open seals the log over them.
        self.fsync_failed_paths: set[str] = set()
        self.next_entry = dict.fromkeys(LEDGER_IDS, 0)

    def void_unsynced(self) -> None:
        self.maybe.update(self.unsynced)
        self.unsynced.clear()

    def forget_log(self, log_id: int) -> None:
        for table in (self.durable, self.unsynced, self.maybe):
            for key in [k for k, loc in table.items() if loc.log_id == log_id]:
                del table[key]


class Simulation:
    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        capacity = self.rng.choice([None, None, 192 * KiB, 256 * KiB, 384 * KiB])
        self.fs = FaultyFileSystem(rng=random.Random(seed + 1_000_000), capacity_bytes=capacity)
        self.settings = EntryLogSettings(
            directory=DIRECTORY, size_bytes_limit=64 * KiB,
            write_buffer_size_bytes=self.rng.choice([1, 4, 16, 64]) * KiB,
            read_fd_count_max=self.rng.choice([1, 2, 8]))
        self.model = Model()
        self.armed: tuple[str, int] | None = None
        self.needs_space = False
        self.last_ok = False
        self.store = self.reopen()

    def fail(self, message: str) -> None:
        pytest.fail(f"seed {self.seed}: {message}")

    # --- the steps ------------------------------------------------------------------

    def run(self) -> None:
        steps: list[tuple[float, Callable[[], None]]] = [
            (0.52, self.append), (0.13, self.sync), (0.12, self.read), (0.05, self.read_ahead),
            (0.05, self.remove), (0.08, self.arm_fault), (0.03, self.crash), (0.02, self.close),
        ]
        for _ in range(self.rng.randrange(120, 260)):
            if self.needs_space:
                self.free_space()
            pick = self.rng.random()
            for weight, step in steps:
                if pick < weight:
                    step()
                    break
                pick -= weight
        self.crash()
        self.close()
        self.check_every_durable_entry()
        with contextlib.suppress(DiskFull):
            self.store.close()

    def append(self) -> None:
        ledger_id = self.rng.choice(LEDGER_IDS)
        entry_id = self.model.next_entry[ledger_id]
        self.model.next_entry[ledger_id] += 1
        payload = payload_of(ledger_id, entry_id)
        with self.outcome("append") as ok:
            location = self.store.append(ledger_id, entry_id, payload, crc32c.crc32c(payload))
            ok()
        if self.last_ok:
            self.model.unsynced[(ledger_id, entry_id)] = location
            self.model.appended.setdefault(location, set()).add((ledger_id, entry_id))

    def sync(self) -> None:
        with self.outcome("sync") as ok:
            self.store.sync()
            ok()
        if self.last_ok:
            self.model.durable.update(self.model.unsynced)
            self.model.unsynced.clear()

    def read(self) -> None:
        tables = [t for t in (self.model.durable, self.model.unsynced, self.model.maybe) if t]
        if not tables:
            return
        table = self.rng.choice(tables)
        key = self.rng.choice(sorted(table))
        location = table[key]
        failing = self.armed is None and self.rng.random() < 0.1
        if failing:
            self.fs.fail_next("pread")  # Reads fail loudly too, without stopping writes.
        with self.outcome("read") as ok:
            try:
                payload, crc = self.store.read(location, *key)
            except CorruptRecord:
                if table is not self.model.maybe:
                    raise
            else:
                self.check_payload(key, payload, crc, "read")
                self.check_appended(location, key)
            ok()
        if failing:
            self.fs.clear_faults()  # Unused if the record was still in memory.

    def read_ahead(self) -> None:
        if not self.model.durable:
            return
        key = self.rng.choice(sorted(self.model.durable))
        location = self.model.durable[key]
        with self.outcome("read_following") as ok:
            following = self.store.read_following(location, key[0], bytes_max=32 * KiB,
                                                  count_max=8)
            ok()
        if self.last_ok:
            for record in following:
                self.check_payload((key[0], record.entry_id), record.payload, record.crc32c,
                                   "read_following")
                self.check_appended(record.location, (key[0], record.entry_id))

    def remove(self) -> None:
        flushed = self.store.flushed_log_ids()
        if flushed:
            self.remove_log(self.rng.choice(flushed))

    def remove_log(self, log_id: int) -> None:
        self.model.forget_log(log_id)
        with self.outcome("remove"):
            self.store.remove(log_id)

    def arm_fault(self) -> None:
        if self.armed is not None:
            return
        if self.rng.random() < 0.25:
            self.fs.short_next_write(self.rng.randrange(1, 5000))
            return
        self.armed = self.rng.choice(FAULTS)
        self.fs.fail_next(*self.armed)
        if self.armed[0] == "truncate":
            self.fs.fail_next("pwritev", errno.ENOSPC)  # A truncation only rolls back.

    def crash(self) -> None:
        self.fs.crash()
        with contextlib.suppress(DeviceBroken):
            self.store.close()
        self.fs.restart()
        self.armed = None
        self.model.void_unsynced()
        self.store = self.reopen()

    def close(self) -> None:
        self.fs.clear_faults()
        self.armed = None
        try:
            self.store.close()
        except DiskFull:
            self.model.void_unsynced()  # What close says it lost.
        else:
            self.model.durable.update(self.model.unsynced)
            self.model.unsynced.clear()
        self.store = self.reopen()

    # --- failures: loud, latched, recoverable ---------------------------------------

    @contextlib.contextmanager
    def outcome(self, call: str) -> Iterator[Callable[[], None]]:
        """Run one call; check that what the file system failed, the call reported."""
        failures_before = len(self.fs.failures)
        self.last_ok = False

        def ok() -> None:
            self.last_ok = True

        raised: BaseException | None = None
        try:
            yield ok
        except (DeviceBroken, DiskFull) as exc:
            raised = exc
        fired = self.fs.failures[failures_before:]
        if fired and self.armed is not None and any(op == self.armed[0] for op, _, _ in fired):
            self.armed = None
        self.observe_flushed()
        self.model.fsync_failed_paths.update(p for op, _, p in fired if op == "fdatasync")
        fatal = [(op, n) for op, n, _ in fired if n != errno.ENOSPC or op == "fdatasync"]
        if fatal and not isinstance(raised, DeviceBroken):
            self.fail(f"{call}: {fatal} was not reported as DeviceBroken ({raised!r})")
        if fatal and fatal != [("pread", errno.EIO)]:
            self.broken()
        elif fired and not fatal:
            if not isinstance(raised, DiskFull):
                self.fail(f"{call}: {fired} was not reported as DiskFull ({raised!r})")
            self.model.void_unsynced()
            self.needs_space = True
        elif raised is not None and not fatal:
            self.fail(f"{call} raised {raised!r} with no failure injected")

    def broken(self) -> None:
        """After a failed write or fdatasync: writes refused, reads go on, then a restart."""
        self.fs.clear_faults()
        self.armed = None
        self.model.void_unsynced()
        for attempt in (lambda: self.store.append(1, 10**9, b"x", crc32c.crc32c(b"x")),
                        self.store.sync):
            with pytest.raises(DeviceBroken):
                attempt()
        for key, location in list(self.model.durable.items())[:20]:
            payload, crc = self.store.read(location, *key)
            self.check_payload(key, payload, crc, "read after failure")
        if self.rng.random() < 0.5:
            self.crash()
        else:
            self.store.close()  # Refuses to seal; the next open does it.
            self.store = self.reopen()

    def free_space(self) -> None:
        """What a full disk makes GC do: free space; then writes must succeed again."""
        self.needs_space = False
        capacity = self.fs.capacity_bytes
        if capacity is None:
            return
        for log_id in self.store.flushed_log_ids():
            if capacity - self.fs.used_bytes() >= 96 * KiB:
                break
            self.remove_log(log_id)
        if capacity - self.fs.used_bytes() < 96 * KiB or self.armed is not None:
            return  # An armed failure may fire below; the other steps check that.
        key = (1, self.model.next_entry[1])
        self.model.next_entry[1] += 1
        payload = payload_of(*key)
        location = self.store.append(*key, payload, crc32c.crc32c(payload))
        self.model.appended.setdefault(location, set()).add(key)
        self.model.unsynced[key] = location
        self.store.sync()
        self.model.durable.update(self.model.unsynced)
        self.model.unsynced.clear()
        self.observe_flushed()

    # --- checks -------------------------------------------------------------------------

    def reopen(self) -> EntryLogStore:
        store = EntryLogStore(self.settings, file_system=self.fs)
        self.store = store
        used = max((loc.log_id for loc in self.model.appended), default=0)
        if store.current_log_id <= used:
            self.fail(f"log id {store.current_log_id} given again (ids up to {used} held records)")
        # A sealed log can't change; only the others need a second look.
        self.model.checked_logs = set(self.model.sealed_maps)
        for log_id in self.model.checked_logs & set(store.flushed_log_ids()):
            if self.sealed_map_on_disk(log_id) != self.model.sealed_maps[log_id]:
                self.fail(f"log {log_id}: sealed map changed")
        self.observe_flushed()
        for key in self.rng.sample(sorted(self.model.durable), min(15, len(self.model.durable))):
            payload, crc = store.read(self.model.durable[key], *key)
            self.check_payload(key, payload, crc, "read after reopen")
        for key in self.rng.sample(sorted(self.model.maybe), min(10, len(self.model.maybe))):
            with contextlib.suppress(CorruptRecord):
                payload, crc = store.read(self.model.maybe[key], *key)
                self.check_payload(key, payload, crc, "read of a maybe-lost entry")
        return store

    def check_every_durable_entry(self) -> None:
        for key, location in self.model.durable.items():
            payload, crc = self.store.read(location, *key)
            self.check_payload(key, payload, crc, "final read")

    def observe_flushed(self) -> None:
        if self.fs.crashed:
            return
        for log_id in self.store.flushed_log_ids():
            if log_id not in self.model.checked_logs:
                self.check_log(log_id)
                self.model.checked_logs.add(log_id)

    def check_log(self, log_id: int) -> None:
        """A flushed log: its records are real, its map is theirs, a sealed map is final."""
        found, expected = self.scan_log(log_id)
        counted = self.store.ledgers_map(log_id)
        tainted = str(self.store.path_of(log_id)) in self.model.fsync_failed_paths
        if tainted:
            # Its map may count records only the page cache held: no fewer than found.
            for ledger_id, usage in expected.items():
                if counted.get(ledger_id, LedgerUsage(0, 0)).entry_count < usage.entry_count:
                    self.fail(f"log {log_id}: map {counted} misses records {expected}")
        elif counted != expected:
            self.fail(f"log {log_id}: map {counted} != records {expected}")
        for key, location in self.model.durable.items():
            if location.log_id == log_id and found.get(key) != location:
                self.fail(f"log {log_id}: durable entry {key} at {location} lost")
        if tainted:
            return  # Its map may even be gone from the disk; the store then scans.
        on_disk = self.sealed_map_on_disk(log_id)
        if on_disk is None:
            return
        if on_disk != expected:
            self.fail(f"log {log_id}: map bytes {on_disk} != records {expected}")
        if self.model.sealed_maps.setdefault(log_id, on_disk) != on_disk:
            self.fail(f"log {log_id}: sealed map changed from {self.model.sealed_maps[log_id]}")
        # A sealed log was synced: everything in it is durable now.
        for key, location in found.items():
            self.model.unsynced.pop(key, None)
            self.model.maybe.pop(key, None)
            self.model.durable[key] = location

    def scan_log(self, log_id: int) -> tuple[dict[Key, Location], dict[int, LedgerUsage]]:
        """The valid records of a log (each checked) and the usage they add up to."""
        found: dict[Key, Location] = {}
        counts: dict[int, list[int]] = {}
        for r in self.store.scan(log_id):
            key = (r.ledger_id, r.entry_id)
            self.check_payload(key, r.payload, r.crc32c, f"scan of log {log_id}")
            self.check_appended(r.location, key)
            found[key] = r.location
            item = counts.setdefault(r.ledger_id, [0, 0])
            item[0] += 1
            item[1] += fmt.RECORD_HEADER_SIZE_BYTES + len(r.payload)
        return found, {lid: LedgerUsage(c, b) for lid, (c, b) in counts.items()}

    def sealed_map_on_disk(self, log_id: int) -> dict[int, LedgerUsage] | None:
        path = self.store.path_of(log_id)
        raw = self.fs.file_bytes(path)
        try:
            header = fmt.decode_file_header(raw, path=str(path))
        except CorruptRecord:
            return None  # A torn header of a log left unsealed by a full disk.
        if not header.sealed:
            return None
        start = header.ledgers_map_offset
        return fmt.decode_ledgers_map(raw[start:start + header.ledgers_map_length],
                                      path=str(path), offset=start)

    def check_payload(self, key: Key, payload: bytes, crc: int, what: str) -> None:
        if payload != payload_of(*key) or crc != crc32c.crc32c(payload_of(*key)):
            self.fail(f"{what}: wrong bytes for entry {key}")

    def check_appended(self, location: Location, key: Key) -> None:
        if key not in self.model.appended.get(location, set()):
            self.fail(f"entry {key} at {location} was never appended there")


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"seed-{s}")
def test_fault_simulation(seed: int) -> None:
    Simulation(seed).run()


def test_the_simulation_meets_every_kind_of_failure() -> None:
    """The seeds above are worth something only if the failures really happen."""
    kinds: set[tuple[str, int]] = set()
    disk_full_count = 0
    for seed in SEEDS[:40]:
        simulation = Simulation(seed)
        simulation.run()
        kinds.update((op, n) for op, n, _ in simulation.fs.failures)
        disk_full_count += sum(1 for _, n, _ in simulation.fs.failures if n == errno.ENOSPC)
    assert set(FAULTS) | {("pread", errno.EIO)} <= kinds, set(FAULTS) - kinds
    assert disk_full_count >= 20
