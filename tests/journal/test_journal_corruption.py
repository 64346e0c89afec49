"""One corruption harness (STYLE 12): each case is a ``corrupt(device, offset)``
function; the harness checks detect -> repair -> read back -> append -> read back,
or that the damage is refused (and that refusing changed nothing)."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from common.errors import CorruptRecord, DeviceBroken, FormatMismatch, InvariantViolation
from common.units import KiB
from journal import Journal, JournalSettings
from journal.testing import FaultyDevice
from tests.journal.conftest import ONE_PART_RECORD_OVERHEAD_BYTES, assert_acked_per_block

SETTINGS = JournalSettings(device_path=Path("corruption"), capacity_bytes=1024 * KiB,
                           sliding_window_bytes_max=64 * KiB,
                           block_size_bytes_soft_limit=16 * KiB)
DATA = 8192


@dataclass(frozen=True)
class Written:
    offset: int
    end_offset: int
    body: bytes


def physical(logical: int) -> int:
    return DATA + logical % SETTINGS.capacity_bytes


def build(*, clean: bool, count: int) -> tuple[FaultyDevice, list[Written]]:
    """A journal with ``count`` synced records, closed cleanly or abandoned (crash
    with nothing unsynced: the header says UNCLEAN)."""
    rng = random.Random(count)
    device = FaultyDevice(DATA + SETTINGS.capacity_bytes)
    journal = Journal.open(SETTINGS, device=device)
    list(journal.replay())
    journal.start(background=False)
    written = []
    for i in range(count):
        body = f"record {i} ".encode() + rng.randbytes(rng.randrange(200, 1500))
        append = journal.append_nowait(body)
        written.append(Written(append.offset, append.end_offset, body))
        if i % 7 == 6:
            journal.pump_write()
            journal.pump_sync()
    while journal.pump_write() or journal.pump_sync():
        pass
    if clean:
        journal.close()
    else:
        device.crash(random.Random(0))
        with contextlib.suppress(DeviceBroken):
            journal.close()
        device.restart()
    return device, written


Corrupt = Callable[[FaultyDevice, int], None]


def flip_bit(device: FaultyDevice, offset: int) -> None:
    device.poke(offset, bytes([device.peek(offset, 1)[0] ^ 0x10]))


def zero_to_block_end(device: FaultyDevice, offset: int) -> None:
    end = -(-(offset + 1) // 4096) * 4096
    device.poke(offset, bytes(end - offset))


def zero_slot(device: FaultyDevice, offset: int) -> None:
    device.poke(offset, bytes(4096))


def scribble_both_slots(device: FaultyDevice, offset: int) -> None:
    device.poke(0, b"\xde\xad" * 4096)


@dataclass(frozen=True)
class Case:
    name: str
    clean: bool
    count: int
    corrupt: Corrupt
    # (written records) -> (device offset to corrupt, index of the first lost record)
    where: Callable[[list[Written]], tuple[int, int]]
    raises: type[Exception] | None = None
    torn_tail: bool = False


def last_body(w: list[Written]) -> tuple[int, int]:
    middle = w[-1].offset + ONE_PART_RECORD_OVERHEAD_BYTES + len(w[-1].body) // 2
    return physical(middle), len(w) - 1


def inside_last_record_512(w: list[Written]) -> tuple[int, int]:
    # Keep the 512-byte sectors before the middle of the last record: a torn block.
    middle = physical(w[-1].offset + (w[-1].end_offset - w[-1].offset) // 2)
    tear = middle - middle % 512
    lost = next(i for i, r in enumerate(w) if physical(r.end_offset) > tear)
    return tear, lost


def middle_record(w: list[Written]) -> tuple[int, int]:
    return physical(w[len(w) // 4].offset + 40), len(w) // 4


CASES = [
    Case("torn last block", False, 60, zero_to_block_end, inside_last_record_512,
         torn_tail=True),
    Case("flipped bit in the last record after a crash", False, 60, flip_bit, last_body,
         torn_tail=True),
    Case("flipped bit in the last record after a clean close", True, 60, flip_bit, last_body,
         raises=CorruptRecord),
    Case("flipped bit in a middle record after a crash", False, 400, flip_bit, middle_record,
         raises=CorruptRecord),
    Case("flipped bit in a middle record after a clean close", True, 400, flip_bit,
         middle_record, raises=CorruptRecord),
    # The newest header is generation 4 in slot 0 (format wrote 1, 2; start wrote 3, 4).
    Case("zeroed newest header slot", True, 60, zero_slot, lambda w: (0, len(w))),
    Case("zeroed older header slot", False, 60, zero_slot, lambda w: (4096, len(w))),
    Case("both header slots damaged", True, 60, scribble_both_slots, lambda w: (0, 0),
         raises=FormatMismatch),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_corruption(case: Case) -> None:
    device, written = build(clean=case.clean, count=case.count)
    offset, first_lost = case.where(written)
    case.corrupt(device, offset)

    if case.raises is not None:
        damaged = device.peek(0, device.size_bytes)
        for _ in range(2):  # refusing changes nothing: the second open sees the same
            if case.raises is FormatMismatch:
                with pytest.raises(FormatMismatch, match="refusing to format it") as info:
                    Journal.open(SETTINGS, device=device)
                assert device.path in str(info.value)
                continue
            journal = Journal.open(SETTINGS, device=device)
            with pytest.raises(CorruptRecord) as corrupt:
                list(journal.replay())
            assert corrupt.value.path == device.path
            assert corrupt.value.offset == written[first_lost].offset
            assert f"device offset {physical(written[first_lost].offset)}" in str(
                corrupt.value)
            with pytest.raises(InvariantViolation, match="start"):
                journal.start()  # a journal whose replay failed never writes
            journal.close()
        assert device.peek(0, device.size_bytes) == damaged
        return

    # detect
    journal = Journal.open(SETTINGS, device=device)
    survivors = [(w.offset, w.body) for w in written[:first_lost]]
    assert [(r.offset, r.body) for r in journal.replay()] == survivors
    report = journal.recovery_report
    assert report.clean_shutdown == case.clean
    assert (report.torn_tail_offset is not None) == case.torn_tail
    # repair, then append
    journal.start(background=False)
    new = [journal.append_nowait(b"after repair %d" % i) for i in range(20)]
    journal.close()
    assert_acked_per_block(new)
    # read back: the repaired journal replays cleanly, old survivors then new records
    journal = Journal.open(SETTINGS, device=device)
    expected = survivors + [(a.offset, b"after repair %d" % i) for i, a in enumerate(new)]
    assert [(r.offset, r.body) for r in journal.replay()] == expected
    assert journal.recovery_report.clean_shutdown
    assert journal.recovery_report.holes == ()
    journal.close()
