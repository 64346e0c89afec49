"""The CLI's stdin splitters (cli/_frames.py) over the one frames codec (common.frames)."""

from __future__ import annotations

import pytest

from cli import _frames as client
from cli._output import CliError
from common import frames as codec
from common.errors import ConnectionLost

PAYLOADS = [b"", b"a", b"\n\n", bytes(range(256)) * 300, b"last"]


def pieces(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


@pytest.mark.parametrize("piece_size", [1, 7, 4096, 1 << 20])
def test_download_stream_in_any_pieces(piece_size):
    body = b"".join(codec.encode_download(i, 1000 + i, p) for i, p in enumerate(PAYLOADS))
    decoded = list(codec.decode_download_stream(pieces(body, piece_size)))
    assert decoded == codec.decode_download(body)
    assert [p for _, _, p in decoded] == PAYLOADS
    with pytest.raises(ConnectionLost):
        list(codec.decode_download_stream(pieces(body[:-1], piece_size)))


@pytest.mark.parametrize("piece_size", [1, 5, 1 << 20])
def test_upload_frames_split_in_any_pieces(piece_size):
    splitter = client.UploadFrameSplitter()
    body = codec.encode_upload(PAYLOADS)
    got = [p for piece in pieces(body, piece_size) for p in splitter.feed(piece)]
    assert got + splitter.finish() == PAYLOADS


@pytest.mark.parametrize(("tail", "message"), [
    (b"\x00\x00", "frame 5: cut inside its 4-byte length"),
    (b"\x00\x00\x00\x09abc", "frame 5: declares 9 bytes, only 3 follow"),
])
def test_a_cut_upload_frame_is_named(tail, message):
    splitter = client.UploadFrameSplitter()
    splitter.feed(codec.encode_upload(PAYLOADS) + tail)
    with pytest.raises(CliError, match=message) as raised:
        splitter.finish()
    assert raised.value.exit_code == 2


@pytest.mark.parametrize("piece_size", [1, 3, 1 << 20])
def test_lines_split_in_any_pieces(piece_size):
    splitter = client.LineSplitter()
    data = b"one\n\ntwo\r\nlast without newline"
    got = [line for piece in pieces(data, piece_size) for line in splitter.feed(piece)]
    assert got + splitter.finish() == [b"one", b"", b"two\r", b"last without newline"]
    splitter = client.LineSplitter()
    assert splitter.feed(b"a\nb\n") + splitter.finish() == [b"a", b"b"]
