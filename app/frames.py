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
from collections.abc import AsyncIterable

from common.errors import BadRequest, EntryTooLarge

FRAMES_MEDIA_TYPE = "application/x-ledgerd-frames"

UPLOAD_HEADER = struct.Struct(">I")
DOWNLOAD_HEADER = struct.Struct(">QII")
if UPLOAD_HEADER.size != 4 or DOWNLOAD_HEADER.size != 16:  # pragma: no cover
    raise ImportError("frame header sizes changed")


def encode_upload(payloads: list[bytes]) -> bytes:
    return b"".join(UPLOAD_HEADER.pack(len(p)) + p for p in payloads)


async def decode_upload(chunks: AsyncIterable[bytes], *, count_max: int,
                        size_max: int) -> list[bytes]:
    """Split a batch body into payloads as its chunks arrive: each payload is copied
    once, out of the chunks (a payload spanning chunks is joined from views of
    them), and the body is never joined.  Refuses a cut frame, too many frames
    (BadRequest) or one larger than ``size_max`` (EntryTooLarge) as soon as it
    shows, without reading on."""
    frames = _FrameSplitter(count_max=count_max, size_max=size_max)
    async for chunk in chunks:
        frames.feed(memoryview(chunk))
    return frames.finish()


class _FrameSplitter:
    def __init__(self, *, count_max: int, size_max: int) -> None:
        self._count_max = count_max
        self._size_max = size_max
        self.payloads: list[bytes] = []
        self._head = bytearray()  # a length prefix cut by a chunk boundary
        self._length: int | None = None  # of the frame being collected
        self._pieces: list[memoryview] = []  # its payload bytes so far, not copied
        self._have = 0

    def feed(self, view: memoryview) -> None:
        at = 0
        while at < len(view):
            if self._length is None:
                take = min(UPLOAD_HEADER.size - len(self._head), len(view) - at)
                if not self._head and take == UPLOAD_HEADER.size:
                    (length,) = UPLOAD_HEADER.unpack_from(view, at)
                else:
                    self._head += view[at:at + take]
                    if len(self._head) < UPLOAD_HEADER.size:
                        return
                    (length,) = UPLOAD_HEADER.unpack(self._head)
                    self._head.clear()
                at += take
                self._start(length)
                continue  # an empty frame is complete already
            take = min(self._length - self._have, len(view) - at)
            self._pieces.append(view[at:at + take])
            self._have += take
            at += take
            if self._have == self._length:
                self._complete()

    def _start(self, length: int) -> None:
        if length > self._size_max:
            raise EntryTooLarge(f"frame {len(self.payloads)}: {length} bytes exceeds the "
                                f"largest entry ({self._size_max} bytes, MAX_ENTRY_SIZE)")
        if len(self.payloads) >= self._count_max:
            raise BadRequest(f"more than {self._count_max} frames (MAX_BATCH_ENTRIES)")
        self._length, self._have = length, 0
        if length == 0:
            self._complete()

    def _complete(self) -> None:
        pieces = self._pieces
        self.payloads.append(pieces[0].tobytes() if len(pieces) == 1 else b"".join(pieces))
        self._pieces, self._length = [], None

    def finish(self) -> list[bytes]:
        if self._head:
            raise BadRequest(f"frame {len(self.payloads)}: cut length prefix at the end "
                             "of the body")
        if self._length is not None:
            raise BadRequest(f"frame {len(self.payloads)}: declares {self._length} bytes, "
                             "body ends early")
        return self.payloads


def encode_download(entry_id: int, crc32c: int, payload: bytes) -> bytes:
    return DOWNLOAD_HEADER.pack(entry_id, crc32c, len(payload)) + payload


def decode_download(body: bytes) -> list[tuple[int, int, bytes]]:
    """Inverse of :func:`encode_download` over a whole body (clients and tests)."""
    out: list[tuple[int, int, bytes]] = []
    offset = 0
    while offset < len(body):
        if len(body) - offset < DOWNLOAD_HEADER.size:
            raise BadRequest(f"cut frame header at byte {offset}")
        entry_id, crc, length = DOWNLOAD_HEADER.unpack_from(body, offset)
        offset += DOWNLOAD_HEADER.size
        if len(body) - offset < length:
            raise BadRequest(f"entry {entry_id}: declares {length} bytes, body ends early")
        out.append((entry_id, crc, body[offset : offset + length]))
        offset += length
    return out
