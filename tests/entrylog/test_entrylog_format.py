"""Byte tables for the entry log codec: valid, empty, cut at each field, one flipped byte."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.errors import CorruptRecord, InvariantViolation
from entrylog import LedgerUsage
from entrylog import _format as fmt

PATH = "/data/entrylogs/0000000000000001.log"

# --- file header -------------------------------------------------------------

# log 1, unsealed.
HEADER_UNSEALED = bytes.fromhex(
    "4c44454c"  # magic "LDEL"
    "00000001"  # version 1
    "0000000000000001"  # log_id 1
    "0000000000000000"  # ledgers_map_offset 0 (no map)
    "00000000"  # ledgers_map_length 0
    "00000000"  # ledger_count 0
    "786808a4"  # crc32c of the 32 bytes above
) + bytes(4060)

# log 2, sealed, map of one ledger (36 bytes) at offset 8192.
HEADER_SEALED = bytes.fromhex(
    "4c44454c" "00000001" "0000000000000002" "0000000000002000" "00000024" "00000001" "8f443e68"
) + bytes(4060)

HEADER_FIELD_BOUNDARIES = [0, 4, 8, 16, 24, 28, 32, 35]


def _flip(data: bytes, index: int) -> bytes:
    return data[:index] + bytes([data[index] ^ 0x01]) + data[index + 1 :]


def _reseal_header(head32: bytes) -> bytes:
    return head32 + struct.pack(">I", crc32c.crc32c(head32)) + bytes(4060)


def test_header_encodes_to_the_table() -> None:
    assert fmt.encode_file_header(fmt.FileHeader(1)) == HEADER_UNSEALED
    assert fmt.encode_file_header(fmt.FileHeader(2, 8192, 36, 1)) == HEADER_SEALED
    assert len(HEADER_UNSEALED) == fmt.HEADER_SIZE_BYTES


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (HEADER_UNSEALED, fmt.FileHeader(1, 0, 0, 0)),
        (HEADER_SEALED, fmt.FileHeader(2, 8192, 36, 1)),
        # Readers ignore the padding (reserved for later versions).
        (HEADER_UNSEALED[:36], fmt.FileHeader(1, 0, 0, 0)),
    ],
)
def test_header_decodes(data: bytes, expected: fmt.FileHeader) -> None:
    header = fmt.decode_file_header(data, path=PATH)
    assert header == expected
    assert header.sealed == (expected.ledgers_map_offset != 0)


@pytest.mark.parametrize("cut", HEADER_FIELD_BOUNDARIES)
def test_header_cut_at_field_boundary_is_corrupt(cut: int) -> None:
    with pytest.raises(CorruptRecord, match="file header truncated") as info:
        fmt.decode_file_header(HEADER_SEALED[:cut], path=PATH)
    assert info.value.path == PATH and info.value.offset == 0


@pytest.mark.parametrize(
    ("index", "reason"),
    [
        (0, "bad file magic"),
        (3, "bad file magic"),
        (4, "crc32c mismatch"),  # version
        (15, "crc32c mismatch"),  # log_id
        (16, "crc32c mismatch"),  # ledgers_map_offset
        (27, "crc32c mismatch"),  # ledgers_map_length
        (31, "crc32c mismatch"),  # ledger_count
        (35, "crc32c mismatch"),  # the crc itself
    ],
)
def test_header_flipped_byte_is_corrupt(index: int, reason: str) -> None:
    with pytest.raises(CorruptRecord, match=reason):
        fmt.decode_file_header(_flip(HEADER_SEALED, index), path=PATH)


def test_header_flipped_padding_byte_is_ignored() -> None:
    assert fmt.decode_file_header(_flip(HEADER_SEALED, 4000), path=PATH).log_id == 2


def test_header_other_version_is_refused() -> None:
    head = bytearray(HEADER_UNSEALED[:32])
    head[4:8] = struct.pack(">I", 2)
    with pytest.raises(CorruptRecord, match="unsupported entry log version 2"):
        fmt.decode_file_header(_reseal_header(bytes(head)), path=PATH)


def test_header_with_valid_crc_but_contradicting_fields_is_a_bug() -> None:
    head = bytearray(HEADER_SEALED[:32])
    head[24:28] = struct.pack(">I", 99)  # map length that does not fit ledger_count 1
    with pytest.raises(InvariantViolation):
        fmt.decode_file_header(_reseal_header(bytes(head)), path=PATH)


@pytest.mark.parametrize(
    "header",
    [
        fmt.FileHeader(0),  # log ids start at 1
        fmt.FileHeader(1, 100, 36, 1),  # map inside the header block
        fmt.FileHeader(1, 0, 36, 1),  # length without a map
        fmt.FileHeader(1, 8192, 37, 1),  # length does not match the count
    ],
)
def test_header_encode_checks_fields(header: fmt.FileHeader) -> None:
    with pytest.raises(InvariantViolation):
        fmt.encode_file_header(header)


# --- entry record ----------------------------------------------------------

# ledger 7, entry 3, payload b"abc".
RECORD = bytes.fromhex(
    "00000003"  # record_length 3
    "0000000000000007"  # ledger_id 7
    "0000000000000003"  # entry_id 3
    "364b3fb7"  # payload crc32c of b"abc"
    "671eb4e1"  # header crc32c of the 24 bytes above
    "616263"  # payload
)
ABC_CRC = 0x364B3FB7
RECORD_FIELD_BOUNDARIES = [0, 4, 12, 20, 24, 27]


def test_record_encodes_to_the_table() -> None:
    assert crc32c.crc32c(b"abc") == ABC_CRC
    assert fmt.encode_record(7, 3, b"abc", ABC_CRC) == RECORD


def test_record_decodes() -> None:
    header, payload = fmt.decode_record(RECORD, path=PATH, offset=4096)
    assert header == fmt.RecordHeader(3, 7, 3, ABC_CRC)
    assert header.record_size_bytes == 31
    assert payload == b"abc"


def test_empty_payload_record_round_trips() -> None:
    data = fmt.encode_record(1, 0, b"", crc32c.crc32c(b""))
    assert len(data) == fmt.RECORD_HEADER_SIZE_BYTES
    assert fmt.decode_record(data, path=PATH, offset=4096)[1] == b""


@pytest.mark.parametrize("cut", RECORD_FIELD_BOUNDARIES)
def test_record_cut_in_header_is_corrupt(cut: int) -> None:
    with pytest.raises(CorruptRecord, match="record header truncated") as info:
        fmt.decode_record(RECORD[:cut], path=PATH, offset=5000)
    assert info.value.offset == 5000
    assert PATH in str(info.value) and "5000" in str(info.value)


@pytest.mark.parametrize("cut", [28, 29, 30])
def test_record_cut_in_payload_is_corrupt(cut: int) -> None:
    with pytest.raises(CorruptRecord, match="record payload truncated"):
        fmt.decode_record(RECORD[:cut], path=PATH, offset=4096)


@pytest.mark.parametrize(
    ("index", "reason"),
    [
        (0, "record header crc32c mismatch"),  # record_length
        (11, "record header crc32c mismatch"),  # ledger_id
        (19, "record header crc32c mismatch"),  # entry_id
        (20, "record header crc32c mismatch"),  # payload crc
        (27, "record header crc32c mismatch"),  # header crc
        (28, "record payload crc32c mismatch"),
        (30, "record payload crc32c mismatch"),
    ],
)
def test_record_flipped_byte_is_corrupt(index: int, reason: str) -> None:
    with pytest.raises(CorruptRecord, match=reason):
        fmt.decode_record(_flip(RECORD, index), path=PATH, offset=4096)


@pytest.mark.parametrize(
    ("ledger_id", "entry_id", "payload", "crc"),
    [
        (-1, 0, b"abc", ABC_CRC),
        (0, 2**64, b"abc", ABC_CRC),
        (0, 0, b"abc", 2**32),
    ],
)
def test_record_encode_checks_fields(ledger_id: int, entry_id: int, payload: bytes,
                                     crc: int) -> None:
    with pytest.raises(InvariantViolation):
        fmt.encode_record(ledger_id, entry_id, payload, crc)


def test_record_header_stores_the_given_crc_and_decode_catches_a_wrong_one() -> None:
    # The CRC is computed once, when the entry is added; encoding does not
    # recompute it (that would be a second pass over every payload), so a
    # wrong one reaches the bytes and the read catches it.
    assert fmt.encode_record_header(7, 3, 3, ABC_CRC) == RECORD[:28]
    wrong = fmt.encode_record_header(7, 3, 3, ABC_CRC) + b"abd"
    with pytest.raises(CorruptRecord, match="record payload crc32c mismatch"):
        fmt.decode_record(wrong, path=PATH, offset=4096)


@settings(max_examples=200, deadline=None)
@given(
    ledger_id=st.integers(0, fmt.U64_MAX),
    entry_id=st.integers(0, fmt.U64_MAX),
    payload=st.binary(max_size=2048),
)
def test_record_round_trip(ledger_id: int, entry_id: int, payload: bytes) -> None:
    data = fmt.encode_record(ledger_id, entry_id, payload, crc32c.crc32c(payload))
    header, decoded = fmt.decode_record(data + b"trailing", path=PATH, offset=4096)
    assert (header.ledger_id, header.entry_id, decoded) == (ledger_id, entry_id, payload)
    assert header.record_size_bytes == len(data)



@settings(max_examples=100, deadline=None)
@given(ledger_id=st.integers(0, fmt.U64_MAX), first=st.integers(0, fmt.U64_MAX - 20),
       entries=st.lists(st.tuples(st.binary(max_size=64), st.integers(0, fmt.U32_MAX)),
                        max_size=20))
def test_a_flush_encodes_the_headers_one_record_at_a_time_would(
        ledger_id: int, first: int, entries: list[tuple[bytes, int]]) -> None:
    payloads, crcs = [p for p, _ in entries], [c for _, c in entries]
    assert fmt.encode_record_headers(ledger_id, first, payloads, crcs) == [
        fmt.encode_record_header(ledger_id, first + i, len(payload), crc)
        for i, (payload, crc) in enumerate(entries)]


@pytest.mark.parametrize(("ledger_id", "first", "crc"), [
    (-1, 0, 0), (fmt.U64_MAX + 1, 0, 0), (0, fmt.U64_MAX, 0),  # the second id overflows
    (0, 0, fmt.U32_MAX + 1), (0, 0, -1)])
def test_a_flush_refuses_a_record_field_out_of_range(ledger_id: int, first: int,
                                                     crc: int) -> None:
    with pytest.raises(InvariantViolation, match="record fields out of range"):
        fmt.encode_record_headers(ledger_id, first, [b"ok", b""], [3, crc])

# --- ledgers map -------------------------------------------------------------

# ledger 5: 2 entries, 62 bytes.
MAP_ONE = bytes.fromhex(
    "4c444c4d"  # magic "LDLM"
    "00000001"  # count 1
    "0000000000000005"  # ledger_id 5
    "0000000000000002"  # entry_count 2
    "000000000000003e"  # byte_count 62
    "3ca7a1ba"  # crc32c of the 32 bytes above
)
MAP_EMPTY = bytes.fromhex("4c444c4d" "00000000" "dcccf904")
MAP_FIELD_BOUNDARIES = [0, 4, 8, 16, 24, 32, 35]


def test_map_encodes_to_the_table() -> None:
    assert fmt.encode_ledgers_map({5: LedgerUsage(2, 62)}) == MAP_ONE
    assert fmt.encode_ledgers_map({}) == MAP_EMPTY
    assert fmt.ledgers_map_size_bytes(1) == len(MAP_ONE)


@pytest.mark.parametrize(
    ("data", "expected"),
    [(MAP_ONE, {5: LedgerUsage(2, 62)}), (MAP_EMPTY, {})],
)
def test_map_decodes(data: bytes, expected: dict[int, LedgerUsage]) -> None:
    assert fmt.decode_ledgers_map(data, path=PATH, offset=9000) == expected


@pytest.mark.parametrize("cut", MAP_FIELD_BOUNDARIES)
def test_map_cut_at_field_boundary_is_corrupt(cut: int) -> None:
    with pytest.raises(CorruptRecord) as info:
        fmt.decode_ledgers_map(MAP_ONE[:cut], path=PATH, offset=9000)
    assert info.value.offset == 9000


def test_map_with_trailing_bytes_is_corrupt() -> None:
    with pytest.raises(CorruptRecord, match="needs 36 bytes"):
        fmt.decode_ledgers_map(MAP_ONE + b"\0", path=PATH, offset=9000)


@pytest.mark.parametrize(
    ("index", "reason"),
    [
        (0, "bad ledgers map magic"),
        (7, "of 0 ledgers needs 12 bytes, got 36"),  # count 0 no longer fits the length
        (15, "ledgers map crc32c mismatch"),
        (23, "ledgers map crc32c mismatch"),
        (31, "ledgers map crc32c mismatch"),
        (35, "ledgers map crc32c mismatch"),
    ],
)
def test_map_flipped_byte_is_corrupt(index: int, reason: str) -> None:
    with pytest.raises(CorruptRecord, match=reason):
        fmt.decode_ledgers_map(_flip(MAP_ONE, index), path=PATH, offset=9000)


def test_map_encode_refuses_empty_usage() -> None:
    with pytest.raises(InvariantViolation):
        fmt.encode_ledgers_map({1: LedgerUsage(0, 0)})


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.integers(0, fmt.U64_MAX),
        st.builds(LedgerUsage, st.integers(1, fmt.U64_MAX), st.integers(1, fmt.U64_MAX)),
        max_size=50,
    )
)
def test_map_round_trip(usage: dict[int, LedgerUsage]) -> None:
    data = fmt.encode_ledgers_map(usage)
    assert len(data) == fmt.ledgers_map_size_bytes(len(usage))
    assert fmt.decode_ledgers_map(data, path=PATH, offset=4096) == usage
