"""``application/x-ledgerd-frames`` read from and written to streams, incrementally.

The formats are the server's (``app/frames.py`` has the byte tables; a test
checks the two agree): an upload frame is a u32 big-endian length and the
payload; a download frame is a u64 entry id, a u32 CRC32C and a u32 length (all
big-endian), then the payload.  The server's codecs work on whole bodies; the
CLI reads stdin and response bodies of any size as they come, so these are
stream versions, and importing them does not import the server.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator

from ._output import usage_error

UPLOAD_HEADER = struct.Struct(">I")
DOWNLOAD_HEADER = struct.Struct(">QII")


def encode_upload(payloads: Iterable[bytes]) -> bytes:
    return b"".join(UPLOAD_HEADER.pack(len(p)) + p for p in payloads)


def encode_download(entry_id: int, crc32c: int, payload: bytes) -> bytes:
    return DOWNLOAD_HEADER.pack(entry_id, crc32c, len(payload)) + payload


class LineSplitter:
    """Lines (without their ``\\n``) out of bytes fed as they arrive; a last line
    without ``\\n`` counts too."""

    def __init__(self) -> None:
        self.rest = b""

    def feed(self, data: bytes) -> list[bytes]:
        lines = (self.rest + data).split(b"\n") if self.rest else data.split(b"\n")
        self.rest = lines.pop()
        return lines

    def finish(self) -> list[bytes]:
        rest, self.rest = self.rest, b""
        return [rest] if rest else []


class UploadFrameSplitter:
    """Payloads of upload frames out of bytes fed as they arrive; a cut frame at the
    end is a usage error naming it."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.index = 0  # frames split so far

    def feed(self, data: bytes) -> list[bytes]:
        # Appending to one buffer keeps a large frame spread over many reads linear.
        self.buffer += data
        payloads: list[bytes] = []
        offset = 0
        while len(self.buffer) - offset >= UPLOAD_HEADER.size:
            (length,) = UPLOAD_HEADER.unpack_from(self.buffer, offset)
            end = offset + UPLOAD_HEADER.size + length
            if end > len(self.buffer):
                break
            payloads.append(bytes(self.buffer[offset + UPLOAD_HEADER.size : end]))
            offset = end
        del self.buffer[:offset]
        self.index += len(payloads)
        return payloads

    def finish(self) -> list[bytes]:
        if len(self.buffer) >= UPLOAD_HEADER.size:
            (length,) = UPLOAD_HEADER.unpack_from(self.buffer)
            raise usage_error(f"stdin: frame {self.index} declares {length} bytes, only "
                              f"{len(self.buffer) - UPLOAD_HEADER.size} follow")
        if self.buffer:
            raise usage_error(f"stdin: frame {self.index} is cut inside its 4-byte length")
        return []


def decode_download_stream(chunks: Iterable[bytes]) -> Iterator[tuple[int, int, bytes]]:
    """(entry id, crc32c, payload) of each download frame in a body read in chunks."""
    buffer = bytearray()
    for chunk in chunks:
        # Appending to one buffer keeps a large frame spread over many chunks linear.
        buffer += chunk
        offset = 0
        while len(buffer) - offset >= DOWNLOAD_HEADER.size:
            entry_id, crc, length = DOWNLOAD_HEADER.unpack_from(buffer, offset)
            end = offset + DOWNLOAD_HEADER.size + length
            if end > len(buffer):
                break
            yield entry_id, crc, bytes(buffer[offset + DOWNLOAD_HEADER.size : end])
            offset = end
        del buffer[:offset]
    if buffer:
        raise CutStream(f"the server's frame stream ended inside a frame "
                        f"({len(buffer)} bytes left over)")


class CutStream(Exception):
    """The frame stream ended mid-frame: the server failed while streaming."""
