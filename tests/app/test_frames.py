"""The frames codec (common.frames), as byte tables (STYLE 12), and a batch body
split as its chunks arrive (app/frames.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.frames import decode_upload
from common.errors import BadRequest, ConnectionLost, EntryTooLarge
from common.frames import decode_download, encode_download, encode_upload

UPLOADS = [
    (b"", []),
    (b"\x00\x00\x00\x00", [b""]),
    (b"\x00\x00\x00\x03abc", [b"abc"]),
    (b"\x00\x00\x00\x01a\x00\x00\x00\x02bc", [b"a", b"bc"]),
]


def split(body: bytes, *, chunk: int | None = None, count_max: int = 10,
          size_max: int = 10) -> list[bytes]:
    """decode_upload over ``body`` arriving in chunks of ``chunk`` bytes."""
    step = chunk or max(1, len(body))

    async def chunks() -> AsyncIterator[bytes]:
        for at in range(0, len(body), step):
            yield body[at:at + step]

    return asyncio.run(decode_upload(chunks(), count_max=count_max, size_max=size_max))


@pytest.mark.parametrize(("body", "payloads"), UPLOADS)
def test_upload_table(body, payloads):
    assert split(body) == payloads
    assert encode_upload(payloads) == body


@pytest.mark.parametrize(("body", "payloads"), UPLOADS)
def test_upload_split_at_every_byte_boundary(body, payloads):
    for chunk in range(1, len(body) + 1):
        assert split(body, chunk=chunk) == payloads


@pytest.mark.parametrize(
    "body",
    [b"\x00", b"\x00\x00\x00", b"\x00\x00\x00\x04abc", b"\x00\x00\x00\x01a\x00\x00"],
)
def test_upload_cut_at_each_boundary(body):
    for chunk in (1, 2, len(body)):
        with pytest.raises(BadRequest):
            split(body, chunk=chunk)


def test_upload_limits():
    with pytest.raises(EntryTooLarge):
        split(b"\x00\x00\x00\x0babcdefghijk")
    with pytest.raises(BadRequest, match="more than 2"):
        split(encode_upload([b"a", b"b", b"c"]), count_max=2)
    # A huge declared length is refused before anything is allocated.
    with pytest.raises(EntryTooLarge):
        split(b"\xff\xff\xff\xff", chunk=1)


@given(payloads=st.lists(st.binary(max_size=40), max_size=8), chunk=st.integers(1, 64))
def test_upload_round_trip_whatever_the_chunking(payloads, chunk):
    assert split(encode_upload(payloads), chunk=chunk, size_max=40) == payloads


def test_download_table():
    frame = encode_download(1, 0xE3069283, b"123456789")
    assert frame == (b"\x00\x00\x00\x00\x00\x00\x00\x01\xe3\x06\x92\x83\x00\x00\x00\x09123456789")
    assert decode_download(frame + encode_download(2**63 - 1, 0, b"")) == [
        (1, 0xE3069283, b"123456789"),
        (2**63 - 1, 0, b""),
    ]
    for cut in range(1, len(frame)):
        with pytest.raises(ConnectionLost):  # a range read cut mid-frame
            decode_download(frame[:cut])
