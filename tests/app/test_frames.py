"""The frame codecs, as byte tables (STYLE 12)."""

from __future__ import annotations

import pytest

from app.frames import (
    FrameError,
    FrameTooLarge,
    decode_download,
    decode_upload,
    encode_download,
    encode_upload,
)

UPLOADS = [
    (b"", []),
    (b"\x00\x00\x00\x00", [b""]),
    (b"\x00\x00\x00\x03abc", [b"abc"]),
    (b"\x00\x00\x00\x01a\x00\x00\x00\x02bc", [b"a", b"bc"]),
]


@pytest.mark.parametrize(("body", "payloads"), UPLOADS)
def test_upload_table(body, payloads):
    assert decode_upload(body, count_max=10, size_max=10) == payloads
    assert encode_upload(payloads) == body


@pytest.mark.parametrize(
    "body",
    [b"\x00", b"\x00\x00\x00", b"\x00\x00\x00\x04abc", b"\x00\x00\x00\x01a\x00\x00"],
)
def test_upload_cut_at_each_boundary(body):
    with pytest.raises(FrameError):
        decode_upload(body, count_max=10, size_max=10)


def test_upload_limits():
    with pytest.raises(FrameTooLarge):
        decode_upload(b"\x00\x00\x00\x0babcdefghijk", count_max=10, size_max=10)
    with pytest.raises(FrameError, match="more than 2"):
        decode_upload(encode_upload([b"a", b"b", b"c"]), count_max=2, size_max=10)
    # A huge declared length is refused before anything is allocated.
    with pytest.raises(FrameTooLarge):
        decode_upload(b"\xff\xff\xff\xff", count_max=10, size_max=10)


def test_download_table():
    frame = encode_download(1, 0xE3069283, b"123456789")
    assert frame == (b"\x00\x00\x00\x00\x00\x00\x00\x01\xe3\x06\x92\x83\x00\x00\x00\x09123456789")
    assert decode_download(frame + encode_download(2**63 - 1, 0, b"")) == [
        (1, 0xE3069283, b"123456789"),
        (2**63 - 1, 0, b""),
    ]
    for cut in range(1, len(frame)):
        with pytest.raises(FrameError):
            decode_download(frame[:cut])
