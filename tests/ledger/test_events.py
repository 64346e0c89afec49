"""Byte tables for the journal event codec (ledger/_events.py)."""

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.errors import InvariantViolation
from ledger import _events as ev
from ledger._password import PasswordHash

SALT = bytes(range(16))
DIGEST = bytes(range(32, 64))


def test_add_single_entry_bytes():
    body = ev.encode_add(7, 3, [(b"hi", 0xDEADBEEF)])
    assert body == (
        b"\x01"
        + b"\x00\x00\x00\x00\x00\x00\x00\x07"
        + b"\x00\x00\x00\x00\x00\x00\x00\x03"
        + b"\x00\x00\x00\x01"
        + b"\xde\xad\xbe\xef"
        + b"\x00\x00\x00\x02"
        + b"hi"
    )
    assert ev.decode(body) == ev.AddEvent(7, 3, ((b"hi", 0xDEADBEEF),))


def test_set_first_entry_id_patches_in_place():
    body = bytearray(ev.encode_add(7, 0, [(b"x", 1), (b"yz", 2)]))
    ev.set_first_entry_id(body, 41)
    assert ev.decode(bytes(body)) == ev.AddEvent(7, 41, ((b"x", 1), (b"yz", 2)))


def test_small_events_bytes():
    assert ev.encode_fence(1) == b"\x03" + (1).to_bytes(8, "big")
    assert ev.encode_delete(2) == b"\x05" + (2).to_bytes(8, "big")
    assert ev.encode_close(3, 1.5) == b"\x04" + (3).to_bytes(8, "big") + struct.pack(">d", 1.5)
    assert ev.decode(ev.encode_close(3, 1.5)) == ev.CloseEvent(3, 1.5)


def test_create_round_trip():
    event = ev.CreateEvent(9, 12.25, PasswordHash(SALT, DIGEST), {"a": "b"})
    body = ev.encode_create(event)
    assert body[:9] == b"\x02" + (9).to_bytes(8, "big")
    assert body.endswith(b'{"a":"b"}')
    assert ev.decode(body) == event


GOOD_ADD = ev.encode_add(1, 0, [(b"abc", 5)])


@pytest.mark.parametrize(
    "body",
    [
        b"",  # empty
        b"\x09" + bytes(8),  # unknown type
        GOOD_ADD[:1],  # cut inside ledger id
        GOOD_ADD[:9],  # cut after ledger id
        GOOD_ADD[:21],  # cut after count: item header missing
        GOOD_ADD[:-1],  # payload cut short
        GOOD_ADD + b"\x00",  # trailing byte
        ev.encode_fence(1)[:-1],
        ev.encode_close(1, 0.0) + b"\x00",
        ev.encode_create(ev.CreateEvent(1, 0.0, PasswordHash(SALT, DIGEST), {}))[:-1],
    ],
)
def test_malformed_bodies_raise(body):
    with pytest.raises(InvariantViolation):
        ev.decode(body)


@given(
    ledger_id=st.integers(0, 2**63 - 1),
    first=st.integers(0, 2**63 - 1000),
    entries=st.lists(st.tuples(st.binary(max_size=64), st.integers(0, 2**32 - 1)),
                     min_size=1, max_size=20),
)
def test_add_round_trip(ledger_id, first, entries):
    body = ev.encode_add(ledger_id, first, entries)
    assert ev.decode(body) == ev.AddEvent(ledger_id, first, tuple(entries))
