"""The ``application/x-ledgerd-frames`` codecs (pure: bytes in, bytes out).

Upload frame (batch append), repeated::

    offset  size  field    endianness
    0       4     length   u32 big-endian
    4       n     payload

Download frame (range read), repeated::

    offset  size  field      endianness
    0       8     entry_id   u64 big-endian
    8       4     crc32c     u32 big-endian
    12      4     length     u32 big-endian
    16      n     payload
"""

from __future__ import annotations

import struct

FRAMES_MEDIA_TYPE = "application/x-ledgerd-frames"

UPLOAD_HEADER = struct.Struct(">I")
DOWNLOAD_HEADER = struct.Struct(">QII")
if UPLOAD_HEADER.size != 4 or DOWNLOAD_HEADER.size != 16:  # pragma: no cover
    raise ImportError("frame header sizes changed")


class FrameError(ValueError):
    """The body is not a well-formed sequence of frames."""


def encode_upload(payloads: list[bytes]) -> bytes:
    return b"".join(UPLOAD_HEADER.pack(len(p)) + p for p in payloads)


def decode_upload(body: bytes, *, count_max: int, size_max: int) -> list[bytes]:
    """Split a batch body; refuses a cut frame, too many frames or an oversized one."""
    view = memoryview(body)
    payloads: list[bytes] = []
    offset = 0
    while offset < len(view):
        if len(view) - offset < UPLOAD_HEADER.size:
            raise FrameError(f"frame {len(payloads)}: cut length prefix at byte {offset}")
        (length,) = UPLOAD_HEADER.unpack_from(view, offset)
        offset += UPLOAD_HEADER.size
        if length > size_max:
            raise FrameTooLarge(f"frame {len(payloads)}: {length} bytes exceeds {size_max}")
        if len(view) - offset < length:
            raise FrameError(f"frame {len(payloads)}: declares {length} bytes, body ends early")
        if len(payloads) >= count_max:
            raise FrameError(f"more than {count_max} frames")
        payloads.append(bytes(view[offset : offset + length]))
        offset += length
    return payloads


class FrameTooLarge(FrameError):
    """One frame is larger than the largest entry."""


def encode_download(entry_id: int, crc32c: int, payload: bytes) -> bytes:
    return DOWNLOAD_HEADER.pack(entry_id, crc32c, len(payload)) + payload


def decode_download(body: bytes) -> list[tuple[int, int, bytes]]:
    """Inverse of :func:`encode_download` over a whole body (clients and tests)."""
    out: list[tuple[int, int, bytes]] = []
    offset = 0
    while offset < len(body):
        if len(body) - offset < DOWNLOAD_HEADER.size:
            raise FrameError(f"cut frame header at byte {offset}")
        entry_id, crc, length = DOWNLOAD_HEADER.unpack_from(body, offset)
        offset += DOWNLOAD_HEADER.size
        if len(body) - offset < length:
            raise FrameError(f"entry {entry_id}: declares {length} bytes, body ends early")
        out.append((entry_id, crc, body[offset : offset + length]))
        offset += length
    return out
