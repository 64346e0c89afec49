"""The ``application/x-ledgerd-frames`` format, one codec for every side of it: the
server's batch route and range reads, append streams (whose messages carry
upload frames) and the CLI.  Pure: bytes in, bytes out, fed as they arrive.

Upload frame (batch append, stream message), repeated::

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
from collections.abc import Iterable, Iterator

from .errors import BadRequest, ConnectionLost, EntryTooLarge, invariant

FRAMES_MEDIA_TYPE = "application/x-ledgerd-frames"

UPLOAD_HEADER = struct.Struct(">I")
DOWNLOAD_HEADER = struct.Struct(">QII")
invariant(UPLOAD_HEADER.size == 4 and DOWNLOAD_HEADER.size == 16, "frame header sizes")


def encode_upload(payloads: Iterable[bytes]) -> bytes:
    return b"".join(UPLOAD_HEADER.pack(len(p)) + p for p in payloads)


def encode_download(entry_id: int, crc32c: int, payload: bytes) -> bytes:
    return DOWNLOAD_HEADER.pack(entry_id, crc32c, len(payload)) + payload


class UploadSplitter:
    """Payloads out of upload frames fed as they arrive.  Each payload is copied
    once, out of what was fed (a payload spanning feeds is joined from views of
    them; nothing else is buffered).  A frame longer than ``size_max`` is
    EntryTooLarge and one past ``count_max`` BadRequest, as soon as its length
    shows; :meth:`finish` refuses a cut frame (BadRequest)."""

    def __init__(self, *, count_max: int | None = None, size_max: int | None = None) -> None:
        self._count_max = count_max
        self._size_max = size_max
        self.count = 0  # frames split so far
        self._head = bytearray()  # a length prefix cut between two feeds
        self._length: int | None = None  # of the frame being collected
        self._pieces: list[memoryview] = []  # its payload bytes so far, not copied
        self._have = 0

    def feed(self, data: bytes | memoryview) -> list[bytes]:
        """The payloads this completes."""
        view = memoryview(data)
        done: list[bytes] = []
        at = 0
        while at < len(view):
            if self._length is None:
                take = min(UPLOAD_HEADER.size - len(self._head), len(view) - at)
                if not self._head and take == UPLOAD_HEADER.size:
                    (length,) = UPLOAD_HEADER.unpack_from(view, at)
                else:
                    self._head += view[at:at + take]
                    if len(self._head) < UPLOAD_HEADER.size:
                        return done
                    (length,) = UPLOAD_HEADER.unpack(self._head)
                    self._head.clear()
                at += take
                self._start(length, done)
                continue  # an empty frame is complete already
            take = min(self._length - self._have, len(view) - at)
            self._pieces.append(view[at:at + take])
            self._have += take
            at += take
            if self._have == self._length:
                self._complete(done)
        return done

    def _start(self, length: int, done: list[bytes]) -> None:
        if self._size_max is not None and length > self._size_max:
            raise EntryTooLarge(f"frame {self.count}: {length} bytes exceeds the largest "
                                f"entry ({self._size_max} bytes, MAX_ENTRY_SIZE)")
        if self._count_max is not None and self.count >= self._count_max:
            raise BadRequest(f"more than {self._count_max} frames (MAX_BATCH_ENTRIES)")
        self._length, self._have = length, 0
        if length == 0:
            self._complete(done)

    def _complete(self, done: list[bytes]) -> None:
        pieces = self._pieces
        done.append(pieces[0].tobytes() if len(pieces) == 1 else b"".join(pieces))
        self._pieces, self._length = [], None
        self.count += 1

    def finish(self) -> None:
        """The input ended: BadRequest when it ended inside a frame."""
        if self._head:
            raise BadRequest(f"frame {self.count}: cut inside its 4-byte length")
        if self._length is not None:
            raise BadRequest(f"frame {self.count}: declares {self._length} bytes, only "
                             f"{self._have} follow")


def decode_upload(body: bytes | memoryview, **limits: int) -> list[bytes]:
    """Every payload of a whole body of upload frames (``limits`` as UploadSplitter's)."""
    splitter = UploadSplitter(**limits)
    payloads = splitter.feed(body)
    splitter.finish()
    return payloads


def decode_download_stream(chunks: Iterable[bytes]) -> Iterator[tuple[int, int, bytes]]:
    """(entry id, crc32c, payload) of each download frame in a body read in chunks;
    ConnectionLost when it ends inside a frame (the server failed mid-stream)."""
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
            yield entry_id, crc, bytes(buffer[offset + DOWNLOAD_HEADER.size:end])
            offset = end
        del buffer[:offset]
    if buffer:
        raise ConnectionLost(f"the frame stream ended inside a frame ({len(buffer)} bytes "
                             "left over)")


def decode_download(body: bytes) -> list[tuple[int, int, bytes]]:
    """Every frame of a whole range-read body."""
    return list(decode_download_stream([body]))
