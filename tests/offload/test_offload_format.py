"""Byte tables for the offload codecs: segment frames, the index, keys, chunk cutting."""

from __future__ import annotations

import itertools
import struct
from array import array

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.errors import CorruptRecord, InvalidSetting, InvariantViolation
from offload import _format as fmt
from offload._chunks import ChunkCutter, etag_matches, md5_of
from offload._keys import KeyLayout, ObjectKind, ParsedKey
from offload.settings import MiB, OffloadSettings

KEY = "ledgerd/default/b1/ledgers/5/seg-0/segment"

# --- segment frames ------------------------------------------------------------

# entry 7, payload b"abc":  entry_id | length | crc32c("abc") | payload
FRAME_7_ABC = bytes.fromhex("0000000000000007" "00000003" "364b3fb7") + b"abc"
# entry 8, payload b"de"
FRAME_8_DE = bytes.fromhex("0000000000000008" "00000002") + struct.pack(
    ">I", crc32c.crc32c(b"de")) + b"de"
SPAN = FRAME_7_ABC + FRAME_8_DE
FRAME_FIELD_BOUNDARIES = [0, 8, 12, 15]


def _flip(data: bytes, index: int) -> bytes:
    return data[:index] + bytes([data[index] ^ 0x01]) + data[index + 1:]


def test_frame_header_encodes_to_the_table() -> None:
    assert fmt.encode_frame_header(7, b"abc", crc32c.crc32c(b"abc")) + b"abc" == FRAME_7_ABC
    assert fmt.encode_frame_header(0, b"", 0) == bytes(16)


def test_frame_header_refuses_a_wrong_crc() -> None:
    with pytest.raises(InvariantViolation, match="does not match entry 7"):
        fmt.encode_frame_header(7, b"abc", 0)


@pytest.mark.parametrize(("target", "expected"), [(7, b"abc"), (8, b"de")])
def test_find_entry_in_a_span(target: int, expected: bytes) -> None:
    payload, crc = fmt.find_entry(SPAN, key=KEY, offset=100, first_entry_id=7, entry_id=target)
    assert payload == expected and crc == crc32c.crc32c(expected)


def test_iter_frames_yields_every_entry() -> None:
    assert [(e, p) for e, p, _ in fmt.iter_frames(SPAN, key=KEY, offset=0,
                                                    first_entry_id=7)] == [(7, b"abc"), (8, b"de")]
    assert list(fmt.iter_frames(b"", key=KEY, offset=0, first_entry_id=0)) == []


@pytest.mark.parametrize("cut", FRAME_FIELD_BOUNDARIES)
def test_frame_cut_at_field_boundary_is_corrupt(cut: int) -> None:
    with pytest.raises(CorruptRecord, match="frame header truncated") as info:
        fmt.find_entry(FRAME_7_ABC[:cut], key=KEY, offset=64, first_entry_id=7, entry_id=7)
    assert info.value.path == KEY and info.value.offset == 64


def test_frame_cut_in_the_payload_is_corrupt() -> None:
    with pytest.raises(CorruptRecord, match="runs past its span"):
        fmt.find_entry(FRAME_7_ABC[:18], key=KEY, offset=0, first_entry_id=7, entry_id=7)


@pytest.mark.parametrize(
    ("index", "reason"),
    [
        (0, "frame holds entry"),  # entry id
        (7, "frame holds entry"),
        (8, "runs past its span"),  # length
        (11, "payload crc32c mismatch in entry 7"),  # shorter: the CRC covers "ab"
        (12, "payload crc32c mismatch in entry 7"),  # crc
        (15, "payload crc32c mismatch in entry 7"),
        (16, "payload crc32c mismatch in entry 7"),  # payload
        (18, "payload crc32c mismatch in entry 7"),
    ],
)
def test_frame_flipped_byte_is_corrupt(index: int, reason: str) -> None:
    with pytest.raises(CorruptRecord, match=reason) as info:
        fmt.find_entry(_flip(FRAME_7_ABC, index), key=KEY, offset=4096, first_entry_id=7,
                       entry_id=7)
    assert info.value.path == KEY


def test_walked_frame_with_a_wrong_length_is_caught_at_the_target() -> None:
    # Entry 7's length says 2 instead of 3: the walk lands inside its payload,
    # where the "entry id" read is not 8.
    bad = FRAME_7_ABC[:8] + struct.pack(">I", 2) + FRAME_7_ABC[12:] + FRAME_8_DE
    with pytest.raises(CorruptRecord, match="expected entry 8") as info:
        fmt.find_entry(bad, key=KEY, offset=1000, first_entry_id=7, entry_id=8)
    assert info.value.offset == 1000 + 18


# --- index -------------------------------------------------------------------

FACTS = fmt.LedgerFacts(ledger_id=5, last_entry_id=1, length_bytes=5, created_at=1.5,
                        closed_at=2.5, metadata={"a": "b"})
INDEX_TWO_ENTRIES = bytes.fromhex(
    "4c444f49"  # magic "LDOI"
    "00000001"  # version 1
    "0000000000000005"  # ledger_id 5
    "0000000000000000"  # first_entry_id 0
    "0000000000000002"  # entry_count 2
    "0000000000000025"  # segment_length 37 (19 + 18)
    "0000000000000001"  # ledger_last_entry_id 1
    "0000000000000005"  # ledger_length 5
    "3ff8000000000000"  # created_at 1.5
    "4004000000000000"  # closed_at 2.5
    "00000001"  # point_count 1
    "00000009"  # metadata_length 9
    "7b2261223a2262227d"  # {"a":"b"}
    "0000000000000000" "0000000000000000"  # point: entry 0 at offset 0
    "87feb8a5"  # crc32c of everything above
)
INDEX_EMPTY_LEDGER = bytes.fromhex(
    "4c444f49" "00000001" "0000000000000009" "0000000000000000" "0000000000000000"
    "0000000000000000" "ffffffffffffffff" "0000000000000000" "3ff8000000000000"
    "4004000000000000" "00000000" "00000002" "7b7d" "86130c9f")
INDEX_FIELD_BOUNDARIES = [0, 4, 8, 16, 24, 32, 40, 48, 56, 64, 72, 76, 80, 89, 105, 108]


def _two_entry_index() -> fmt.SegmentIndex:
    builder = fmt.IndexBuilder(0)
    builder.add(0, 19)
    builder.add(1, 18)
    return builder.build(FACTS)


def test_index_encodes_to_the_table() -> None:
    assert fmt.encode_index(_two_entry_index()) == INDEX_TWO_ENTRIES
    empty = fmt.IndexBuilder(0).build(fmt.LedgerFacts(
        ledger_id=9, last_entry_id=-1, length_bytes=0, created_at=1.5, closed_at=2.5))
    assert fmt.encode_index(empty) == INDEX_EMPTY_LEDGER


def test_index_decodes_from_the_table() -> None:
    index = fmt.decode_index(INDEX_TWO_ENTRIES, key=KEY)
    assert index == _two_entry_index()
    assert index.span_of(1) == (0, 37, 0)
    empty = fmt.decode_index(INDEX_EMPTY_LEDGER, key=KEY)
    assert empty.entry_count == 0 and empty.ledger.last_entry_id == -1


@pytest.mark.parametrize("cut", INDEX_FIELD_BOUNDARIES)
def test_index_cut_at_field_boundary_is_corrupt(cut: int) -> None:
    with pytest.raises(CorruptRecord, match=r"index truncated|index needs") as info:
        fmt.decode_index(INDEX_TWO_ENTRIES[:cut], key=KEY)
    assert info.value.path == KEY


@pytest.mark.parametrize("index", [0, 3])
def test_index_bad_magic(index: int) -> None:
    with pytest.raises(CorruptRecord, match="bad index magic"):
        fmt.decode_index(_flip(INDEX_TWO_ENTRIES, index), key=KEY)


@pytest.mark.parametrize("index", [4, 15, 24, 40, 56, 64, 80, 88, 95, 104, 108])
def test_index_flipped_byte_is_corrupt(index: int) -> None:
    with pytest.raises(CorruptRecord, match="crc32c mismatch"):
        fmt.decode_index(_flip(INDEX_TWO_ENTRIES, index), key=KEY)


@pytest.mark.parametrize("index", [72, 76])  # counts: the size no longer adds up
def test_index_flipped_count_is_corrupt(index: int) -> None:
    with pytest.raises(CorruptRecord, match="index needs"):
        fmt.decode_index(_flip(INDEX_TWO_ENTRIES, index + 3), key=KEY)


def _reseal(body: bytes) -> bytes:
    return body + struct.pack(">I", crc32c.crc32c(body))


def test_index_other_version_is_refused() -> None:
    body = bytearray(INDEX_TWO_ENTRIES[:-4])
    body[4:8] = struct.pack(">I", 2)
    with pytest.raises(CorruptRecord, match="unsupported index version 2"):
        fmt.decode_index(_reseal(bytes(body)), key=KEY)


def test_index_with_valid_crc_but_contradicting_fields_is_a_bug() -> None:
    body = bytearray(INDEX_TWO_ENTRIES[:-4])
    body[24:32] = struct.pack(">Q", 3)  # three entries, but the ledger's last entry is 1
    with pytest.raises(InvariantViolation, match="past the ledger's last entry"):
        fmt.decode_index(_reseal(bytes(body)), key=KEY)


def test_index_metadata_that_is_not_json_is_corrupt() -> None:
    body = bytearray(INDEX_TWO_ENTRIES[:-4])
    body[80:89] = b"{not json"
    with pytest.raises(CorruptRecord, match="not JSON"):
        fmt.decode_index(_reseal(bytes(body)), key=KEY)


def test_points_are_sparse_but_bound_the_span() -> None:
    stride = fmt.POINT_STRIDE_BYTES
    builder = fmt.IndexBuilder(10)
    sizes = [100] * 400 + [3 * stride] + [100] * 10
    for i, size in enumerate(sizes):
        builder.add(10 + i, size)
    index = builder.build(fmt.LedgerFacts(ledger_id=1, last_entry_id=10 + len(sizes),
                                          length_bytes=0, created_at=0.0, closed_at=0.0))
    big = 10 + 400
    assert big in index.point_entry_ids and big + 1 in index.point_entry_ids
    offsets = [*index.point_offsets, index.segment_length_bytes]
    spans = [b - a for a, b in itertools.pairwise(offsets)]
    assert max(s for s in spans if s != 3 * stride) < 2 * stride
    assert len(index.point_offsets) < len(sizes) // 10


# --- hypothesis round trips ------------------------------------------------------

payloads = st.lists(st.binary(max_size=40_000), max_size=30)


@settings(max_examples=60, deadline=None)
@given(payloads, st.integers(0, 2**40), st.dictionaries(st.text(max_size=5),
                                                         st.text(max_size=5), max_size=3))
def test_segment_and_index_round_trip(items: list[bytes], first: int,
                                      metadata: dict[str, str]) -> None:
    segment = b"".join(fmt.encode_frame_header(first + i, p, crc32c.crc32c(p)) + p
                       for i, p in enumerate(items))
    builder = fmt.IndexBuilder(first)
    for i, p in enumerate(items):
        builder.add(first + i, 16 + len(p))
    facts = fmt.LedgerFacts(ledger_id=3, last_entry_id=first + len(items) - 1 if items else -1,
                            length_bytes=sum(map(len, items)), created_at=1.0, closed_at=2.0,
                            metadata=metadata)
    if not items:
        facts = fmt.LedgerFacts(ledger_id=3, last_entry_id=-1, length_bytes=0, created_at=1.0,
                                closed_at=2.0, metadata=metadata)
        first = 0
        builder = fmt.IndexBuilder(0)
    index = fmt.decode_index(fmt.encode_index(builder.build(facts)), key=KEY)
    assert index.segment_length_bytes == len(segment) and index.ledger == facts
    for i, p in enumerate(items):
        start, end, span_first = index.span_of(first + i)
        assert fmt.find_entry(segment[start:end], key=KEY, offset=start,
                              first_entry_id=span_first, entry_id=first + i)[0] == p
    assert [p for _, p, _ in fmt.iter_frames(segment, key=KEY, offset=0,
                                              first_entry_id=first)] == items


@settings(max_examples=60, deadline=None)
@given(payloads, st.data())
def test_any_flipped_segment_byte_is_detected(items: list[bytes], data: st.DataObject) -> None:
    items = [p for p in items if p] or [b"x"]
    segment = b"".join(fmt.encode_frame_header(i, p, crc32c.crc32c(p)) + p
                       for i, p in enumerate(items))
    position = data.draw(st.integers(0, len(segment) - 1))
    damaged = _flip(segment, position)
    with pytest.raises(CorruptRecord):
        list(fmt.iter_frames(damaged, key=KEY, offset=0, first_entry_id=0))


# --- keys ----------------------------------------------------------------------


def _settings(**overrides: object) -> OffloadSettings:
    base: dict[str, object] = {"bucket": "ledgers", "prefix": "ledgerd", "cluster": "c1",
                               "bookie_id": "b1"}
    return OffloadSettings(**{**base, **overrides})  # type: ignore[arg-type]


def test_keys_follow_the_documented_layout() -> None:
    layout = KeyLayout(_settings(prefix="tier/ledgerd"))
    assert layout.ledger_prefix(42) == "tier/ledgerd/c1/b1/ledgers/42/"
    assert layout.chunk_key(42, 100, 8388608) == (
        "tier/ledgerd/c1/b1/ledgers/42/seg-100/chunk-8388608")
    assert layout.segment_key(42, 0) == "tier/ledgerd/c1/b1/ledgers/42/seg-0/segment"
    assert layout.index_key(42, 0) == "tier/ledgerd/c1/b1/ledgers/42/seg-0/index"


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("ledgerd/c1/b1/ledgers/42/seg-7/chunk-0", ParsedKey(42, 7, ObjectKind.CHUNK, 0)),
        ("ledgerd/c1/b1/ledgers/42/seg-7/segment", ParsedKey(42, 7, ObjectKind.SEGMENT, 0)),
        ("ledgerd/c1/b1/ledgers/0/seg-0/index", ParsedKey(0, 0, ObjectKind.INDEX, 0)),
        ("ledgerd/c1/b1/ledgers/42/seg-07/index", None),  # padded numbers are not ours
        ("ledgerd/c1/b1/ledgers/42/seg-7/chunk-", None),
        ("ledgerd/c1/b1/ledgers/42/seg-7/other", None),
        ("ledgerd/c1/b2/ledgers/42/seg-7/index", None),  # another bookie
        ("ledgerd/c1/b1/ledgers/18446744073709551616/seg-0/index", None),  # > u64
    ],
)
def test_parse_key(key: str, expected: ParsedKey | None) -> None:
    assert KeyLayout(_settings()).parse(key) == expected


@pytest.mark.parametrize(
    ("overrides", "setting"),
    [
        ({"prefix": "../x"}, "S3_PREFIX"),
        ({"prefix": "/abs"}, "S3_PREFIX"),
        ({"prefix": "a//b"}, "S3_PREFIX"),
        ({"prefix": "a b"}, "S3_PREFIX"),
        ({"cluster": "a/b"}, "CLUSTER"),
        ({"bookie_id": ".."}, "BOOKIE_ID"),
        ({"bookie_id": ""}, "BOOKIE_ID"),
        ({"bucket": "Bad_Bucket"}, "S3_BUCKET"),
        ({"chunk_size_bytes": 5 * MiB - 1}, "OFFLOAD_CHUNK_SIZE"),
        ({"segment_size_bytes_max": 4 * MiB}, "OFFLOAD_SEGMENT_SIZE_MAX"),
        ({"read_ahead_bytes_min": MiB // 2}, "OFFLOAD_READ_AHEAD_MIN"),
        ({"read_ahead_bytes_max": 3 * MiB + 1}, "OFFLOAD_READ_AHEAD_MAX"),
        ({"read_cache_size_bytes": 16 * MiB}, "OFFLOAD_READ_CACHE_SIZE"),
        ({"retry_attempts_max": 0}, "OFFLOAD_RETRY_ATTEMPTS"),
        ({"upload_concurrency": 0}, "OFFLOAD_UPLOAD_CONCURRENCY"),
        ({"deletion_lag_s": -1.0}, "OFFLOAD_DELETION_LAG"),
    ],
)
def test_settings_name_the_bad_setting(overrides: dict[str, object], setting: str) -> None:
    with pytest.raises(InvalidSetting, match=f"invalid setting {setting}:"):
        _settings(**overrides).check()


def test_default_settings_are_valid() -> None:
    OffloadSettings(bucket="ledgers").check()


# --- chunk cutting ---------------------------------------------------------------


def test_chunks_are_cut_at_exact_multiples() -> None:
    cutter = ChunkCutter(10)
    assert cutter.add(b"a" * 10) == []  # exactly one chunk: not cut yet
    cut = cutter.add(b"b" * 15)
    assert [(c.byte_position, c.data) for c in cut] == [(0, b"a" * 10), (10, b"b" * 10)]
    assert cutter.finish() == (20, b"b" * 5)
    assert cutter.chunks_cut == 2


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.binary(max_size=25), max_size=3), max_size=12),
       st.integers(1, 10))
def test_chunks_hold_the_pieces_in_order_whatever_their_sizes(
        adds: list[list[bytes]], chunk_size: int) -> None:
    cutter = ChunkCutter(chunk_size)
    chunks = [chunk for pieces in adds for chunk in cutter.add(*pieces)]
    tail = cutter.finish()
    stream = b"".join(b"".join(pieces) for pieces in adds)
    assert all(len(c.data) == chunk_size for c in chunks)
    assert [c.byte_position for c in [*chunks, tail]] == [
        i * chunk_size for i in range(len(chunks) + 1)]
    assert b"".join(c.data for c in [*chunks, tail]) == stream
    # Bytes past a full chunk cut it; a full chunk with nothing after stays the tail.
    assert 0 < len(tail.data) <= chunk_size or stream == b""


def test_md5_and_etags() -> None:
    hex_digest, b64 = md5_of(b"")
    assert hex_digest == "d41d8cd98f00b204e9800998ecf8427e" and b64 == "1B2M2Y8AsgTpgAmY7PhCfg=="
    assert etag_matches(hex_digest, hex_digest)
    assert not etag_matches("0" * 32, hex_digest)
    assert etag_matches("3858f62230ac3c915f300c664312c11f-2", hex_digest)  # not an MD5


def test_points_survive_a_round_trip_as_arrays() -> None:
    index = fmt.decode_index(INDEX_TWO_ENTRIES, key=KEY)
    assert index.point_entry_ids == array("Q", [0]) and index.point_offsets == array("Q", [0])
