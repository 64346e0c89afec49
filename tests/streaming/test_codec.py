"""The §5a codec, byte for byte (STYLE 12: tables of literal bytes)."""

from __future__ import annotations

import pytest

from common import errors
from streaming import (
    ASSIGN,
    Ack,
    Acks,
    Batch,
    Failure,
    Limits,
    close_code,
    decode_batch,
    decode_server_message,
    encode_acks,
    encode_batch,
    encode_failure,
    error_from_problem,
    split_frames,
    split_lines,
    status_of_close,
)
from streaming._feed import group

LIMITS = Limits(entry_count_max=3, entry_size_bytes_max=8, batch_size_bytes_max=12)
SERVER_ASSIGNS = b"\xff" * 8
AT_5 = b"\x00\x00\x00\x00\x00\x00\x00\x05"


@pytest.mark.parametrize(("payloads", "first", "wire"), [
    ([b"ab"], None, SERVER_ASSIGNS + b"\x00\x00\x00\x02ab"),
    ([b"ab", b""], 5, AT_5 + b"\x00\x00\x00\x02ab\x00\x00\x00\x00"),
    ([b""], 0, b"\x00" * 8 + b"\x00\x00\x00\x00"),
])
def test_encode_batch(payloads, first, wire):
    assert encode_batch(payloads, first) == wire
    assert decode_batch(wire, LIMITS) == Batch(first, payloads, sum(map(len, payloads)))


def test_encode_batch_refuses_an_empty_batch():
    with pytest.raises(errors.BadRequest):
        encode_batch([])


@pytest.mark.parametrize(("wire", "decoded"), [
    (SERVER_ASSIGNS + b"\x00\x00\x00\x03abc", Batch(None, [b"abc"], 3)),
    (AT_5 + b"\x00\x00\x00\x01a\x00\x00\x00\x02bc\x00\x00\x00\x00",
     Batch(5, [b"a", b"bc", b""], 3)),
    (AT_5 + b"\x00\x00\x00\x08" + b"x" * 8, Batch(5, [b"x" * 8], 8)),  # the largest entry
    (AT_5 + (b"\x00\x00\x00\x06" + b"y" * 6) * 2, Batch(5, [b"y" * 6] * 2, 12)),  # largest batch
])
def test_decode_valid_messages(wire, decoded):
    assert decode_batch(wire, LIMITS) == decoded


@pytest.mark.parametrize(("wire", "error"), [
    (b"", errors.BadRequest),  # shorter than 8 bytes
    (b"\x00" * 7, errors.BadRequest),
    (AT_5, errors.BadRequest),  # no frame
    (AT_5 + b"\x00\x00", errors.BadRequest),  # cut length prefix
    (AT_5 + b"\x00\x00\x00\x03ab", errors.BadRequest),  # cut payload
    (AT_5 + b"\x00\x00\x00\x01a\x00\x00\x00\x03ab", errors.BadRequest),  # cut second frame
    (AT_5 + b"\x00\x00\x00\x01a\x00", errors.BadRequest),  # cut second length
    (AT_5 + b"\x00\x00\x00\x00" * 4, errors.BadRequest),  # more than 3 frames
    (AT_5 + b"\x00\x00\x00\x09" + b"x" * 9, errors.EntryTooLarge),  # entry over 8
    (AT_5 + (b"\x00\x00\x00\x05" + b"y" * 5) * 3, errors.EntryTooLarge),  # batch over 12
    (AT_5 + b"\x00\x00\x01\x00" + b"z" * 256, errors.EntryTooLarge),  # message over the limits
])
def test_decode_malformed_or_oversized_messages(wire, error):
    with pytest.raises(error) as caught:
        decode_batch(wire, LIMITS)
    # EntryTooLarge is a BadRequest too; a plain 400 must not be a 413
    assert isinstance(caught.value, errors.EntryTooLarge) == (error is errors.EntryTooLarge)


def test_one_frame_limit_checks_the_batch_limit_too():
    tight = Limits(entry_count_max=10, entry_size_bytes_max=100, batch_size_bytes_max=4)
    with pytest.raises(errors.EntryTooLarge):
        decode_batch(AT_5 + b"\x00\x00\x00\x05hello", tight)


def test_limits_know_the_largest_message():
    assert LIMITS.message_size_bytes_max == 8 + 12 + 4 * 3


def test_assign_is_the_all_ones_id():
    assert int.from_bytes(SERVER_ASSIGNS, "big") == ASSIGN


def test_acks_text_and_round_trip():
    text = encode_acks([(0, 10, 12), (1, 13, 13)], 13)
    assert text == '{"acks":[[0,10,12],[1,13,13]],"last_add_confirmed":13}'
    assert decode_server_message(text) == Acks((Ack(0, 10, 12), Ack(1, 13, 13)), 13)


def test_failure_text_and_round_trip():
    problem = {"type": "urn:ledgerd:error:EFENCED", "title": "Ledger fenced", "status": 409,
               "detail": "ledger 3 is fenced", "code": "EFENCED"}
    text = encode_failure(4, problem)
    decoded = decode_server_message(text)
    assert decoded == Failure(4, problem)
    assert isinstance(decoded, Failure) and decoded.status == 409


@pytest.mark.parametrize("text", ["", "[]", '{"acks": 3}', '{"seq": 1}', '{"seq": 1, "error": 2}',
                                  '{"acks": [[1, 2]], "last_add_confirmed": 0}'])
def test_server_messages_of_another_shape_are_invariant_violations(text):
    with pytest.raises(errors.InvariantViolation):
        decode_server_message(text)


@pytest.mark.parametrize(("status", "code"), [(400, 4400), (409, 4409), (413, 4413),
                                              (503, 4503), (507, 4507)])
def test_close_codes_carry_the_status(status, code):
    assert close_code(status) == code
    assert status_of_close(code) == status


@pytest.mark.parametrize("code", [1000, 1001, 1006, 1011, 3000, 4000, 4999])
def test_rfc_close_codes_carry_no_status(code):
    assert status_of_close(code) is None


@pytest.mark.parametrize(("code", "status", "cls"), [
    ("ENOLEDGER", 404, errors.NoSuchLedger),
    ("EUA", 403, errors.Unauthorized),
    ("EFENCED", 409, errors.LedgerFenced),
    ("ECLOSED", 409, errors.LedgerClosed),
    ("ECONFLICT", 409, errors.EntryConflict),
    ("EBADREQ", 400, errors.BadRequest),
    ("EBADREQ", 413, errors.EntryTooLarge),
    ("EREADONLY", 507, errors.ReadOnly),
    ("ETOOMANYREQUESTS", 503, errors.Backpressure),
    ("EIO", 500, errors.StorageUnavailable),
    ("ESOMETHINGNEW", 500, errors.StorageUnavailable),
])
def test_problems_map_onto_the_error_tree(code, status, cls):
    exc = error_from_problem({"status": status, "code": code, "detail": "d"}, ledger_id=7)
    assert type(exc) is cls
    assert any(code in note for note in exc.__notes__)
    if cls is errors.NoSuchLedger:
        assert exc.ledger_id == 7  # type: ignore[attr-defined]


@pytest.mark.parametrize(("data", "final", "entries", "rest"), [
    (b"a\nbc\n", False, [b"a", b"bc"], b""),
    (b"a\nbc", False, [b"a"], b"bc"),
    (b"a\nbc", True, [b"a", b"bc"], b""),
    (b"a\n\nb\n", True, [b"a", b"", b"b"], b""),
    (b"", True, [], b""),
    (b"a\r\n", True, [b"a\r"], b""),
])
def test_split_lines(data, final, entries, rest):
    assert split_lines(data, final=final) == (entries, rest)


@pytest.mark.parametrize(("data", "final", "entries", "rest"), [
    (b"\x00\x00\x00\x02ab\x00\x00\x00\x00", True, [b"ab", b""], b""),
    (b"\x00\x00\x00\x02ab\x00\x00\x00\x03x", False, [b"ab"], b"\x00\x00\x00\x03x"),
    (b"\x00\x00", False, [], b"\x00\x00"),
])
def test_split_frames(data, final, entries, rest):
    assert split_frames(data, final=final) == (entries, rest)


@pytest.mark.parametrize("data", [b"\x00\x00", b"\x00\x00\x00\x03ab"])
def test_split_frames_refuses_input_that_ends_inside_a_frame(data):
    with pytest.raises(errors.BadRequest):
        split_frames(data, final=True)


def test_group_respects_count_and_bytes():
    entries = [b"a", b"bb", b"ccc", b"dddddd", b"e"]
    assert group(entries, count_max=2, bytes_max=100) == [[b"a", b"bb"], [b"ccc", b"dddddd"],
                                                          [b"e"]]
    assert group(entries, count_max=10, bytes_max=6) == [[b"a", b"bb", b"ccc"], [b"dddddd"],
                                                         [b"e"]]
