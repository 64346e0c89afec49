"""Byte tables for the journal event codec (ledger/_events.py)."""

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.errors import InvariantViolation
from ledger import TierPosition
from ledger import _events as ev
from ledger._password import PasswordHash

SALT = bytes(range(16))
DIGEST = bytes(range(32, 64))


def test_add_envelope_bytes_and_record():
    envelope = ev.add_envelope(7, 3, 2)
    assert envelope == (
        b"\x01"
        + b"\x00\x00\x00\x00\x00\x00\x00\x07"
        + b"\x00\x00\x00\x00\x00\x00\x00\x03"
        + b"\x00\x00\x00\x02"
    )
    event = ev.decode([envelope, b"hi", b"yo"], [0, 0xDEADBEEF, 0x1234])
    assert event == ev.AddEvent(7, 3, (b"hi", b"yo"), (0xDEADBEEF, 0x1234))


def test_add_record_bytes_counts_the_envelope_and_a_table_entry_per_payload():
    # 4 (part count) + 8 per part (envelope and two payloads) + 21 + payload bytes
    assert ev.add_record_bytes(5, 2) == 4 + 3 * 8 + 21 + 5


def test_an_add_written_before_records_had_parts_still_decodes():
    body = (ev.add_envelope(7, 3, 1) + b"\xde\xad\xbe\xef" + b"\x00\x00\x00\x02" + b"hi")
    assert ev.decode([body], [0]) == ev.AddEvent(7, 3, (b"hi",), (0xDEADBEEF,))


def test_small_events_bytes():
    assert ev.encode(ev.FenceEvent(1)) == b"\x03" + (1).to_bytes(8, "big")
    assert ev.encode(ev.DeleteEvent(2)) == b"\x05" + (2).to_bytes(8, "big")
    close = ev.encode(ev.CloseEvent(3, 1.5))
    assert close == b"\x04" + (3).to_bytes(8, "big") + struct.pack(">d", 1.5)
    assert ev.decode([close], [0]) == ev.CloseEvent(3, 1.5)


def test_create_round_trip():
    event = ev.CreateEvent(9, 12.25, PasswordHash(SALT, DIGEST), {"a": "b"})
    body = ev.encode(event)
    assert body[:9] == b"\x02" + (9).to_bytes(8, "big")
    assert body.endswith(b'{"a":"b"}')
    assert ev.decode([body], [0]) == event


GOOD_ENVELOPE = ev.add_envelope(1, 0, 1)
OLD_ADD = GOOD_ENVELOPE + b"\x00\x00\x00\x05" + b"\x00\x00\x00\x03" + b"abc"


@pytest.mark.parametrize(
    "parts",
    [
        [b""],  # empty
        [b"\x09" + bytes(8)],  # unknown type
        [GOOD_ENVELOPE, b"a", b"b"],  # the envelope says one entry, two follow
        [GOOD_ENVELOPE[:-1], b"a"],  # envelope cut
        [OLD_ADD[:1]],  # cut inside ledger id
        [OLD_ADD[:21]],  # cut after count: item header missing
        [OLD_ADD[:-1]],  # payload cut short
        [OLD_ADD + b"\x00"],  # trailing byte
        [ev.encode(ev.FenceEvent(1))[:-1]],
        [ev.encode(ev.CloseEvent(1, 0.0)) + b"\x00"],
        [ev.encode(ev.FenceEvent(1)), b"extra part"],
        [ev.encode(ev.CreateEvent(1, 0.0, PasswordHash(SALT, DIGEST), {}))[:-1]],
    ],
)
def test_malformed_records_raise(parts):
    with pytest.raises(InvariantViolation):
        ev.decode(parts, [0] * len(parts))


@given(
    ledger_id=st.integers(0, 2**63 - 1),
    first=st.integers(0, 2**63 - 1000),
    entries=st.lists(st.tuples(st.binary(max_size=64), st.integers(0, 2**32 - 1)),
                     min_size=1, max_size=20),
)
def test_add_round_trip(ledger_id, first, entries):
    payloads = tuple(p for p, _ in entries)
    crcs = tuple(c for _, c in entries)
    parts = [ev.add_envelope(ledger_id, first, len(entries)), *payloads]
    assert ev.decode(parts, [0, *crcs]) == ev.AddEvent(ledger_id, first, payloads, crcs)


def test_tier_event_bytes():
    position = TierPosition(segment_first_entry_id=5, byte_position=0x500000, entry_id=7,
                            entry_offset=0x4FFF00, segment_start_bytes=0x40000000)
    body = ev.encode(ev.TierEvent(3, position))
    assert body == (
        b"\x09"
        + b"\x00\x00\x00\x00\x00\x00\x00\x03"  # ledger_id
        + b"\x00\x00\x00\x00\x00\x00\x00\x05"  # segment_first_entry_id
        + b"\x00\x00\x00\x00\x00\x50\x00\x00"  # byte_position
        + b"\x00\x00\x00\x00\x00\x00\x00\x07"  # entry_id
        + b"\x00\x00\x00\x00\x00\x4f\xff\x00"  # entry_offset
        + b"\x00\x00\x00\x00\x40\x00\x00\x00"  # segment_start_bytes
    )
    assert ev.decode([body], [0]) == ev.TierEvent(3, position)
    for cut in (1, 9, 48):
        with pytest.raises(InvariantViolation):
            ev.decode([body[:cut]], [0])
