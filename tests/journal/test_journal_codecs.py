"""Byte tables for the record and header codecs, and the recovery decision table."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.errors import FormatMismatch
from journal._header import (
    HEADER_SLOT_SIZE_BYTES,
    JournalHeader,
    ShutdownType,
    SlotClass,
    choose_header,
    decode_header,
    encode_header,
)
from journal._record import (
    RecordClass,
    decode_record,
    encode_pad_header,
    encode_record,
    encode_record_v1,
)
from journal._recovery import Verdict, decide

JID = 0x0102030405060708
BOUND = 1 << 20

# parts b"ab" and b"c" at logical offset 4096 of journal JID:
#   magic    | length   | logical offset   | journal id       | table crc | head crc
#   part count | part 0: length, crc  | part 1: length, crc  | parts
VALID = bytes.fromhex(
    "4c4a5232" "00000017" "0000000000001000" "0102030405060708" "246854a8" "386777d6"
    "00000002" "00000002" "e2a22936" "00000001" "20eb33c7" "616263")
EMPTY_BODY_AT_0 = bytes.fromhex(
    "4c4a5232" "0000000c" "0000000000000000" "0102030405060708" "df5e6315" "e1cd75e8"
    "00000001" "00000000" "00000000")
# A version-1 record (before parts): one body b"abc", its CRC in the header.
V1 = bytes.fromhex(
    "4c4a5243" "00000003" "0000000000001000" "0102030405060708" "364b3fb7" "58a3c8e4"
    "616263")
PAD_8192_AT_8192 = bytes.fromhex(
    "4c4a5044" "00001fe0" "0000000000002000" "0102030405060708" "00000000" "de4f3278")


def decode(buf: bytes, offset: int = 4096, jid: int = JID, bound: int = BOUND):
    return decode_record(buf, expected_offset=offset, journal_id=jid, body_length_max=bound)


def flip(buf: bytes, index: int, mask: int = 0x01) -> bytes:
    return buf[:index] + bytes([buf[index] ^ mask]) + buf[index + 1:]


def test_encoder_matches_the_byte_table():
    assert encode_record([b"ab", b"c"], logical_offset=4096, journal_id=JID) == VALID
    assert encode_record([b""], logical_offset=0, journal_id=JID) == EMPTY_BODY_AT_0
    assert encode_record_v1(b"abc", logical_offset=4096, journal_id=JID) == V1
    assert encode_pad_header(hole_length=8192, logical_offset=8192,
                             journal_id=JID) == PAD_8192_AT_8192


@pytest.mark.parametrize(("buf", "offset", "klass", "reason"), [
    (VALID, 4096, RecordClass.VALID, "ok"),
    (VALID + b"trailing bytes are the next record", 4096, RecordClass.VALID, "ok"),
    (EMPTY_BODY_AT_0, 0, RecordClass.VALID, "ok"),
    (PAD_8192_AT_8192, 8192, RecordClass.VALID, "pad"),
    (b"", 4096, RecordClass.END, "zeros"),
    (bytes(32), 4096, RecordClass.END, "zeros"),
    (bytes(64), 4096, RecordClass.END, "zeros"),
    # cut at each field boundary
    (VALID[:4], 4096, RecordClass.TORN, "header cut at 4 of 32 bytes"),
    (VALID[:8], 4096, RecordClass.TORN, "header cut at 8 of 32 bytes"),
    (VALID[:16], 4096, RecordClass.TORN, "header cut at 16 of 32 bytes"),
    (VALID[:24], 4096, RecordClass.TORN, "header cut at 24 of 32 bytes"),
    (VALID[:28], 4096, RecordClass.TORN, "header cut at 28 of 32 bytes"),
    (VALID[:32], 4096, RecordClass.TORN, "body cut at 0 of 23 bytes"),
    (VALID[:36], 4096, RecordClass.TORN, "body cut at 4 of 23 bytes"),
    (VALID[:52], 4096, RecordClass.TORN, "body cut at 20 of 23 bytes"),
    (V1, 4096, RecordClass.VALID, "ok"),
    (V1[:34], 4096, RecordClass.TORN, "body cut at 2 of 3 bytes"),
    (flip(V1, 33), 4096, RecordClass.CORRUPT, "body crc32c mismatch"),
    # a stale record from an earlier lap: everything right but its offset
    (VALID, 4096 + 1024 * 1024, RecordClass.END,
     "logical offset 4096 where 1052672 was expected (stale record from an earlier lap)"),
    # one flipped byte in each field
    (flip(VALID, 0), 4096, RecordClass.END, "wrong magic 0x4d4a5232"),
    (flip(VALID, 7), 4096, RecordClass.CORRUPT, "header crc32c mismatch"),
    (flip(VALID, 15), 4096, RecordClass.END,
     "logical offset 4097 where 4096 was expected (stale record from an earlier lap)"),
    (flip(VALID, 23), 4096, RecordClass.END, "foreign journal id 0x0102030405060709"),
    (flip(VALID, 27), 4096, RecordClass.CORRUPT, "header crc32c mismatch"),
    (flip(VALID, 31), 4096, RecordClass.CORRUPT, "header crc32c mismatch"),
    (flip(VALID, 35), 4096, RecordClass.CORRUPT, "part table of 3 parts does not fit"),
    (flip(VALID, 43), 4096, RecordClass.CORRUPT, "part table crc32c mismatch"),
    (flip(VALID, 52), 4096, RecordClass.CORRUPT, "part 0 crc32c mismatch"),
    (flip(VALID, 54), 4096, RecordClass.CORRUPT, "part 1 crc32c mismatch"),
])
def test_record_byte_table(buf, offset, klass, reason):
    check = decode(buf, offset)
    assert (check.klass, check.reason) == (klass, reason)
    if klass is RecordClass.VALID and not check.pad:
        assert b"".join(check.parts) == b"abc" or check.parts == (b"",)


def test_a_part_table_that_does_not_add_up_is_corrupt():
    from journal._record import encode_part_table, encode_record_header

    def record(table: bytes, tail: bytes) -> bytes:
        import crc32c
        head = encode_record_header(body_length=len(table) + len(tail), logical_offset=4096,
                                    journal_id=JID, table_crc32c=crc32c.crc32c(table))
        return head + table + tail

    table, _ = encode_part_table([2], [0x364B3FB7])
    assert decode(record(table, b"abc")).reason == "part 0 crc32c mismatch"
    table, _ = encode_part_table([1], [0x20EB33C7])
    assert decode(record(table, b"cc")).reason == "parts do not add up to the body length"
    assert decode(record(b"\x00\x00\x00\x00", b"")).reason == (
        "part table of 0 parts does not fit")
    assert decode(record(b"\x00\x00\x00\x09", b"")).reason == (
        "part table of 9 parts does not fit")


def test_length_is_bounded_before_the_body_is_read():
    huge = encode_record([b"x" * 100], logical_offset=4096, journal_id=JID)
    check = decode(huge[:32], bound=99)  # only the header: nothing was allocated for it
    assert (check.klass, check.reason) == (
        RecordClass.CORRUPT, "body length 112 exceeds the bound 99")


@given(parts=st.lists(st.binary(max_size=2000), min_size=1, max_size=5),
       offset=st.integers(0, 2**62), jid=st.integers(1, 2**64 - 1))
def test_record_round_trip(parts, offset, jid):
    buf = encode_record(parts, logical_offset=offset, journal_id=jid)
    check = decode(buf, offset, jid)
    assert check.klass is RecordClass.VALID
    assert check.parts == tuple(parts) and check.size_bytes == len(buf)


HEADER = JournalHeader(
    journal_id=JID, generation=3, capacity_bytes=1 << 20, trim_offset=12345,
    last_write_time_us=1_700_000_000_000_000, sliding_window_max_length=1 << 18,
    shutdown_type=ShutdownType.UNCLEAN)
#   magic    | ver  | shut | journal id       | generation       | capacity
#   trim offset      | last write time (us) | sliding window     | crc
SLOT = bytes.fromhex(
    "4c4a4844" "0001" "0002" "0102030405060708" "0000000000000003" "0000000000100000"
    "0000000000003039" "00060a24181e4000" "0000000000040000" "9f716022"
) + bytes(HEADER_SLOT_SIZE_BYTES - 60)


def test_header_encoder_matches_the_byte_table():
    assert encode_header(HEADER) == SLOT


@pytest.mark.parametrize(("slot", "index", "klass", "reason"), [
    (SLOT, 1, SlotClass.VALID, "ok"),
    (bytes(4096), 0, SlotClass.EMPTY, "zeros"),
    (SLOT, 0, SlotClass.INVALID, "generation 3 does not belong in slot 0"),
    (SLOT[:4095], 1, SlotClass.INVALID, "slot is 4095 bytes, not 4096"),
    (SLOT[:56] + bytes(4040), 1, SlotClass.INVALID, "header crc32c mismatch"),
    (flip(SLOT, 0), 1, SlotClass.INVALID, "wrong magic 0x4d4a4844"),
    (flip(SLOT, 5), 1, SlotClass.INVALID, "header crc32c mismatch"),
    (flip(SLOT, 39), 1, SlotClass.INVALID, "header crc32c mismatch"),
    (flip(SLOT, 59), 1, SlotClass.INVALID, "header crc32c mismatch"),
    (flip(SLOT, 2000), 1, SlotClass.INVALID, "non-zero bytes in the slot padding"),
    (b"\xff" * 4096, 1, SlotClass.INVALID, "wrong magic 0xffffffff"),
])
def test_header_byte_table(slot, index, klass, reason):
    check = decode_header(slot, slot_index=index)
    assert (check.klass, check.reason) == (klass, reason)
    if klass is SlotClass.VALID:
        assert check.header == HEADER


def test_highest_valid_generation_wins_and_foreign_bytes_are_refused():
    newer = encode_header(dataclasses.replace(HEADER, generation=4))
    checks = [decode_header(newer, slot_index=0), decode_header(SLOT, slot_index=1)]
    assert choose_header(checks, path="dev").generation == 4
    assert choose_header([decode_header(bytes(4096), slot_index=0),
                          decode_header(SLOT, slot_index=1)], path="dev") == HEADER
    assert choose_header([decode_header(bytes(4096), slot_index=i) for i in (0, 1)],
                         path="dev") is None
    with pytest.raises(FormatMismatch, match=r"dev .*refusing to format it"):
        choose_header([decode_header(b"\x01" * 4096, slot_index=0),
                       decode_header(bytes(4096), slot_index=1)], path="dev")


@given(jid=st.integers(1, 2**64 - 1), generation=st.integers(1, 2**63),
       capacity_blocks=st.integers(1, 2**40), trim=st.integers(0, 2**63),
       window=st.integers(0, 2**40), clean=st.booleans())
def test_header_round_trip(jid, generation, capacity_blocks, trim, window, clean):
    header = JournalHeader(
        journal_id=jid, generation=generation, capacity_bytes=capacity_blocks * 4096,
        trim_offset=trim, last_write_time_us=123, sliding_window_max_length=window,
        shutdown_type=ShutdownType.CLEAN if clean else ShutdownType.UNCLEAN)
    check = decode_header(encode_header(header), slot_index=generation % 2)
    assert check.header == header


# The recovery decision table (R3-R5) over every input, written out by hand.
#  clean  corrupt_seen  valid_after_hole  valid_beyond_window -> verdict
DECISIONS = {
    (False, False, False, False): Verdict.END,
    (False, False, False, True): Verdict.CORRUPT,
    (False, False, True, False): Verdict.REPAIR,
    (False, False, True, True): Verdict.CORRUPT,
    (False, True, False, False): Verdict.REPAIR,
    (False, True, False, True): Verdict.CORRUPT,
    (False, True, True, False): Verdict.REPAIR,
    (False, True, True, True): Verdict.CORRUPT,
    (True, False, False, False): Verdict.END,
    (True, False, False, True): Verdict.CORRUPT,
    (True, False, True, False): Verdict.CORRUPT,
    (True, False, True, True): Verdict.CORRUPT,
    (True, True, False, False): Verdict.CORRUPT,
    (True, True, False, True): Verdict.CORRUPT,
    (True, True, True, False): Verdict.CORRUPT,
    (True, True, True, True): Verdict.CORRUPT,
}


def test_decision_table_covers_every_input():
    assert set(DECISIONS) == set(itertools.product([False, True], repeat=4))
    for (clean, corrupt, after, beyond), verdict in DECISIONS.items():
        assert decide(clean=clean, corrupt_seen=corrupt, valid_after_hole=after,
                      valid_beyond_window=beyond) is verdict, (clean, corrupt, after, beyond)
