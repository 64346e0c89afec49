"""The split-layout bench's framing: frames cut from a byte stream as they come."""

from __future__ import annotations

from bench.split_bench import _frames


def test_frames_are_taken_whole_and_a_cut_one_waits_for_the_rest() -> None:
    buffer = bytearray(b"\x00\x00\x00\x02ab" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x03x")
    assert list(_frames(buffer)) == [b"ab", b""]
    assert buffer == bytearray(b"\x00\x00\x00\x03x")  # the cut frame stays
    buffer += b"yz\x00"
    assert list(_frames(buffer)) == [b"xyz"]
    assert buffer == bytearray(b"\x00")  # not even a whole length yet
