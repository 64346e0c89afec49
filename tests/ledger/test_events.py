"""Byte tables for the journal event codec (ledger/_events.py)."""

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.errors import InvariantViolation
from ledger import TierPosition
from ledger import _events as ev
from ledger._password import PasswordHash, PasswordScheme

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


def test_a_scrypt_create_is_written_as_before_the_scheme_tag():
    """Type 2, byte for byte the old layout: old and new code read it alike."""
    body = ev.encode(ev.CreateEvent(9, 12.25, PasswordHash(SALT, DIGEST), {}))
    assert body == (b"\x02" + (9).to_bytes(8, "big") + struct.pack(">d", 12.25) + SALT + DIGEST
                    + (2).to_bytes(4, "big") + b"{}")


KEYED = PasswordHash(SALT, DIGEST, PasswordScheme.KEYED_BLAKE2B)
CREATE_KEYED = (b"\x0a" + (9).to_bytes(8, "big") + struct.pack(">d", 12.25)
                + b"\x02" + bytes([len(SALT), len(DIGEST)]) + (9).to_bytes(4, "big")
                + SALT + DIGEST + b'{"a":"b"}')


def test_create_keyed_bytes():
    """CREATE_KEYED names its scheme and the sizes of salt and digest, so a
    future scheme is a new tag value, not a new record layout."""
    event = ev.CreateEvent(9, 12.25, KEYED, {"a": "b"})
    assert ev.encode(event) == CREATE_KEYED
    assert ev.decode([CREATE_KEYED], [0]) == event


def test_rehash_bytes():
    event = ev.RehashEvent(9, KEYED)
    body = (b"\x0b" + (9).to_bytes(8, "big") + b"\x02" + bytes([len(SALT), len(DIGEST)])
            + SALT + DIGEST)
    assert ev.encode(event) == body
    assert ev.decode([body], [0]) == event
    for bad in (body[:-1], body + b"\x00", body[:9] + b"\x07" + body[10:]):
        with pytest.raises(InvariantViolation):
            ev.decode([bad], [0])


@pytest.mark.parametrize("body", [
    CREATE_KEYED[:-1],  # metadata cut
    CREATE_KEYED + b"\x00",  # trailing byte
    CREATE_KEYED[:23],  # header cut
    CREATE_KEYED[:17] + b"\x07" + CREATE_KEYED[18:],  # unknown scheme
])
def test_malformed_create_keyed_raises(body: bytes):
    with pytest.raises(InvariantViolation):
        ev.decode([body], [0])


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


# --- replica events (cluster mode) ---------------------------------------------


def test_replica_add_envelope_bytes_and_record():
    envelope = ev.replica_add_envelope(7, 3, 41, [5, 9])
    assert envelope == (
        b"\x06"
        + b"\x00\x00\x00\x00\x00\x00\x00\x07"  # ledger id
        + b"\x00\x00\x00\x00\x00\x00\x00\x03"  # fence epoch
        + b"\x00\x00\x00\x00\x00\x00\x00\x29"  # lac 41
        + b"\x00\x00\x00\x02"                  # two entries
        + b"\x00\x00\x00\x00\x00\x00\x00\x05"  # entry ids, not dense
        + b"\x00\x00\x00\x00\x00\x00\x00\x09"
    )
    first = ev.replica_stored(3, 2, b"hi")
    assert first == b"\x00" * 7 + b"\x03" + b"\x00" * 7 + b"\x02" + b"hi"
    second = ev.replica_stored(3, 5, b"yo!")
    event = ev.decode([envelope, first, second], [0, 11, 22])
    assert event == ev.ReplicaAddEvent(7, 3, 41, (5, 9), (first, second), (11, 22))
    assert ev.replica_unstored(second) == (3, 5, b"yo!")


def test_a_copy_is_an_add_with_fence_epoch_zero_and_lac_minus_one():
    envelope = ev.replica_add_envelope(1, 0, -1, [])
    assert envelope == (b"\x06" + (1).to_bytes(8, "big") + bytes(8) + b"\xff" * 8
                        + bytes(4))
    assert ev.decode([envelope], [0]) == ev.ReplicaAddEvent(1, 0, -1, (), (), ())


def test_replica_fence_and_delete_bytes():
    fence = ev.encode(ev.ReplicaFenceEvent(2, 9))
    assert fence == b"\x07" + (2).to_bytes(8, "big") + (9).to_bytes(8, "big")
    assert ev.decode([fence], [0]) == ev.ReplicaFenceEvent(2, 9)
    delete = ev.encode(ev.ReplicaDeleteEvent(4))
    assert delete == b"\x08" + (4).to_bytes(8, "big")
    assert ev.decode([delete], [0]) == ev.ReplicaDeleteEvent(4)


def test_replica_parts_carry_each_stored_entrys_crc():
    stored = ev.replica_stored(1, 3, b"abc")
    parts, crcs = ev.replica_parts(ev.ReplicaAddEvent(5, 1, 0, (0,), (stored,), (1234,)))
    assert parts == [ev.replica_add_envelope(5, 1, 0, [0]), stored]
    assert crcs[1] == 1234


REPLICA_ENVELOPE = ev.replica_add_envelope(1, 1, 0, [0])


@pytest.mark.parametrize(
    "parts",
    [
        [REPLICA_ENVELOPE],  # the envelope names one entry, none follows
        [REPLICA_ENVELOPE[:-1], ev.replica_stored(1, 1, b"x")],  # entry id cut
        [REPLICA_ENVELOPE[:20], ev.replica_stored(1, 1, b"x")],  # cut inside lac
        [REPLICA_ENVELOPE, b"short"],  # a stored entry shorter than its prefix
        [ev.encode(ev.ReplicaFenceEvent(1, 1))[:-1]],
        [ev.encode(ev.ReplicaFenceEvent(1, 1)) + b"\x00"],
        [ev.encode(ev.ReplicaDeleteEvent(1))[:-1]],
    ],
)
def test_malformed_replica_records_raise(parts):
    with pytest.raises(InvariantViolation):
        ev.decode(parts, [0] * len(parts))


def test_replica_add_envelope_refuses_a_negative_fence_epoch_or_a_lac_below_minus_one():
    with pytest.raises(InvariantViolation):
        ev.replica_add_envelope(1, 1, -2, [])
